"""Gradient transforms in a same-file helper called with the gradients of a scaled loss (held-out
agc_train_step_k3: adaptive gradient clipping of ``scale_loss`` gradients before Keras 3's ``apply`` unscales them;
ran: loss 0.742 flat over 3 epochs). Turn 19 reported MP109 there without a fix.

Keras 3 has no public unscale: the fix divides the gradients by ``optimizer.scale_loss(1.0)`` (the factor the loss
was multiplied by, what ``LossScaleOptimizer.apply`` divides by) for the helper and multiplies its result back, so
``apply`` still skips overflowed steps and moves the dynamic scale (ran on the held-out script: loss 0.55, accuracy
0.715, as unscaling by hand gave). tf_keras: the guide's ``get_unscaled_gradients`` moves to the gradient call.
Where the fix is not plainly right (the helper reads the scale, gets the optimizer, the gradients are zipped or a
dict) MP109 stays without a fix; helpers that do not depend on the gradients' size are not reported.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import fixed, lint_snippet

AGC = """
    def adaptive_clip(grads, params, clip=0.01):
        clipped = []
        for g, p in zip(grads, params):
            max_norm = clip * ops.maximum(ops.norm(p), 1e-3)
            g_norm = ops.norm(g)
            clipped.append(ops.where(g_norm > max_norm, g * (max_norm / ops.maximum(g_norm, 1e-6)), g))
        return clipped
"""

K3_STEP = """
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
            {call}
            self.optimizer.apply(grads, self.trainable_variables)
            return {{"loss": loss}}
"""

K3_LOOP = """
    import keras
    import tensorflow as tf


    def clip_grads(grads, max_norm=1.0):
        clipped, _ = tf.clip_by_global_norm(grads, max_norm)
        return clipped


    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))


    @tf.function
    def train_step(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, {sources})
        clipped = clip_grads(grads)
        optimizer.apply_gradients(zip(clipped, model.trainable_variables))
        return loss
"""


def k3_step(call: str = "grads = adaptive_clip(grads, self.trainable_variables)", helper: str = AGC) -> str:
    return K3_STEP.format(helper=textwrap.indent(textwrap.dedent(helper), "    "), call=call)


def mp109(code: str, keras: int) -> list:
    compile(textwrap.dedent(code), "train.py", "exec")
    return [f for f in lint_snippet(code, ("MP1",), keras=keras, filename="train.py").findings if f.code == "MP109"]


def test_keras3_adaptive_clip_in_a_train_step_is_unscaled_for_the_helper_and_scaled_back():
    code = k3_step()
    [finding] = mp109(code, 3)
    assert finding.fix is not None and "scale_loss(1.0)" in finding.message
    out = fixed(code, ("MP109",), keras=3)
    expected = textwrap.dedent(code).lstrip("\n").replace(
        "        grads = adaptive_clip(grads, self.trainable_variables)\n",
        "        loss_scale = self.optimizer.scale_loss(1.0)\n"
        "        grads = [None if g is None else ops.divide(g, loss_scale) for g in grads]\n"
        "        grads = adaptive_clip(grads, self.trainable_variables)\n"
        "        grads = [None if g is None else ops.multiply(g, loss_scale) for g in grads]\n")
    assert out == expected
    assert lint_snippet(out, ("MP1",), keras=3).findings == []  # no MP110: the gradients carry the scale again


def test_keras3_clip_helper_into_another_name_in_a_custom_loop():
    code = K3_LOOP.format(sources="model.trainable_variables")
    [finding] = mp109(code, 3)
    out = fixed(code, ("MP109",), keras=3)
    assert "    loss_scale = optimizer.scale_loss(1.0)\n" \
           "    unscaled_grads = [None if g is None else keras.ops.divide(g, loss_scale) for g in grads]\n" \
           "    clipped = clip_grads(unscaled_grads)\n" \
           "    clipped = [None if g is None else keras.ops.multiply(g, loss_scale) for g in clipped]\n" in out
    assert lint_snippet(out, ("MP1",), keras=3).findings == []


def test_keras3_fresh_name_does_not_shadow_a_global_the_step_reads():
    code = K3_LOOP.format(sources="model.trainable_variables").replace(
        "        return loss\n", "        return loss * loss_scale\n").replace(
        "    optimizer = ", "    loss_scale = 2.0\n    optimizer = ")
    out = fixed(code, ("MP109",), keras=3)
    assert "loss_scale_2 = optimizer.scale_loss(1.0)" in out and "return loss * loss_scale\n" in out


def test_keras3_no_fix_where_it_is_not_plainly_right():
    # gradients of a dict of variables come back as a dict
    code = K3_LOOP.format(sources="{'w': model.trainable_variables[0]}")
    assert [f.fix for f in mp109(code, 3)] == [None]
    # the helper is given the gradients zipped with the variables
    zipped = k3_step("grads = adaptive_clip(list(zip(grads, self.trainable_variables)), self.trainable_variables)")
    assert [f.fix for f in mp109(zipped, 3)] == [None]
    # the helper reads the scale itself (a threshold in scaled units): unscaling would correct twice
    reads = AGC.replace("max_norm = clip *", "max_norm = self_optimizer.dynamic_scale * clip *")
    assert [f.fix for f in mp109(k3_step(helper=reads), 3)] == [None]
    # the helper is given the optimizer
    given = AGC.replace("(grads, params, clip=0.01)", "(grads, params, opt, clip=0.01)")
    call = "grads = adaptive_clip(grads, self.trainable_variables, self.optimizer)"
    assert [f.fix for f in mp109(k3_step(call, given), 3)] == [None]


def test_helpers_that_do_not_depend_on_the_gradients_size_are_not_reported():
    # gradient centralisation is linear: GC(s * g) = s * GC(g), the scale passes through it
    centralise = """
        def centralise(grads):
            return [g - ops.mean(g, axis=tuple(range(len(g.shape) - 1)), keepdims=True) if len(g.shape) > 1 else g
                    for g in grads]
    """
    assert mp109(k3_step("grads = centralise(grads)", centralise), 3) == []
    # the fixed step itself, and gradients unscaled and scaled back by hand around the helper (Keras' own spelling)
    by_hand = k3_step("s = self.optimizer.scale_loss(1.0)\n"
                      "            grads = adaptive_clip([g if g is None else g / s for g in grads], self.trainable_variables)\n"
                      "            grads = [g * s for g in grads]")
    assert lint_snippet(by_hand, ("MP1",), keras=3).findings == []


K2 = """
    import tensorflow as tf
    import tf_keras as keras


    def adaptive_clip(grads, params, clip=0.01):
        clipped = []
        for g, p in zip(grads, params):
            max_norm = clip * tf.maximum(tf.norm(p), 1e-3)
            g_norm = tf.norm(g)
            clipped.append(tf.where(g_norm > max_norm, g * (max_norm / tf.maximum(g_norm, 1e-6)), g))
        return clipped


    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))


    @tf.function
    def train_step(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.binary_crossentropy(y, model(x, training=True)))
            scaled_loss = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        {order}
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""
K2_FIXED = ("    grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))\n"
            "    grads = adaptive_clip(grads, model.trainable_variables)\n"
            "    opt.apply_gradients")


def test_tf_keras_helper_before_the_unscale_gets_the_guides_unscale_first():
    for order in ("grads = adaptive_clip(grads, model.trainable_variables)\n"
                  "        grads = opt.get_unscaled_gradients(grads)",
                  "grads = opt.get_unscaled_gradients(adaptive_clip(grads, model.trainable_variables))"):
        code = K2.format(order=order)
        [finding] = mp109(code, 2)
        out = fixed(code, ("MP109",), keras=2)
        assert K2_FIXED in out, (order, out)
        assert lint_snippet(out, ("MP1",), keras=2).findings == []
    # the unscale inside the update's zip gives way to its argument there
    code = K2.format(order="grads = adaptive_clip(grads, model.trainable_variables)").replace(
        "opt.apply_gradients(zip(grads,", "opt.apply_gradients(zip(opt.get_unscaled_gradients(grads),")
    [finding] = mp109(code, 2)
    out = fixed(code, ("MP109",), keras=2)
    assert K2_FIXED + "(zip(grads, model.trainable_variables))" in out, out
    assert lint_snippet(out, ("MP1",), keras=2).findings == []
    # a conditional unscale is not moved
    cond = K2.format(order="grads = adaptive_clip(grads, model.trainable_variables)\n"
                           "        if UNSCALE:\n            grads = opt.get_unscaled_gradients(grads)")
    assert [f.fix for f in mp109(cond, 2)] in ([None], [])


def test_tf_keras_helper_after_the_unscale_is_right():
    code = K2.format(order="grads = adaptive_clip(opt.get_unscaled_gradients(grads), model.trainable_variables)")
    assert mp109(code, 2) == []


def test_keras3_variable_list_bound_in_the_module_and_a_method_helper_spelled_through_tf_keras():
    # `variables = model.trainable_variables + head.trainable_variables` at module level: tape.gradient gives a list
    code = K3_LOOP.format(sources="variables").replace(
        "    optimizer = ", "    variables = model.trainable_variables + head.trainable_variables\n    optimizer = ")
    assert [f.fix is not None for f in mp109(code, 3)] == [True]
    # a parameter of the step could be anything (a dict): no fix
    param = K3_LOOP.format(sources="variables").replace("def train_step(model, x, y)", "def train_step(model, variables, x, y)")
    assert [f.fix for f in mp109(param, 3)] == [None]
    method = """
        import tensorflow as tf


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))

            def clip_gradients(self, grads):
                return [tf.clip_by_norm(g, 0.1 * tf.norm(v)) for g, v in zip(grads, self.model.trainable_variables)]

            @tf.function
            def step(self, x, y):
                with tf.GradientTape() as tape:
                    scaled = self.optimizer.scale_loss(tf.reduce_mean(tf.square(self.model(x) - y)))
                grads = tape.gradient(scaled, self.model.trainable_variables)
                grads = self.clip_gradients(grads)
                self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    """
    out = fixed(method, ("MP109",), keras=3)
    assert "        grads = [None if g is None else tf.keras.ops.divide(g, loss_scale) for g in grads]\n" \
           "        grads = self.clip_gradients(grads)\n" in out
    assert lint_snippet(out, ("MP1",), keras=3).findings == []


def test_keras3_no_fix_where_the_helper_returns_pairs_or_its_result_is_rebound_before_the_update():
    pairs = K3_LOOP.format(sources="model.trainable_variables").replace(
        "        clipped, _ = tf.clip_by_global_norm(grads, max_norm)\n        return clipped\n",
        "        clipped, _ = tf.clip_by_global_norm(grads, max_norm)\n        return list(zip(clipped, VARIABLES))\n").replace(
        "optimizer.apply_gradients(zip(clipped, model.trainable_variables))", "optimizer.apply_gradients(clipped)")
    assert [f.fix for f in mp109(pairs, 3)] == [None]
    rebound = K3_LOOP.format(sources="model.trainable_variables").replace(
        "        clipped = clip_grads(grads)\n", "        clipped = clip_grads(grads)\n        clipped = clipped[::-1]\n")
    assert [f.fix for f in mp109(rebound, 3)] == [None]


NORMALISE = """
    def normalise(grads, eps=1e-6):
        out = []
        for g in grads:
            g_norm = ops.norm(g)
            out.append(g / (g_norm + eps))
        return out
"""


def test_a_helper_dividing_gradients_by_their_own_norm_is_reported_and_fixed():
    # g / norm(g) does not depend on the scale: apply's division by 32768 then shrinks every update by it
    code = k3_step("grads = normalise(grads)", NORMALISE)
    [finding] = mp109(code, 3)
    assert "divides the gradients by their own size" in finding.message and finding.fix is not None
    assert lint_snippet(fixed(code, ("MP109",), keras=3), ("MP1",), keras=3).findings == []
    l2 = "\ndef normalise(grads):\n    return [tf.math.l2_normalize(g) for g in grads]\n"
    assert len(mp109(k3_step("grads = normalise(grads)", l2), 3)) == 1
    # controls: gradients divided by the weights' norm (linear in the gradients), or by a constant
    by_weights = """
        def scale_by_weights(grads, params):
            return [g / (ops.norm(p) + 1e-3) for g, p in zip(grads, params)]
    """
    assert mp109(k3_step("grads = scale_by_weights(grads, self.trainable_variables)", by_weights), 3) == []
    halve = "\ndef halve(grads):\n    return [g / 2.0 for g in grads]\n"
    assert mp109(k3_step("grads = halve(grads)", halve), 3) == []
    # tf_keras: normalised before the unscale
    k2 = K2.format(order="grads = normalise(grads)\n        grads = opt.get_unscaled_gradients(grads)").replace(
        "    def adaptive_clip(", NORMALISE.replace("ops.norm", "tf.norm").lstrip("\n") + "\n\n    def adaptive_clip(")
    assert [f.code for f in mp109(k2, 2)] == ["MP109"]
