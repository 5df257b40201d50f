"""End to end: a script from the TF 2.4-era mixed-precision guide crashes on today's TensorFlow; after
``mpfix apply`` it trains, on Keras 3 and on Keras 2, with a finite, falling loss and a working scale.

Everything TensorFlow runs in child processes (the test process stays TF-free). For each
generation the unfixed script and the fixed one run side by side.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Written the way the TF 2.1-2.4 guide taught it: the experimental policy, the positional
# "dynamic" loss scale, Keras 2's get_scaled_loss/get_unscaled_gradients, optimizer.loss_scale.
GUIDE_SCRIPT = '''\
import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras.mixed_precision import experimental as mixed_precision

policy = mixed_precision.Policy("mixed_float16")
mixed_precision.set_policy(policy)

inputs = keras.Input(shape=(8,))
x = keras.layers.Dense(32, activation="relu")(inputs)
outputs = keras.layers.Dense(1, dtype="float32")(x)  # float32 head: the loss stays float32
model = keras.Model(inputs, outputs)

optimizer = keras.optimizers.SGD(0.05)
optimizer = mixed_precision.LossScaleOptimizer(optimizer, "dynamic")
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predictions = model(x, training=True)
        loss = loss_fn(y, predictions)
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = optimizer.get_unscaled_gradients(scaled_gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


rng = np.random.default_rng(0)
features = rng.normal(size=(256, 8)).astype("float32")
targets = features @ rng.normal(size=(8, 1)).astype("float32")
for step in range(30):
    loss = float(train_step(features, targets))
    if step == 0:
        print("FIRST_LOSS", loss)
print("FINAL_LOSS", loss)
print("LOSS_SCALE", float(optimizer.loss_scale))
print("COMPUTE_DTYPE", model.layers[1].compute_dtype)
'''

# What the unfixed script dies of, on both generations: the first removed API it touches.
CRASH = r"ImportError: cannot import name 'experimental'"


def _env(keras: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["CUDA_VISIBLE_DEVICES"] = ""
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _values(stdout: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in stdout.splitlines() if re.match(r"^[A-Z_]+ ", line))


def _run(tmp_path: Path, keras: int) -> str:
    original = tmp_path / "guide_original.py"
    script = tmp_path / "guide.py"
    original.write_text(GUIDE_SCRIPT)
    script.write_text(GUIDE_SCRIPT)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'guide'\n")
    env = _env(keras)
    # The unfixed script starts while mpfix works on the copy: TensorFlow's import dominates.
    crash = subprocess.Popen([sys.executable, str(original)], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Generation detection is mpfix's own: from the installed packages and TF_USE_LEGACY_KERAS.
    apply = subprocess.run([sys.executable, "-m", "mpfix", "apply", "--select", "MP3", "--no-cache", str(script)],
                           cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)
    assert apply.returncode in (0, 1), apply.stdout + apply.stderr
    fixed_text = script.read_text()
    assert "experimental" not in fixed_text and '"dynamic"' not in fixed_text, fixed_text
    trained = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                             capture_output=True, timeout=240)
    crash_out, crash_err = crash.communicate(timeout=240)

    assert crash.returncode != 0, crash_out
    assert re.search(CRASH, crash_err), crash_err[-2000:]

    assert trained.returncode == 0, f"{fixed_text}\n{trained.stderr[-3000:]}"
    values = _values(trained.stdout)
    first, final = float(values["FIRST_LOSS"]), float(values["FINAL_LOSS"])
    scale = float(values["LOSS_SCALE"])
    assert values["COMPUTE_DTYPE"] == "float16"  # the policy is really on
    assert first == first and final == final and final != float("inf")
    # A finite loss is not enough: it must fall (a stalled or unscaled-by-32768 step would not).
    assert final < 0.5 * first, (first, final)
    assert 1.0 <= scale <= 2.0 ** 16, scale
    return fixed_text


@pytest.mark.slow
def test_guide_script_is_fixed_for_keras3(tmp_path: Path):
    fixed_text = _run(tmp_path, 3)
    assert "optimizer.scale_loss(loss)" in fixed_text
    assert "gradients = scaled_gradients" in fixed_text
    assert "optimizer.dynamic_scale" in fixed_text


@pytest.mark.slow
@pytest.mark.keras2
def test_guide_script_is_fixed_for_keras2(tmp_path: Path):
    fixed_text = _run(tmp_path, 2)
    assert "optimizer.get_scaled_loss(loss)" in fixed_text
    assert "optimizer.get_unscaled_gradients(scaled_gradients)" in fixed_text
    assert "optimizer.loss_scale" in fixed_text
