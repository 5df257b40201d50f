"""Keras 3 exports its LossScaleOptimizer twice: ``keras.optimizers.LossScaleOptimizer`` is the same class as
``keras.mixed_precision.LossScaleOptimizer`` (checked with TF 2.21 / keras 3.15: ``is`` holds, also through
``tf.keras``). mpfix knew only the ``mixed_precision`` spelling, so an LSO built as
``keras.optimizers.LossScaleOptimizer(...)`` was a plain optimizer named "LossScaleOptimizer": noise or a clip
on its scaled gradients was not found (wave 5 of the held-out scripts: grad_noise_k3.py, missed)."""

from __future__ import annotations

import pytest

from mpfix.testing import fixed, lint_snippet

STEP = """
    import numpy as np
    import tensorflow as tf
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1, dtype="float32")])
    optimizer = {lso}(keras.optimizers.SGD(1e-2))
    mse = keras.losses.MeanSquaredError()


    @tf.function
    def train_step(x, y, stddev=0.3):
        with tf.GradientTape() as tape:
            loss = mse(y, model(x, training=True))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables){transform}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""

NOISE = "\n        grads = [g + tf.random.normal(tf.shape(g), stddev=stddev) for g in grads]"
CLIP = "\n        grads, _ = tf.clip_by_global_norm(grads, 1.0)"
SPELLINGS = ["keras.optimizers.LossScaleOptimizer", "tf.keras.optimizers.LossScaleOptimizer",
             "keras.mixed_precision.LossScaleOptimizer"]


def codes(code: str) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in lint_snippet(code, keras=3, policy=None, filename="train.py").findings]


@pytest.mark.parametrize("lso", SPELLINGS)
def test_noise_on_scaled_gradients_of_either_spelling(lso):
    assert codes(STEP.format(lso=lso, transform=NOISE)) == [("MP109", 17)]


@pytest.mark.parametrize("lso", SPELLINGS)
def test_clip_on_scaled_gradients_moves_into_the_inner_optimizer(lso):
    code = STEP.format(lso=lso, transform=CLIP)
    assert codes(code) == [("MP109", 17)]
    after = fixed(code, "MP109", keras=3, filename="train.py")
    assert "keras.optimizers.SGD(1e-2, global_clipnorm=1.0)" in after
    assert "clip_by_global_norm" not in after


@pytest.mark.parametrize("lso", SPELLINGS)
def test_correct_step_with_either_spelling_is_clean(lso):
    assert codes(STEP.format(lso=lso, transform="")) == []


def test_legacy_arguments_on_the_optimizers_spelling():
    code = """
        import keras
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(), loss_scale="dynamic")
    """
    result = lint_snippet(code, "MP302", keras=3, policy=None, filename="train.py")
    assert [(f.code, f.line) for f in result.findings] == [("MP302", 2)]
    assert "LossScaleOptimizer(keras.optimizers.Adam())" in fixed(code, "MP302", keras=3, filename="train.py")
