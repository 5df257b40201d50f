"""Wave 14 of ``benchmarks/unseen`` (turn 18, scored untuned: bugs 5/6): agc_train_step_k3.py applies adaptive
gradient clipping (Brock et al. 2021) in a same-file helper, ``where(g_norm > max_norm, g * max_norm / g_norm, g)``,
to the gradients of ``scale_loss`` and then ``optimizer.apply``: every update is capped at 1/32768 of the cap (ran:
loss 0.742 flat / unscaled before the clip: 0.55). MP109 missed it. The fact missing: a helper that selects
(the op table's SELECT: where/select) by an ordering test of two values, neither 0, decides on the gradients' size,
as a helper calling clip_by_norm does.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import lint_snippet


def codes(code: str, keras: str) -> list[tuple[str, int]]:
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    result = lint_snippet(code, ("MP1",), keras=keras, filename="train.py")
    return sorted((f.code, f.line) for f in result.findings if f.code == "MP109")


HELPER = """
    def adaptive_clip(grads, params, clip=0.01):
        clipped = []
        for g, p in zip(grads, params):
            max_norm = clip * {ns}.maximum({ns}.norm(p), 1e-3)
            g_norm = {ns}.norm(g)
            clipped.append({ns}.where({test}, g * (max_norm / {ns}.maximum(g_norm, 1e-6)), g))
        return clipped
"""

K3 = """
    import keras
    import tensorflow as tf
    from keras import ops
    {helper}

    class AGCModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
                scaled_loss = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled_loss, self.trainable_variables)
            grads = adaptive_clip(grads, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            return {{"loss": loss}}
"""

K2 = """
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras
    {helper}

    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))


    @tf.function
    def train_step(model, x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.binary_crossentropy(y, model(x, training=True))
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        {order}
        opt.apply_gradients(zip(grads, model.trainable_variables))
"""


def helper(ns: str, test: str = "g_norm > max_norm") -> str:
    return textwrap.indent(textwrap.dedent(HELPER.format(ns=ns, test=test)), "    ")


def test_keras3_adaptive_clip_of_scaled_gradients():
    assert codes(K3.format(helper=helper("ops")), "3") == [("MP109", 22)]
    # a select on the sign only (0 is scale-free) decides nothing on the size
    assert codes(K3.format(helper=helper("ops", "g_norm > 0")), "3") == []


def test_tf_keras_adaptive_clip_before_unscale():
    before = "grads = opt.get_unscaled_gradients(adaptive_clip(grads, model.trainable_variables))"
    after = "grads = adaptive_clip(opt.get_unscaled_gradients(grads), model.trainable_variables)"
    assert [c for c, _ in codes(K2.format(helper=helper("tf"), order=before), "2")] == ["MP109"]
    assert codes(K2.format(helper=helper("tf"), order=after), "2") == []
