"""Generated training code around the rules' patterns: fixes parse, compile, settle, and touch nothing else.

Hypothesis assembles modules from the pieces the rules look at (tapes, loss
scaling, optimizers with epsilons, masks, tf.function decorators, policies,
noqa comments) in Keras 2 and Keras 3 spellings, with LF/CRLF endings and
with or without a BOM, then runs `apply --unsafe-fixes` twice in-process.
"""

from __future__ import annotations

import codecs
import tempfile
from pathlib import Path

import libcst as cst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpfix.codemods import all_rules
from mpfix.engine import Options
from mpfix.runner import Job, Mode, process_file
from mpfix.source import decode

HEADERS = [
    "import tensorflow as tf\n",
    "import tensorflow as tf\nfrom tensorflow import keras\n",
    "import tensorflow as tf\nfrom tensorflow.keras import mixed_precision\n",
    "import tensorflow as tf\nimport tf_keras\n",
    "import keras\nimport tensorflow as tf\n",
]
POLICIES = [
    "",
    'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n',
    'keras.mixed_precision.set_global_policy("mixed_float16")\n',
    "tf.keras.mixed_precision.experimental.set_policy('mixed_float16')\n",
]
OPTIMIZERS = [
    "optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)\n",
    "optimizer = tf.keras.optimizers.Adam(1e-3, epsilon=1e-8)\n",
    "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))\n",
    "optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam(), loss_scale='dynamic')\n",
    "optimizer = tf_keras.optimizers.Adam(epsilon=1e-7)\n",
]
DECORATORS = ["", "@tf.function\n", "@tf.function(experimental_relax_shapes=True)\n",
              "@tf.function(jit_compile=True, experimental_relax_shapes=True)\n"]
MASKS = ["", "    logits += (1.0 - mask) * -1e9\n", "    logits = tf.where(mask, logits, -1e4)\n",
         "    logits = logits - 1e30 * (1 - mask)\n"]
SCALING = [
    ("", "loss"),
    ("        scaled = optimizer.get_scaled_loss(loss)\n", "scaled"),
    ("        scaled = optimizer.scale_loss(loss)\n", "scaled"),
]
EPSILONS = ["", "    denom = tf.norm(x, axis=-1, keepdims=True) + 1e-8\n",
            "    probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits))\n",
            "    var = tf.reduce_mean(tf.square(x)) + 1e-12\n"]
NOQA = ["", "  # noqa: MP101", "  # noqa", "  # mpfix: ignore[MP306]", "  # mpfix: ignore[MP2]"]
TAILS = ["", "tf.config.experimental_run_functions_eagerly(True)\n", "model.compile(optimizer=optimizer, loss='mse')\n"]


@st.composite
def training_modules(draw) -> tuple[bytes, str, bool]:
    scale_line, scaled = draw(st.sampled_from(SCALING))
    noqa = draw(st.sampled_from(NOQA))
    step = (
        draw(st.sampled_from(DECORATORS))
        + "def train_step(model, x, y, mask):" + noqa + "\n"
        + "    with tf.GradientTape() as tape:" + draw(st.sampled_from(NOQA)) + "\n"
        + "        logits = model(x, training=True)\n"
        + draw(st.sampled_from(MASKS)).replace("    ", "        ", 1)
        + "        loss = tf.reduce_mean(tf.square(logits - y))\n"
        + scale_line
        + f"    grads = tape.gradient({scaled}, model.trainable_variables)\n"
        + draw(st.sampled_from(["", "    grads = optimizer.get_unscaled_gradients(grads)\n"]))
        + "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        + "    return loss\n"
    )
    helper = "def helper(x, logits, mask):\n" + draw(st.sampled_from(EPSILONS)) + draw(st.sampled_from(MASKS)) \
        + "    return x\n"
    parts = [draw(st.sampled_from(HEADERS)), draw(st.sampled_from(POLICIES)), draw(st.sampled_from(OPTIMIZERS))]
    body = draw(st.permutations([step, helper]))
    text = "".join(parts) + "\n\n" + "\n\n".join(body) + "\n" + draw(st.sampled_from(TAILS))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    bom = draw(st.booleans())
    data = (codecs.BOM_UTF8 if bom else b"") + text.replace("\n", newline).encode()
    return data, newline, bom


JOB = Job(rule_codes=tuple(r.code for r in all_rules()),
          options=Options(keras="auto", unsafe_fixes=True, project_policy=False), mode=Mode.APPLY)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_modules())
def test_generated_training_code_round_trips(module):
    data, newline, bom = module
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.py"
        path.write_bytes(data)
        first = process_file(path, JOB)
        assert not first.errors, [e.message for e in first.errors]
        written = path.read_bytes()
        if not first.written:
            assert written == data  # untouched files stay byte-identical
        else:
            assert first.applied >= 1 and written != data
        assert written.startswith(codecs.BOM_UTF8) == bom
        text = decode(written).text
        if newline == "\r\n":
            assert "\n" not in text.replace("\r\n", ""), "a fix introduced a bare LF into a CRLF file"
        cst.parse_module(text)
        compile(text, "train.py", "exec", dont_inherit=True)
        second = process_file(path, JOB)
        assert not second.errors and not second.written, "a second apply changed the file again"
        assert path.read_bytes() == written
