"""The model-output analysis (codemods/analysis/model_outputs.py) behind MP205: which layer is a model's output.

A model whose output another model takes in (``head(encoder(x))``, ``critic(generator(z))``) is a
sub-model: its last layer computes a feature, and leaving it in float16 is right.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP205 = tuple(r for r in all_rules() if r.code == "MP205")

ENCODER_HEAD = """
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")

    encoder = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32)])
    head = keras.Sequential([keras.Input((32,)), keras.layers.Dense(10, activation="softmax"{dtype})])
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.01))


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(y, head(encoder(x)))
            scaled = optimizer.scale_loss(loss)
        variables = encoder.trainable_variables + head.trainable_variables
        grads = tape.gradient(scaled, variables)
        optimizer.apply_gradients(zip(grads, variables))
"""


def _lint(code: str):
    engine = Engine(MP205, Options(keras="3", policy="mixed_float16", project_policy=False))
    return engine.lint(textwrap.dedent(code).lstrip("\n"), Path("train.py"))


def test_a_sub_model_whose_output_feeds_another_model_is_not_an_output():
    found = _lint(ENCODER_HEAD.format(dtype=""))
    assert [(f.code, f.line) for f in found.findings] == [("MP205", 7)]  # the head, not the encoder (line 6)


def test_with_a_float32_head_nothing_is_reported():
    assert _lint(ENCODER_HEAD.format(dtype=', dtype="float32"')).findings == []


@pytest.mark.parametrize("loss_call", ["loss_fn(y, model(x))", "keras.losses.mse(y, model(x))"])
def test_a_model_whose_output_goes_to_a_loss_is_still_the_output(loss_call):
    code = f"""
        import keras
        import tensorflow as tf

        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(10, activation="softmax")])
        loss_fn = keras.losses.SparseCategoricalCrossentropy()


        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = {loss_call}
            return tape.gradient(loss, model.trainable_variables)
    """
    assert [f.code for f in _lint(code).findings] == ["MP205"]
