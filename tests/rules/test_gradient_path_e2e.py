"""End to end on real TensorFlow (CPU): gradient-path bugs (MP101/MP109-MP112, MP303) train worse than
float32, and after `mpfix apply` the loop matches float32.

Each script trains a tiny MLP with SGD + momentum (which shows loss-scaling bugs that Adam hides), in
two parts of one process: a float32 reference loop (its update is `# noqa`, so mpfix leaves it alone)
and the mixed_float16 loop under test, from the same initial weights. It prints both final losses and
the size of both first updates. The original and the fixed script run side by side, each in its own
process (one TensorFlow import each); TensorFlow is never imported into the test process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STEPS = 150

PRELUDE = '''
import json

import numpy as np
import tensorflow as tf
{keras_import}

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) * {target_scale}).astype("float32")
STEPS = {steps}


def build(policy):
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1, kernel_initializer=keras.initializers.RandomNormal(stddev={last_init})),
    ])


def mse(model):
    return {loss_weight} * tf.reduce_mean(tf.square(tf.cast(model(x, training=True), tf.float32) - y))


def run(model, step):
    before = [v.numpy().astype("float64") for v in model.trainable_variables]
    step()
    update = float(np.sqrt(sum(((v.numpy() - b) ** 2).sum() for v, b in zip(model.trainable_variables, before))))
    for _ in range(STEPS - 1):
        step()
    return float(mse(model)), update


def reference():
    model = build("float32")
    ref_opt = keras.optimizers.SGD({lr}, momentum=0.9)

    @tf.function
    def ref_step():
        with tf.GradientTape() as tape:
            loss = mse(model)
        grads = tape.gradient(loss, model.trainable_variables)
        {reference_clip}
        ref_opt.apply_gradients(zip(grads, model.trainable_variables))  # noqa

    return run(model, ref_step)
'''

EPILOGUE = '''

ref_loss, ref_update = reference()
loss, update = mixed()
print(json.dumps({"float32": ref_loss, "mixed": loss, "update32": ref_update, "update16": update,
                  "keras": keras.__name__}))
'''

K3 = "import keras"
K2 = "import tf_keras as keras"
CLIP = "grads, _ = tf.clip_by_global_norm(grads, 1.0)"


@dataclass
class Case:
    keras: int
    codes: set[str]  # what `mpfix check --select MP1,MP3` reports on the buggy loop
    mixed: str  # def mixed(): ... the loop under test
    clip: bool = False
    fixable: bool = True
    target_scale: float = 0.5
    last_init: float = 0.05
    lr: float = 0.05
    loss_weight: float = 1.0
    expect_in_fix: tuple[str, ...] = ()


CASES = {
    # Keras 3, clip of scale_loss gradients before the LSO's apply (which unscales inside).
    "mp109-k3-clip-before-lso-apply": Case(3, {"MP109"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
''', clip=True, expect_in_fix=("SGD(0.05, momentum=0.9, global_clipnorm=1.0)",)),
    # Keras 2, clip before get_unscaled_gradients.
    "mp109-k2-clip-before-unscale": Case(2, {"MP109"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
''', clip=True, expect_in_fix=("grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss,",)),
    # Keras 3, manual unscale and then the LSO's own.
    "mp110-k3-double-unscale": Case(3, {"MP110"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    opt.build(model.trainable_variables)  # Keras 3 creates dynamic_scale when the optimizer is built

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = [g / opt.dynamic_scale for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
'''),
    # Keras 2, manual unscale and then get_unscaled_gradients.
    "mp110-k2-double-unscale": Case(2, {"MP110"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = [g / opt.loss_scale for g in grads]
        grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
'''),
    # Scaled gradients split between the LSO and a plain optimizer (report only).
    "mp111-k3-second-optimizer": Case(3, {"MP111"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    head_opt = keras.optimizers.SGD(0.05, momentum=0.9)

    @tf.function
    def step():
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.scale_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        opt.apply_gradients(zip(grads[:2], variables[:2]))
        head_opt.apply_gradients(zip(grads[2:], variables[2:]))

    return run(model, step)
''', fixable=False),
    "mp111-k2-second-optimizer": Case(2, {"MP111"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    head_opt = keras.optimizers.SGD(0.05, momentum=0.9)

    @tf.function
    def step():
        variables = model.trainable_variables
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        body = opt.get_unscaled_gradients(grads[:2])
        opt.apply_gradients(zip(body, variables[:2]))
        head_opt.apply_gradients(zip(grads[2:], variables[2:]))

    return run(model, step)
''', fixable=False),
    # Keras 3, MP101 on a loop that clips: the fix wraps, scales and moves the clip into the optimizer.
    # The loss carries a weight of 1e-6 (the learning rate is 1e6 times larger to match): its gradient
    # at the float16 output (~1e-8) is below float16's smallest subnormal (6e-8), so without loss
    # scaling every float16 gradient is exactly 0 and nothing learns, while float32 trains normally.
    "mp101-k3-unscaled-loop-that-clips": Case(3, {"MP101"}, '''
def mixed():
    model = build("mixed_float16")
    opt = keras.optimizers.SGD(50000.0, momentum=0.9)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
''', clip=True, lr=50000.0, loss_weight=1e-6,
        expect_in_fix=("LossScaleOptimizer(keras.optimizers.SGD(50000.0, momentum=0.9, global_clipnorm=1.0))",)),
    # Keras 2, a TF1 optimizer's compute_gradients/apply_gradients loop without loss scaling.
    "mp112-k2-tf1-loop": Case(2, {"MP112"}, '''
def mixed():
    model = build("mixed_float16")
    opt = tf.compat.v1.train.MomentumOptimizer(50000.0, 0.9)

    def loss_fn():
        return mse(model)

    def step():
        grads_and_vars = opt.compute_gradients(loss_fn, var_list=model.trainable_variables)
        opt.apply_gradients(grads_and_vars)

    return run(model, step)
''', lr=50000.0, loss_weight=1e-6,
        expect_in_fix=("tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(",)),
}

# MP303 towards Keras 3 on a loop that clips after unscaling (the BERT/EfficientDet pattern). Its
# Keras 2 spelling cannot run on Keras 3; "naive" is what mpfix 0.1's safe fix wrote (unscale dropped,
# clip kept: it then clips gradients 32768x too large).
MP303_KERAS2_SPELLING = '''
def mixed():
    model = build("mixed_float16")
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mse(model)
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = opt.get_unscaled_gradients(grads)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    return run(model, step)
'''
MP303_NAIVE = (MP303_KERAS2_SPELLING.replace("get_scaled_loss", "scale_loss")
               .replace("        grads = opt.get_unscaled_gradients(grads)\n", ""))


def _script(case: Case, mixed: str) -> str:
    prelude = PRELUDE.format(keras_import=K3 if case.keras == 3 else K2, target_scale=case.target_scale,
                             loss_weight=case.loss_weight,
                             last_init=case.last_init, steps=STEPS, lr=case.lr,
                             reference_clip=CLIP if case.clip else "pass")
    return textwrap.dedent(prelude).lstrip() + "\n" + textwrap.dedent(mixed).lstrip("\n") + EPILOGUE


def _env(keras: int) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _mpfix(args: list[str], keras: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpfix", *args, "--select", "MP1,MP3", "--no-cache",
                           "--keras", str(keras)], capture_output=True, text=True, env=_env(keras), timeout=120)


def _codes(path: Path, keras: int) -> set[str]:
    proc = _mpfix(["check", str(path), "--format", "json"], keras)
    return {f["code"] for f in json.loads(proc.stdout)}


def _run(paths: list[Path], keras: int) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(keras), cwd=p.parent) for p in paths]
    results = []
    for proc, path in zip(procs, paths):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{path.name} failed:\n{err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _worse(result: dict) -> bool:
    return not math.isfinite(result["mixed"]) or result["mixed"] > 3 * result["float32"]


def _matches(result: dict) -> bool:
    return math.isfinite(result["mixed"]) and result["mixed"] <= 1.25 * result["float32"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.keras2] if c.keras == 2 else [])
                                  for n, c in CASES.items()])
def test_bug_trains_worse_and_the_fix_matches_float32(name: str, tmp_path: Path):
    case = CASES[name]
    original = tmp_path / "loop.py"
    fixed = tmp_path / "loop_fixed.py"
    original.write_text(_script(case, case.mixed))
    fixed.write_text(original.read_text())
    assert _codes(original, case.keras) == case.codes
    proc = _mpfix(["apply", str(fixed), "--unsafe-fixes"], case.keras)
    assert proc.returncode in (0, 1), proc.stderr
    text = fixed.read_text()
    if not case.fixable:
        assert text == original.read_text()
        (before,) = _run([original], case.keras)
        print(name, json.dumps(before))
        assert _worse(before), before
        return
    assert text != original.read_text()
    for expected in case.expect_in_fix:
        assert expected in text, text
    assert _codes(fixed, case.keras) == set(), text
    before, after = _run([original, fixed], case.keras)
    print(name, "before", json.dumps(before), "after", json.dumps(after))
    assert before["keras"].startswith("tf_keras" if case.keras == 2 else "keras"), before
    assert _worse(before), before
    assert _matches(after), after


def test_mp303_fix_on_a_loop_that_clips_after_unscaling_keeps_float32s_update(tmp_path: Path):
    case = Case(3, {"MP303"}, MP303_KERAS2_SPELLING, clip=True)
    source = tmp_path / "loop.py"
    naive = tmp_path / "loop_naive.py"
    source.write_text(_script(case, MP303_KERAS2_SPELLING))
    naive.write_text(_script(case, MP303_NAIVE))
    proc = _mpfix(["apply", str(source), "--unsafe-fixes"], 3)
    assert proc.returncode in (0, 1), proc.stderr
    text = source.read_text()
    assert "get_unscaled_gradients" not in text and "clip_by_global_norm(grads" not in text.split("def mixed")[1]
    assert "SGD(0.05, momentum=0.9, global_clipnorm=1.0)" in text
    before, after = _run([naive, source], 3)
    print("mp303 naive", json.dumps(before), "fixed", json.dumps(after))
    # The naive fix clips scaled gradients: the first update is ~1/32768 of float32's.
    assert before["update16"] < 1e-2 * before["update32"], before
    assert after["update16"] == pytest.approx(after["update32"], rel=0.02), after
    assert _worse(before) and _matches(after), (before, after)
