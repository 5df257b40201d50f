"""A function whose result a GradientTape records is a loss, whatever its name (issue 18, wave 4 of the
held-out scripts: simclr_logsumexp.py's ``nt_xent`` called in an eager loop at module level). Before,
only names with "loss" in them or a ``y_pred`` parameter made a function a loss, so a hand-written
logsumexp over temperature-scaled float16 similarities in ``nt_xent`` was never analysed."""

from __future__ import annotations

import textwrap

import pytest

from mpfix.testing import lint_snippet

SIMCLR = """
    import tensorflow as tf
    {keras_import}

    TEMPERATURE = 0.05


    def nt_xent(z1, z2):
        z = tf.cast(tf.concat([z1, z2], 0), {half})
        logits = tf.matmul(z, z, transpose_b=True) / TEMPERATURE
        return tf.reduce_mean(tf.math.log(tf.reduce_sum(tf.exp(logits), axis=1)))
"""

MODULE_LEVEL = """
    if __name__ == "__main__":
        keras.mixed_precision.set_global_policy("mixed_float16")
        encoder = keras.Sequential([keras.layers.Dense(8)])
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        x = tf.random.normal((4, 3))
        with tf.GradientTape() as tape:
            loss = nt_xent(encoder(x), encoder(x))
    """

IN_MAIN = """
    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        encoder = keras.Sequential([keras.layers.Dense(8)])
        x = tf.random.normal((4, 3))
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = nt_xent(encoder(x), encoder(x))
            grads = tape.gradient(loss, encoder.trainable_variables)
    """

NO_TAPE = """
    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        print(nt_xent(tf.ones((2, 2)), tf.ones((2, 2))))
    """


def codes(driver: str, half: str = "tf.float16", keras: int = 3) -> list[tuple[str, int]]:
    keras_import = "import keras" if keras == 3 else "import tf_keras as keras"
    code = textwrap.dedent(SIMCLR.format(keras_import=keras_import, half=half)) + "\n\n" + textwrap.dedent(driver)
    result = lint_snippet(code, "MP204", keras=keras, policy=None, fix=False, filename="train.py")
    return [(f.code, f.line) for f in result.findings]


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("driver", [MODULE_LEVEL, IN_MAIN], ids=["module-level", "main"])
def test_a_function_called_in_a_tape_is_a_loss(driver, keras):
    assert codes(driver, keras=keras) == [("MP204", 10)]


@pytest.mark.parametrize("driver", [MODULE_LEVEL, IN_MAIN], ids=["module-level", "main"])
def test_float32_in_a_taped_function_is_left_alone(driver):
    assert codes(driver, half="tf.float32") == []


def test_a_function_no_tape_records_is_not_a_loss():
    assert codes(NO_TAPE) == []
