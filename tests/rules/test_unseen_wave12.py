"""Classes found missing (or wrongly reported) on wave 12 of ``benchmarks/unseen`` (turn 16, scored before tuning).

1. dp_sgd_k3.py: a Keras 3 hand-written DP-SGD step takes per-example gradients with ``tape.jacobian`` of
   ``optimizer.scale_loss(losses)``, clips each to norm 1 and adds Gaussian noise while they still carry the loss
   scale (32768), then ``optimizer.apply`` unscales: every update is ~1/32768 of what was meant. Ran, TF 2.21 CPU
   (SGD): loss 0.777 flat, accuracy 0.491 for 3 epochs; unscaled before clipping: loss 0.41 -> 0.13, accuracy 0.95.
   Missed: the fact missing is that ``tape.jacobian``/``tape.batch_jacobian`` are gradient calls too (per-example
   gradients, linear in the target, so they carry its scale). With it MP109 reports the noise on scaled gradients
   (no fix: noise is moved by hand). The same step taking the jacobian of the unscaled losses and scaling nothing is
   not MP109's (nothing scaled)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

RULES = tuple(all_rules())


def lint(code: str, keras: str = "3", rules=RULES):
    code = textwrap.dedent(code).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(rules, Options(keras=keras, project_policy=False)).lint(code, Path("train.py")).findings


def rows(findings, code: str) -> list[int]:
    return sorted(f.line for f in findings if f.code == code)


DP_SGD_K3 = """
    import tensorflow as tf
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1, dtype="float32")])
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    per_example = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)


    @tf.function
    def private_step(xb, yb):
        with tf.GradientTape() as tape:
            losses = per_example(yb, model(xb, training=True))
            scaled = optimizer.scale_loss(losses)
        jacobians = tape.{method}(scaled, model.trainable_variables)
        grads = []
        for j in jacobians:
            noisy = tf.reduce_sum(j, axis=0) + tf.random.normal(j.shape[1:], stddev=0.5)
            grads.append(noisy / 32)
        optimizer.apply(grads, model.trainable_variables)
"""


def test_noise_on_scaled_per_example_jacobians_is_reported_keras3():
    for method in ("jacobian", "batch_jacobian"):
        findings = lint(DP_SGD_K3.replace("{method}", method))
        assert rows(findings, "MP109") == [17], (method, [(f.code, f.line) for f in findings])
        assert all(f.fix is None for f in findings if f.code == "MP109")


def test_jacobian_of_unscaled_losses_is_not_a_transform_of_scaled_gradients():
    code = DP_SGD_K3.replace("{method}", "jacobian").replace("scaled = optimizer.scale_loss(losses)", "scaled = losses")
    assert rows(lint(code), "MP109") == []


def test_jacobian_outside_a_training_step_is_silent():
    code = """
        import tensorflow as tf
        import keras

        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])


        def input_sensitivity(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = model(x)
            return tape.batch_jacobian(y, x)
    """
    assert lint(code) == []
