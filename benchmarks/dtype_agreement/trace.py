"""Runtime side of the dtype agreement benchmark: real TensorFlow, one process per Keras generation.

Runs each target under mixed_float16 (Keras 3 by default; tf_keras when TF_USE_LEGACY_KERAS=1 is set
before this process starts) and records, for every graph op TensorFlow creates and every Keras layer
call, its output dtype and the innermost source line that created it inside the files under study
(the model's own source: a script, ``keras/src``, ``tf_keras/src``, ``official/``), read from the
op's traceback. Writes one JSON list of records to ``--out``; ``run.py`` compares them with the
static facts. Usage (normally called by run.py)::

    python trace.py --generation 3 --targets apps,layers,scripts --scripts a.py,b.py --out ops.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Library folders whose code is the model's own source (what the rules would read there).
SOURCE_PARTS = ("/keras/src/", "/tf_keras/src/", "/official/")
# Framework machinery inside those folders: ops created there are attributed to the caller's line.
MACHINERY = (
    "/keras/src/backend/", "/keras/src/ops/", "/keras/src/layers/layer.py", "/keras/src/trainers/",
    "/keras/src/models/", "/keras/src/utils/", "/keras/src/optimizers/", "/keras/src/tree/",
    "/keras/src/dtype_policies/", "/keras/src/random/", "/keras/src/initializers/", "/keras/src/metrics/",
    "/keras/src/callbacks/", "/keras/src/mixed_precision/",
    "/tf_keras/src/engine/", "/tf_keras/src/utils/", "/tf_keras/src/backend.py", "/tf_keras/src/optimizers/",
    "/tf_keras/src/mixed_precision/", "/tf_keras/src/initializers/", "/tf_keras/src/metrics/",
    "/tf_keras/src/callbacks", "/tf_keras/src/saving/", "/tf_keras/src/dtensor/",
    "/official/modeling/optimization/", "/official/core/",
)


# Where tensors, variables and Keras symbolic tensors are defined (numpy arrays are not traced).
TENSOR_MODULES = ("tensorflow.", "keras.", "tf_keras.")


class Recorder:
    def __init__(self, scripts: list[str]) -> None:
        self.scripts = {os.path.realpath(s) for s in scripts}
        self.records: list[dict] = []
        self.target = ""
        self.phase = "forward"
        self.seq = 0

    def studied(self, filename: str) -> bool:
        if os.path.realpath(filename) in self.scripts:
            return True
        f = filename.replace("\\", "/")
        return any(p in f for p in SOURCE_PARTS) and not any(m in f for m in MACHINERY)

    def frame_of(self, frames) -> tuple[str, int] | None:
        for fr in reversed(frames):  # innermost first
            if self.studied(fr.filename):
                return os.path.realpath(fr.filename), fr.lineno
        return None

    def add(self, where, kind: str, op_type: str, dtype: str, compute: str = "") -> None:
        self.seq += 1
        self.records.append({"target": self.target, "file": where[0], "line": where[1], "kind": kind,
                             "op": op_type, "dtype": dtype, "phase": self.phase, "seq": self.seq,
                             "compute": compute})


def layer_compute_dtype(frame) -> str:
    """The compute dtype of the layer whose method ``frame`` runs ("" outside a layer method): a layer
    built with dtype="float32" runs its (float16-policy) source in float32, which the static facts of
    that source cannot know, so run.py sets such executions apart."""
    owner = frame.f_locals.get("self")
    try:
        compute = getattr(owner, "compute_dtype", None)
    except Exception:  # noqa: BLE001 - a half-built object
        return ""
    return compute if isinstance(compute, str) else getattr(compute, "name", "") or ""


def install_hooks(rec: Recorder) -> None:
    """Record graph ops as TensorFlow creates them, and the values studied lines compute."""
    from tensorflow.python.framework import ops

    original = ops.Graph._create_op_helper

    def create_op_helper(self, op, *args, **kwargs):
        result = original(self, op, *args, **kwargs)
        try:
            if op.outputs:
                where = rec.frame_of(op.traceback)
                if where is not None:
                    rec.add(where, "op", op.type, op.outputs[0].dtype.name)
        except Exception:  # noqa: BLE001 - an op we cannot read is skipped, never fatal
            pass
        return result

    ops.Graph._create_op_helper = create_op_helper

    # The value of each expression a studied line evaluates: every Python-level call made directly
    # from that line (a TensorFlow or Keras function, a tensor's operator, a layer's __call__)
    # returns it, in evaluation order. Ops alone cannot say which op is an expression's value
    # (keras.ops.mean computes in float32 and casts back).
    # tf.function runs autograph's generated copy of a function: its lines map back to the source
    # through the source map autograph keeps while the copy runs (what op tracebacks use too).
    import threading

    from tensorflow.python.util import tf_stack

    studied_cache: dict[str, str | None] = {}

    def source_line(filename: str, lineno: int) -> tuple[str, int]:
        if "__autograph_generated" not in filename:
            return filename, lineno
        mapper = tf_stack._source_mapper_stacks[threading.get_ident()][-1]
        hit = mapper.get_effective_source_map().get((filename, lineno))
        return (hit[0], hit[1]) if hit else (filename, lineno)

    def profile(frame, event, arg):
        if event != "return":
            return
        caller = frame.f_back
        if caller is None:
            return
        filename, lineno = source_line(caller.f_code.co_filename, caller.f_lineno)
        real = studied_cache.get(filename, "")
        if real == "":
            real = studied_cache[filename] = os.path.realpath(filename) if rec.studied(filename) else None
        if real is None:
            return
        # Every return is recorded (so values line up with expressions in evaluation order); only
        # tensors, variables and Keras symbolic tensors carry a dtype (not layers, not numpy arrays).
        kind = type(arg)
        dtype = None
        if kind.__module__.startswith(TENSOR_MODULES) and hasattr(kind, "shape"):
            dtype = getattr(arg, "dtype", None)
        name = "" if dtype is None else getattr(dtype, "name", None) or str(dtype)
        rec.add((real, lineno), "ret", frame.f_code.co_name, name, layer_compute_dtype(caller))

    sys.setprofile(profile)


def train_step_trace(rec: Recorder, model, inputs) -> None:
    """One forward and backward pass of ``model`` traced as a graph (get_concrete_function)."""
    import tensorflow as tf

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = model(x, training=True)
            ys = tf.nest.flatten(y)
            loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32))) for t in ys
                             if t.dtype.is_floating])
        rec.phase = "backward"
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, grads

    rec.phase = "forward"
    step.get_concrete_function(inputs)
    rec.phase = "forward"


def keras_module(generation: int):
    if generation == 3:
        import keras
        return keras
    import tf_keras
    return tf_keras


def app_targets(generation: int):
    """(name, builder, input) of small keras.applications models and a ResNet block."""
    import tensorflow as tf

    k = keras_module(generation)
    image = tf.TensorSpec([2, 32, 32, 3], tf.float32)

    def resnet_block():
        if generation == 3:
            from keras.src.applications import resnet
            block = resnet.stack_residual_blocks_v1
        else:
            from tf_keras.src.applications import resnet
            resnet.layers = k.layers  # ResNet() sets this module global; stack1 reads it
            block = resnet.stack1
        x_in = k.Input((32, 32, 3))
        x = block(x_in, 16, 2, name="conv2")
        x = k.layers.GlobalAveragePooling2D()(x)
        return k.Model(x_in, k.layers.Dense(10, dtype="float32")(x))

    return [
        ("MobileNetV3Small", lambda: k.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None,
                                                                     classes=10), image),
        ("EfficientNetB0", lambda: k.applications.EfficientNetB0(input_shape=(32, 32, 3), weights=None,
                                                                 classes=10), image),
        ("ResNetBlock", resnet_block, image),
    ]


def layer_targets(generation: int):
    """Layers the float16 rules care about: attention, normalizations, softmax, embeddings."""
    import tensorflow as tf

    k = keras_module(generation)
    seq = tf.TensorSpec([2, 8, 16], tf.float32)

    def block():
        x_in = k.Input((8, 16))
        h = k.layers.Dense(16)(x_in)
        a = k.layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h)
        h = k.layers.LayerNormalization()(h + a)
        h = k.layers.BatchNormalization()(h)
        h = k.layers.Conv1D(16, 3, padding="same")(h)
        h = k.layers.GlobalAveragePooling1D()(h)
        h = k.layers.Dense(10)(h)
        out = k.layers.Softmax(dtype="float32")(h)
        return k.Model(x_in, out)

    return [("AttentionBlock", block, seq)]


def tfm_targets():
    """tf-models-official NLP layers and a tiny BERT encoder (tf_keras generation only)."""
    import tensorflow as tf
    import tf_keras
    from official.nlp.modeling import layers, networks

    seq = tf.TensorSpec([2, 8, 16], tf.float32)
    ids = tf.TensorSpec([2, 8], tf.int32)

    def encoder_block():
        x_in = tf_keras.Input((8, 16))
        y = layers.TransformerEncoderBlock(num_attention_heads=2, inner_dim=32, inner_activation="gelu")(x_in)
        return tf_keras.Model(x_in, y)

    def bert():
        net = networks.BertEncoder(vocab_size=50, hidden_size=16, num_layers=1, num_attention_heads=2,
                                   max_sequence_length=8, inner_dim=32)
        w, m, t = (tf_keras.Input((8,), dtype=tf.int32) for _ in range(3))
        out = net(dict(input_word_ids=w, input_mask=m, input_type_ids=t))
        pooled = out["pooled_output"] if isinstance(out, dict) else out[1]  # list outputs: (sequence, pooled)
        return tf_keras.Model([w, m, t], pooled)

    return [("tfm.TransformerEncoderBlock", encoder_block, seq), ("tfm.BertEncoder", bert, [ids, ids, ids])]


def fast_fit(generation: int) -> None:
    """Scripts train for epochs; one step of each traces the same graph."""
    k = keras_module(generation)
    fit = k.Model.fit

    def one_step_fit(self, *args, **kwargs):
        kwargs["epochs"] = 1
        kwargs.setdefault("steps_per_epoch", 1)
        kwargs.pop("validation_split", None)
        kwargs.pop("validation_data", None)
        try:
            return fit(self, *args, **kwargs)
        except Exception:  # noqa: BLE001 - some data cannot take steps_per_epoch
            kwargs.pop("steps_per_epoch", None)
            return fit(self, *args, **kwargs)

    k.Model.fit = one_step_fit


def run_script(rec: Recorder, path: str, generation: int) -> str:
    text = Path(path).read_text(encoding="utf-8")
    argv = [path]
    for flag, value in (("--epochs", "1"), ("--steps", "2"), ("--iterations", "2")):
        if f'"{flag}"' in text or f"'{flag}'" in text:
            argv += [flag, value]
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = argv
    os.chdir(os.environ.get("TRACE_WORKDIR", "/tmp"))
    keras = keras_module(generation)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
        return "ok"
    except SystemExit as exc:
        return f"exit {exc.code}"
    except BaseException as exc:  # noqa: BLE001 - a failing script is reported, the others go on
        return f"error {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
        keras.mixed_precision.set_global_policy("mixed_float16")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generation", type=int, choices=(2, 3), required=True)
    parser.add_argument("--targets", default="apps,layers,scripts")
    parser.add_argument("--scripts", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.generation == 2 and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise SystemExit("generation 2 needs TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported")
    scripts = [s for s in args.scripts.split(",") if s]
    rec = Recorder(scripts)
    install_hooks(rec)
    k = keras_module(args.generation)
    k.mixed_precision.set_global_policy("mixed_float16")
    status = {}
    wanted = args.targets.split(",")
    builders = []
    if "apps" in wanted:
        builders += app_targets(args.generation)
    if "layers" in wanted:
        builders += layer_targets(args.generation)
    if "tfm" in wanted:
        try:
            builders += tfm_targets()
        except Exception as exc:  # noqa: BLE001 - tf-models-official is optional
            status["tfm"] = f"skipped: {type(exc).__name__}: {exc}"[:300]
    for name, build, spec in builders:
        rec.target = name
        start = time.perf_counter()
        try:
            model = build()
            train_step_trace(rec, model, spec)
            status[name] = f"ok {time.perf_counter() - start:.1f}s"
        except Exception as exc:  # noqa: BLE001
            status[name] = f"error {type(exc).__name__}: {str(exc)[:200]}"
        k.backend.clear_session()
        k.mixed_precision.set_global_policy("mixed_float16")
    if "scripts" in wanted and scripts:
        fast_fit(args.generation)
        for path in scripts:
            rec.target = os.path.relpath(path, HERE.parent.parent)
            rec.phase = "forward"
            start = time.perf_counter()
            status[rec.target] = run_script(rec, path, args.generation) + f" {time.perf_counter() - start:.1f}s"
            k.backend.clear_session()
            # clear_session resets Keras 3's global policy: a script that sets none runs under the mixed policy.
            k.mixed_precision.set_global_policy("mixed_float16")
    Path(args.out).write_text(json.dumps({"generation": args.generation, "status": status,
                                          "records": rec.records}))
    print(json.dumps(status, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
