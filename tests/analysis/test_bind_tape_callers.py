"""Code in a ``with tf.GradientTape()`` block is float16 compute under a mixed policy whatever scope it sits in:
a script's eager training loop at module level or in ``main()`` passes the model's float16 outputs to the loss
functions it calls there, and a loss whose callers decide its parameters (a ``*_loss`` method of a Keras model,
a library-style loss function) is typed by them. Before, only calls from a float16 region typed parameters, and a
call on an instance (``gan.d_loss(...)``) named no target at all: ``log(p + 1e-8)`` of a float16 sigmoid output
was found only through MP205 on the head (held-out gan_log_eps_k3.py:40).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

_K3 = """
    import numpy as np
    import keras
    from keras import layers, ops
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Critic(keras.Model):
        def __init__(self):
            super().__init__()
            self.net = keras.Sequential([keras.Input((16,)), layers.Dense(32, activation="relu"),
                                         layers.Dense(1, activation="sigmoid")])

        def call(self, x):
            return self.net(x)

        def bce_loss(self, real_p, fake_p):
            return -ops.mean(ops.log(real_p + 1e-8) + ops.log(1.0 - fake_p + 1e-8))


    def hinge_loss(scores, margin):
        return ops.mean(ops.maximum(0.0, margin - scores))

{loop}
"""

_MODULE_LOOP = """
    critic = Critic()
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
    real = np.random.default_rng(0).normal(size=(64, 16)).astype("float32")
    fake = np.random.default_rng(1).normal(size=(64, 16)).astype("float32")
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = critic.bce_loss(critic(real), critic(fake)) + hinge_loss(critic(real), 1.0)
            scaled = opt.scale_loss(loss)
        grads = tape.gradient(scaled, critic.trainable_variables)
        opt.apply_gradients(zip(grads, critic.trainable_variables))
"""

_MAIN_LOOP = """
    def main():
        critic = Critic()
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))
        real = np.random.default_rng(0).normal(size=(64, 16)).astype("float32")
        fake = np.random.default_rng(1).normal(size=(64, 16)).astype("float32")
        for step in range(3):
            with tf.GradientTape() as tape:
                real_p = critic(real)
                loss = critic.bce_loss(real_p, critic(fake))
                scaled = opt.scale_loss(loss)
            grads = tape.gradient(scaled, critic.trainable_variables)
            opt.apply_gradients(zip(grads, critic.trainable_variables))


    if __name__ == "__main__":
        main()
"""


def _tf_keras(code: str) -> str:
    """The same script for tf_keras (Keras 2): its LossScaleOptimizer spelling and get_scaled_loss, tf.math ops."""
    return code.replace("import keras\n", "import tf_keras as keras\n").replace(
        "from keras import layers, ops", "from tf_keras import layers").replace("ops.", "tf.math.").replace(
        "tf.math.mean", "tf.reduce_mean").replace("keras.optimizers.LossScaleOptimizer(", "keras.mixed_precision.LossScaleOptimizer(").replace(
        "opt.scale_loss(loss)", "opt.get_scaled_loss(loss)")


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("loop", [_MODULE_LOOP, _MAIN_LOOP], ids=["module-level", "main"])
def test_a_tape_block_outside_any_region_types_the_loss_it_calls(loop, keras):
    code = _K3.format(loop=loop)
    code = _tf_keras(code) if keras == 2 else code
    result = lint_snippet(code, ("MP202",), keras=keras, fix=False, filename="train_critic.py")
    assert [(f.code, f.line) for f in result.findings] == [("MP202", 19), ("MP202", 19)]


_FLOAT32_HEAD = _K3.replace('layers.Dense(1, activation="sigmoid")', 'layers.Dense(1, activation="sigmoid", dtype="float32")')


def test_a_float32_head_called_in_the_tape_block_passes_float32():
    # The same loop, with the model's output layer in float32: the loss gets float32 probabilities, 1e-8 is fine.
    code = _FLOAT32_HEAD.format(loop=_MODULE_LOOP)
    result = lint_snippet(code, ("MP202",), keras=3, fix=False, filename="train_critic.py")
    assert result.findings == []


_NO_TAPE = _MODULE_LOOP.replace("with tf.GradientTape() as tape:", "if True:").replace(
    "grads = tape.gradient(scaled, critic.trainable_variables)", "grads = None")


def test_the_same_calls_outside_a_tape_block_type_nothing():
    # Top-level code outside a tape block is not float16 compute (an evaluation loop, data preparation).
    code = _K3.format(loop=_NO_TAPE)
    result = lint_snippet(code, ("MP202",), keras=3, fix=False, filename="train_critic.py")
    assert result.findings == []
