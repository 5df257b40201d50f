"""Cross-file callers (``mpfix.project.crosscalls``): functions other files call from float16 code, or hand a
Keras model, are analysed as the callers see them (issue 18: N2, C33).

Each test is a small realistic project on disk checked through the runner, as ``mpfix check`` does.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix import policy as policies
from mpfix.engine import Options
from mpfix.project import facts as project_facts
from mpfix.project.crosscall_records import ArgKind, CallContext
from mpfix.codemods import all_rules
from mpfix.runner import Job, Mode, process_all

from .project_fixtures import _fresh, project  # noqa: F401  (fixtures)

# tfexamples efficientdet utils.py (N2): srelu casts 160000 to its input's dtype.
UTILS = textwrap.dedent("""
    import tensorflow as tf


    def srelu_fn(x):
        beta = tf.Variable(20.0, name="srelu_beta", dtype=tf.float32) ** 2
        beta = tf.cast(beta**2, x.dtype)
        safe_log = tf.math.log(tf.where(x > 0.0, beta * x + 1.0, tf.ones_like(x)))
        return tf.where(x > 0.0, x - (1.0 / beta) * safe_log, tf.zeros_like(x))


    def activation_fn(features, act_type):
        if act_type == "srelu":
            return srelu_fn(features)
        return tf.nn.relu(features)
""").lstrip("\n")

BASE = "import tensorflow as tf\n\n\nclass BaseBlock(tf.keras.layers.Layer):\n    pass\n"

LAYERS = textwrap.dedent("""
    import tensorflow as tf

    from pkg import utils
    from pkg.base import BaseBlock


    class Block(BaseBlock):
        def __init__(self, act_type="srelu"):
            super().__init__()
            self.act_type = act_type
            self.conv = tf.keras.layers.Conv2D(8, 3)

        def call(self, x):
            return utils.activation_fn(ARGUMENT, self.act_type)
""").lstrip("\n")

ENTRY = textwrap.dedent("""
    import tensorflow as tf

    from pkg.layers import Block

    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf.keras.Sequential([Block()])
""").lstrip("\n")

# research DELF global_model.py (C33: N15, N16): helpers handed the model.
NET = textwrap.dedent("""
    import tensorflow as tf


    class GlobalNet(tf.keras.Model):
        def __init__(self, dim=8):
            super().__init__()
            self.dense = tf.keras.layers.Dense(dim)

        def call(self, x):
            return self.dense(x)
""").lstrip("\n")

EXTRACT = textwrap.dedent("""
    import tensorflow as tf


    def extract_multi_scale(net, image, scales):
        descriptors = tf.zeros((8,))
        for s in scales:
            descriptors += tf.pow(net(tf.image.resize(image, [16 * s, 16 * s])), 3.0)
        return descriptors / len(scales)


    def extract_all(net, images, scales):
        return [extract_multi_scale(net, image, scales) for image in images]
""").lstrip("\n")

TRAIN = textwrap.dedent("""
    import tensorflow as tf

    from pkg import extract
    from pkg.net import GlobalNet

    tf.keras.mixed_precision.set_global_policy("mixed_float16")


    def main(images):
        net = GlobalNet()
        return extract.extract_all(net, images, [1, 2])
""").lstrip("\n")


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _check(root: Path, *, cache: bool = False, **options) -> list[str]:
    job = Job(rule_codes=tuple(r.code for r in all_rules()), options=Options(keras="3", **options), mode=Mode.CHECK)
    files = sorted(p for p in root.rglob("*.py") if ".mpfix_cache" not in p.parts)
    results = process_all(files, job, jobs=1, cache=cache)
    return sorted(f"{r.path.relative_to(root).as_posix()}:{f.line}:{f.code}" for r in results for f in r.findings)


def _n2(root: Path, argument: str = "x") -> None:
    _write(root, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/base.py": BASE,
                  "pkg/layers.py": LAYERS.replace("ARGUMENT", argument), "train.py": ENTRY})


def test_a_helper_only_another_files_layer_calls_sees_its_float16_activations(project: Path):
    """N2: ``activation_fn`` is called from ``Block.call`` in layers.py (Block is a Keras layer through the
    project's BaseBlock); ``srelu_fn`` casts 160000 to float16 there."""
    _n2(project)
    assert _check(project) == ["pkg/utils.py:6:MP201"]
    calls = project_facts.file_facts(project / "pkg" / "utils.py").cross_calls
    assert [(c.function, c.context) for c in calls] == [("activation_fn", CallContext.LAYER_CALL)]
    assert dict(calls[0].args) == {"features": ArgKind.TENSOR, "act_type": ArgKind.UNKNOWN}


def test_a_caller_that_passes_float32_gives_no_finding(project: Path):
    _n2(project, "tf.cast(x, tf.float32)")
    assert _check(project) == []
    calls = project_facts.file_facts(project / "pkg" / "utils.py").cross_calls
    assert dict(calls[0].args)["features"] is ArgKind.FLOAT32


def test_a_caller_outside_float16_code_seeds_nothing(project: Path):
    """Called from a plain function (not a layer's call, not a train step), the helper stays unanalysed."""
    plain = "import tensorflow as tf\n\nfrom pkg import utils\n\n\ndef preprocess(x):\n" \
            "    return utils.activation_fn(x, 'srelu')\n"
    _write(project, {"pkg/__init__.py": "", "pkg/utils.py": UTILS, "pkg/prep.py": plain, "train.py": ENTRY.replace(
        "from pkg.layers import Block", "from pkg.prep import preprocess").replace("[Block()]", "[]")})
    assert _check(project) == []
    assert project_facts.file_facts(project / "pkg" / "utils.py").cross_calls == ()


def test_a_new_caller_in_another_file_invalidates_the_cached_result(project: Path):
    """The fact is in the file's cache key: utils.py is untouched, layers.py starts (then stops) calling it."""
    _n2(project)
    layers = project / "pkg" / "layers.py"
    layers.write_text(LAYERS.replace("utils.activation_fn(ARGUMENT, self.act_type)", "self.conv(x)"))
    assert _check(project, cache=True) == []
    assert _check(project, cache=True) == []  # served from the cache
    layers.write_text(LAYERS.replace("ARGUMENT", "x"))
    policies.forget_projects()  # a new process: nothing remembered but the cache folder
    assert _check(project, cache=True) == ["pkg/utils.py:6:MP201"]
    layers.write_text(LAYERS.replace("ARGUMENT", "tf.cast(x, tf.float32)"))
    policies.forget_projects()
    assert _check(project, cache=True) == []
    assert _check(project, cache=False) == []


def test_a_function_handed_a_project_model_sees_its_float16_outputs(project: Path):
    """C33 (N16): ``net`` is a GlobalNet (a tf.keras.Model) built in train.py and passed on through
    ``extract_all``; ``tf.pow(net(x), 3)`` of its float16 output overflows, and adding it to the float32
    ``descriptors`` raises (MP206, turn 7)."""
    _write(project, {"pkg/__init__.py": "", "pkg/net.py": NET, "pkg/extract.py": EXTRACT, "train.py": TRAIN})
    assert _check(project) == ["pkg/extract.py:7:MP204", "pkg/extract.py:7:MP206"]
    calls = project_facts.file_facts(project / "pkg" / "extract.py").cross_calls
    assert {c.function: c.keras_instances for c in calls} == {"extract_all": frozenset({"net"}),
                                                             "extract_multi_scale": frozenset({"net"})}


def test_a_model_whose_head_may_be_float32_is_not_taken_for_float16(project: Path):
    """A model class that spells float32 (a ``dtype="float32"`` head) may return float32: unknown, no finding."""
    head = NET.replace("tf.keras.layers.Dense(dim)", 'tf.keras.layers.Dense(dim, dtype="float32")')
    _write(project, {"pkg/__init__.py": "", "pkg/net.py": head, "pkg/extract.py": EXTRACT, "train.py": TRAIN})
    assert _check(project) == []
    assert project_facts.file_facts(project / "pkg" / "extract.py").cross_calls == ()


def test_a_plain_object_passed_is_no_model(project: Path):
    """Bindings decide, not names: ``net`` bound to a plain class instance is not a Keras model."""
    plain = "class GlobalNet:\n    def __call__(self, x):\n        return x\n"
    _write(project, {"pkg/__init__.py": "", "pkg/net.py": plain, "pkg/extract.py": EXTRACT, "train.py": TRAIN})
    assert _check(project) == []


def test_a_caller_that_stops_passing_a_model_invalidates_the_cached_result(project: Path):
    """The Keras-instance fact is in the key too: extract.py is untouched, train.py changes what it passes."""
    _write(project, {"pkg/__init__.py": "", "pkg/net.py": NET, "pkg/extract.py": EXTRACT, "train.py": TRAIN})
    assert _check(project, cache=True) == ["pkg/extract.py:7:MP204", "pkg/extract.py:7:MP206"]
    assert _check(project, cache=True) == ["pkg/extract.py:7:MP204", "pkg/extract.py:7:MP206"]  # served from the cache
    (project / "train.py").write_text(TRAIN.replace("net = GlobalNet()", "net = lambda x: tf.cast(x, tf.float32)"))
    policies.forget_projects()
    assert _check(project, cache=True) == []
    assert _check(project, cache=False) == []


MODEL_UTILS = textwrap.dedent("""
    import tensorflow as tf

    _NEG_INF_FP32 = -1e9


    def get_padding(x, padding_value=0, dtype=tf.float32):
        return tf.cast(tf.equal(x, padding_value), dtype)


    def get_padding_bias(x, padding_value=0, dtype=tf.float32):
        padding = get_padding(x, padding_value, dtype)
        attention_bias = padding * _NEG_INF_FP32
        return tf.expand_dims(tf.expand_dims(attention_bias, axis=1), axis=1)
""").lstrip("\n")

TRANSFORMER = textwrap.dedent("""
    import tensorflow as tf

    from pkg import model_utils


    class Transformer(tf.keras.Model):
        def call(self, inputs):
            attention_bias = model_utils.get_padding_bias(inputs)
            return attention_bias
""").lstrip("\n")


def test_a_dtype_parameter_the_callers_leave_at_float32_keeps_the_helper_float32(project: Path):
    """tfm legacy/transformer model_utils.py (found as a false MP201 in the first corpus run): the callers leave
    ``dtype`` at its ``tf.float32`` default, so the padding bias is float32 and -1e9 is fine; the in-file helper
    ``get_padding`` learns the spelling one round later than its caller (recomputed with it)."""
    _write(project, {"pkg/__init__.py": "", "pkg/model_utils.py": MODEL_UTILS, "pkg/transformer.py": TRANSFORMER,
                     "train.py": ENTRY.replace("pkg.layers import Block", "pkg.transformer import Transformer")
                     .replace("tf.keras.Sequential([Block()])", "Transformer()")})
    calls = project_facts.file_facts(project / "pkg" / "model_utils.py").cross_calls
    assert [(c.function, c.context, dict(c.args)) for c in calls] == [
        ("get_padding_bias", CallContext.LAYER_CALL, {"x": ArgKind.TENSOR})]
    assert _check(project) == []
    # A caller that spells float16 for it gets the finding.
    (project / "pkg" / "transformer.py").write_text(TRANSFORMER.replace("(inputs)", "(inputs, dtype=tf.float16)"))
    policies.forget_projects()
    assert _check(project) == ["pkg/model_utils.py:12:MP201"]


def test_the_scan_survives_hostile_projects(project: Path):
    """Cyclic re-exports and bases, a file that does not parse, undecodable bytes, deep nesting, relative imports
    above the root, `x[i] += v` in a layer: the scan answers (what it can) instead of raising."""
    deep = "x = " + "(" * 300 + "1" + ")" * 300 + "\n"
    _write(project, {
        "pkg/__init__.py": "from pkg.a import f\nfrom pkg.b import g as f2\n",
        "pkg/a.py": "from pkg import f2 as f\nclass A(B):\n    pass\nclass B(A):\n    pass\n",
        "pkg/b.py": "from pkg import f as g\nfrom ...... import nothing\n",
        "pkg/broken.py": "def (:\n",
        "pkg/deep.py": deep,
        "pkg/layer.py": "import tensorflow as tf\nfrom pkg import utils\n\n\nclass L(tf.keras.layers.Layer):\n"
                        "    def call(self, x):\n        y = x\n        y[0] += x\n        return utils.activation_fn(y, 'srelu')\n",
        "pkg/utils.py": UTILS, "train.py": ENTRY.replace("pkg.layers import Block", "pkg.layer import L")
        .replace("[Block()]", "[L()]")})
    (project / "pkg" / "binary.py").write_bytes(b"\xff\xfe\x00\x00def f(:\n\x00")
    calls = project_facts.file_facts(project / "pkg" / "utils.py").cross_calls
    assert [(c.function, c.context) for c in calls] == [("activation_fn", CallContext.LAYER_CALL)]
    assert "pkg/utils.py:6:MP201" in _check(project)


def test_a_helper_of_a_helper_in_a_third_file_sees_the_activations_too(project: Path):
    """layers.py's call -> utils.activation_fn (another file) -> acts.srelu_fn (a third file): one hop further,
    with the parameters the first helper got activations in (CallContext.HELPER)."""
    acts = UTILS.split("\n\n\ndef activation_fn")[0] + "\n"
    utils = "import tensorflow as tf\n\nfrom pkg import acts\n\n\ndef activation_fn(features, act_type):\n" \
            "    if act_type == 'srelu':\n        return acts.srelu_fn(ARGUMENT)\n    return tf.nn.relu(features)\n"
    _n2(project)
    _write(project, {"pkg/acts.py": acts, "pkg/utils.py": utils.replace("ARGUMENT", "features")})
    assert _check(project) == ["pkg/acts.py:6:MP201"]
    calls = project_facts.file_facts(project / "pkg" / "acts.py").cross_calls
    assert [(c.function, c.context, dict(c.args)) for c in calls] == [
        ("srelu_fn", CallContext.HELPER, {"x": ArgKind.TENSOR})]
    (project / "pkg" / "utils.py").write_text(utils.replace("ARGUMENT", "tf.cast(features, tf.float32)"))
    policies.forget_projects()
    assert _check(project) == []
