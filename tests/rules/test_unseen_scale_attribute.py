"""MP304 on Keras 3: ``optimizer.loss_scale`` becomes ``optimizer.dynamic_scale``, which is a variable, not a
tensor. ``float(optimizer.dynamic_scale)`` works on a plain optimizer but fails when the optimizer was built
under a distribution strategy (the variable is a MirroredVariable: "float() argument must be ... not
'MirroredVariable'"; TF 2.21 / keras 3.15), while ``float(optimizer.dynamic_scale.numpy())`` works in both.
Wave 5 of the held-out scripts: strategy_scale_attr_k3.py's fixed copy still crashed. Where the read is the
argument of ``float``/``int``, the fix reads ``.numpy()`` (a fact of the API table); elsewhere (a summary, a
print) the variable itself is right."""

from __future__ import annotations

from mpfix.testing import fixed, lint_snippet

LOOP = """
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))

    for step in range(10):
        loss = distributed_step()
        print(f"step {step} loss {float(loss):.4f} scale {float(optimizer.loss_scale):.0f}")
        tf.summary.scalar("loss_scale", optimizer.loss_scale, step=step)
"""


def test_number_read_of_the_keras3_scale_goes_through_numpy():
    result = lint_snippet(LOOP, "MP304", keras=3, policy=None, filename="train.py")
    assert [(f.code, f.line) for f in result.findings] == [("MP304", 9), ("MP304", 10)]
    after = fixed(LOOP, "MP304", keras=3, filename="train.py")
    assert "float(optimizer.dynamic_scale.numpy())" in after
    assert 'tf.summary.scalar("loss_scale", optimizer.dynamic_scale, step=step)' in after


def test_keras2_target_is_a_tensor_and_needs_nothing_more():
    code = LOOP.replace("loss_scale", "dynamic_scale").replace('"dynamic_scale"', '"loss_scale"')
    after = fixed(code, "MP304", keras=2, filename="train.py")
    assert "float(optimizer.loss_scale)" in after
