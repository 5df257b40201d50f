"""MP205: the model's output layer is its last layer, also when that layer rescales the head's values
(``Rescaling(512.)`` after a sigmoid box head, wave 4 of the held-out scripts: detection_iou.py). Keras
computes ``Rescaling`` in the compute dtype (both generations: ``cast(inputs, compute_dtype) * scale``), so
the model's output is float16, and box areas in pixels overflow in the loss; ``dtype="float32"`` on the
last layer makes the output float32. Which layers can be an output layer is one flag of the Keras layer
table (``keras_layers.LayerSpec.output_head``), read by both the model finder and MP205."""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

LOCALIZER = """
    import tensorflow as tf
    {import_keras}


    def localizer():
        images = keras.Input((64, 64, 3))
        h = keras.layers.Conv2D(16, 3, strides=2, activation="relu")(images)
        h = keras.layers.GlobalAveragePooling2D()(h)
        boxes = keras.layers.Dense(4, activation="sigmoid")(h)
        boxes = keras.layers.Rescaling(512.0{last_args})(boxes)
        return keras.Model(images, boxes)


    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = localizer()
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
        with tf.GradientTape() as tape:
            loss = box_loss(targets, model(images, training=True))
"""

PREPROCESSING_FIRST = """
    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.layers.Rescaling(1.0 / 255),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10, dtype="float32"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(images, labels)
"""


def found(code: str, keras: int) -> tuple[list[tuple[str, int]], str]:
    result = lint_snippet(code, "MP205", keras=keras, policy=None, fix=False, filename="train.py")
    fixed = lint_snippet(code, "MP205", keras=keras, policy=None, fix=True, filename="train.py")
    return sorted((f.code, f.line) for f in result.findings), fixed.fixed_text


@BOTH
def test_a_rescaling_after_the_head_is_the_output_layer(keras):
    codes, fixed = found(LOCALIZER.format(import_keras=_IMPORT[keras], last_args=""), keras)
    assert codes == [("MP205", 10)]
    assert 'keras.layers.Rescaling(512.0, dtype="float32")(boxes)' in fixed


@BOTH
def test_a_float32_rescaling_output_is_left_alone(keras):
    assert found(LOCALIZER.format(import_keras=_IMPORT[keras], last_args=', dtype="float32"'), keras)[0] == []


@BOTH
def test_a_rescaling_input_layer_is_not_an_output(keras):
    assert found(PREPROCESSING_FIRST.format(import_keras=_IMPORT[keras]), keras)[0] == []
