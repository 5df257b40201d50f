"""End to end with real TensorFlow on CPU: the loss-scaling bug shows, `mpfix apply` fixes it, it is gone.

Every script runs in its own subprocess (TensorFlow is never imported into the test process);
the original and the fixed script run side by side to halve the wall time.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# Keras 3, custom loop, no loss scaling. A regression head with small targets (1e-4) and a small
# initialisation: the float16 gradient reaching the hidden layers is ~1e-9, far below float16's
# smallest subnormal (~6e-8), so it rounds to exactly 0 (measured: 94-99% of entries per step).
KERAS3_NO_SCALING = '''
import json

import keras
import numpy as np
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 32)).astype("float32")
y = (x @ rng.normal(size=(32, 1)) * 1e-4).astype("float32")

model = keras.Sequential([
    keras.Input((32,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1, kernel_initializer=keras.initializers.RandomNormal(stddev=1e-3)),
])
loss_fn = keras.losses.MeanSquaredError()
optimizer = keras.optimizers.SGD(learning_rate=0.1)
TOTAL = float(sum(v.shape.num_elements() for v in model.trainable_variables))


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    zeros = tf.add_n([tf.reduce_sum(tf.cast(tf.equal(g, 0), tf.float32)) for g in grads])
    return loss, zeros / TOTAL


zero_fraction, losses = [], []
for _ in range(10):
    loss, zero = train_step(x, y)
    losses.append(float(loss))
    zero_fraction.append(float(zero))
print(json.dumps({"zero_fraction": zero_fraction, "losses": losses}))
'''

# Keras 2 (TF_USE_LEGACY_KERAS=1): the loss is scaled but the gradients are never unscaled, so
# SGD applies 32768x the update; the float16 output overflows (max 65504) at the second step.
KERAS2_NO_UNSCALE = '''
import json

import numpy as np
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1))).astype("float32")

model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
                             tf.keras.layers.Dense(1)])
loss_fn = tf.keras.losses.MeanSquaredError()
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(learning_rate=0.01))


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


losses = [float(train_step(x, y)) for _ in range(5)]
print(json.dumps({"keras_module": tf.keras.__name__, "losses": losses}))
'''


def _env(keras: int) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _mpfix(args: list[str], keras: int) -> subprocess.CompletedProcess:
    # --select MP1: this test is about the loss-scaling rules; other families fix other things.
    return subprocess.run([sys.executable, "-m", "mpfix", *args, "--select", "MP1", "--no-cache"],
                          capture_output=True, text=True, env=_env(keras), timeout=120)


def _run_scripts(paths: list[Path], keras: int) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(keras), cwd=p.parent) for p in paths]
    results = []
    for proc, path in zip(procs, paths):
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"{path.name} failed:\n{err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _prepare(tmp_path: Path, source: str, name: str) -> tuple[Path, Path]:
    original = tmp_path / f"{name}.py"
    fixed = tmp_path / f"{name}_fixed.py"
    original.write_text(textwrap.dedent(source).lstrip())
    fixed.write_text(original.read_text())
    return original, fixed


def _apply(path: Path, keras: int, *extra: str) -> subprocess.CompletedProcess:
    return _mpfix(["apply", str(path), *extra], keras)


def test_keras3_missing_loss_scaling_underflows_and_the_fix_restores_gradients(tmp_path):
    original, fixed = _prepare(tmp_path, KERAS3_NO_SCALING, "k3_no_scaling")
    proc = _apply(fixed, 3, "--unsafe-fixes", "--keras", "3")
    assert proc.returncode in (0, 1), proc.stderr
    text = fixed.read_text()
    assert "optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.1))" in text
    assert "        scaled_loss = optimizer.scale_loss(loss)\n    grads = tape.gradient(scaled_loss," in text

    before, after = _run_scripts([original, fixed], 3)
    mean_before = sum(before["zero_fraction"]) / len(before["zero_fraction"])
    mean_after = sum(after["zero_fraction"]) / len(after["zero_fraction"])
    # Measured: ~97% of gradient entries exactly zero without scaling, ~0.004% with it.
    assert mean_before > 0.9, before
    assert mean_after < 0.01, after
    assert all(math.isfinite(v) for v in after["losses"])


def test_keras3_fixed_loss_scale_runs_and_restores_gradients(tmp_path):
    # --loss-scale on Keras 3 writes loss_scale_factor= on the optimizer (no LSO: Keras 3 refuses
    # LossScaleOptimizer(dynamic=False)); check that form really scales and unscales.
    original, fixed = _prepare(tmp_path, KERAS3_NO_SCALING, "k3_fixed_scale")
    proc = _apply(fixed, 3, "--unsafe-fixes", "--keras", "3", "--loss-scale", "4096")
    assert proc.returncode in (0, 1), proc.stderr
    text = fixed.read_text()
    assert "keras.optimizers.SGD(learning_rate=0.1, loss_scale_factor=4096.0)" in text
    assert "LossScaleOptimizer" not in text
    (after,) = _run_scripts([fixed], 3)
    assert sum(after["zero_fraction"]) / len(after["zero_fraction"]) < 0.01, after
    assert all(math.isfinite(v) for v in after["losses"])


@pytest.mark.keras2
def test_keras2_scaled_loss_without_unscale_diverges_and_the_safe_fix_repairs_it(tmp_path):
    original, fixed = _prepare(tmp_path, KERAS2_NO_UNSCALE, "k2_no_unscale")
    # MP103 is a safe fix: plain `mpfix apply` (no --unsafe-fixes) writes it.
    proc = _apply(fixed, 2)
    assert proc.returncode in (0, 1), proc.stderr
    assert ("grads = optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))"
            in fixed.read_text())

    before, after = _run_scripts([original, fixed], 2)
    assert before["keras_module"].startswith("tf_keras"), before  # really Keras 2
    assert math.isinf(before["losses"][1]), before  # every update 32768x too large: inf at step 2
    assert all(math.isfinite(v) for v in after["losses"]), after
    assert after["losses"][-1] < after["losses"][0], after
