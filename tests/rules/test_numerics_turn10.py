"""Turn 10: two classes of static misses, each reproduced first in a realistic script (failing), then fixed
in the model.

1. MP203: a variance written by hand (``reduce_mean((x - mean) ** 2)``, ``reduce_mean(tf.square(x - mean))``)
   and a mean of squares (``reduce_mean(x ** 2)``): TensorFlow's float16 mean sums its axis in float16
   before it divides (TF 2.21 CPU: the mean of 4096 squares of 10.0 is inf), so a mean of squares
   overflows as a sum of squares does; centred, it is a variance, as ``tf.math.reduce_variance`` is.
2. MP206: a float16 model/layer output that meets a certainly float32 tensor in a training step or a loss
   (TensorFlow raises TypeError / InvalidArgumentError), no longer hidden by "code that runs is float32".
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mpfix.engine import Engine, Options

from .mp2_lint import BOTH, IMPORTS, MP2, found, lint


def fixed(code: str, keras: int = 3) -> str:
    result = lint(code, keras)
    assert not result.errors, result.errors
    return result.fixed_text or textwrap.dedent(code).lstrip("\n")


# -- 1. MP203: variances and means of squares written by hand ----------------------------------------
LAYER_NORM = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class SimpleLayerNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.gamma = self.add_weight(name="gamma", shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            mean = tf.reduce_mean(x, axis=-1, keepdims=True)
            var = {variance}
            return (x - mean) * tf.math.rsqrt(var + 1e-3) * self.gamma


    model = keras.Sequential([keras.layers.Dense(256), SimpleLayerNorm(), keras.layers.Dense(1, dtype="float32")])
"""


@BOTH
@pytest.mark.parametrize("variance", [
    "tf.reduce_mean((x - mean) ** 2, axis=-1, keepdims=True)",
    "tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)",
    "tf.math.reduce_mean(tf.math.pow(x - mean, 2), axis=-1, keepdims=True)",
    "tf.math.reduce_variance(x, axis=-1, keepdims=True)",  # found before: the same class, the op
])
def test_a_variance_written_by_hand_is_a_variance(variance, keras):
    code = LAYER_NORM.format(imports=IMPORTS[keras], variance=variance)
    result = lint(code, keras, fix=False)
    assert [(f.code, f.line) for f in result.findings] == [("MP203", 13)]
    assert "variance" in result.findings[0].message
    assert "tf.float32" in fixed(code, keras)


def test_a_variance_from_a_mean_bound_elsewhere_still_needs_that_mean_to_be_of_x():
    # x - bias is not centred on x's mean: a mean of squares all the same (reported, not as a variance).
    code = LAYER_NORM.format(imports=IMPORTS[3], variance="tf.reduce_mean(tf.square(x - self.gamma), axis=-1)")
    result = lint(code, 3, fix=False)
    assert [(f.code, f.line) for f in result.findings] == [("MP203", 13)]
    assert "variance" not in result.findings[0].message


RMS = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class RMSNorm(keras.layers.Layer):
        def call(self, x):
            ms = {mean_square}
            return x * tf.math.rsqrt(ms + 1e-3)
"""


@BOTH
@pytest.mark.parametrize("mean_square", [
    "tf.reduce_mean(x ** 2, axis=-1, keepdims=True)",
    "tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)",
    "tf.reduce_mean(x * x, axis=-1, keepdims=True)",
])
def test_a_mean_of_squares_of_activations_is_reported_as_a_sum_of_squares_is(mean_square, keras):
    # Consistent with reduce_sum(square(x)) (found) and reduce_variance(x) (found): the float16 mean sums
    # the squares in float16 (TF 2.21 CPU: mean of 4096 squares of 10.0 is inf), and each square of an
    # activation past 256 is inf already.
    code = RMS.format(imports=IMPORTS[keras], mean_square=mean_square)
    assert found(code, keras) == [("MP203", 9)]


def test_a_mean_of_squares_of_probabilities_is_bounded():
    code = RMS.format(imports=IMPORTS[3], mean_square="tf.reduce_mean(tf.square(tf.nn.sigmoid(x)), axis=-1)")
    assert found(code, 3) == []


def test_a_mean_of_squares_computed_in_float32_is_fine():
    code = RMS.format(imports=IMPORTS[3],
                      mean_square="tf.cast(tf.reduce_mean(tf.square(tf.cast(x, tf.float32)), -1), x.dtype)")
    assert found(code, 3) == []


def test_a_keras_ops_mean_sums_in_float32():
    # keras.ops.mean casts float16 to float32 before tf.reduce_mean and back (keras/src/backend/tensorflow/
    # numpy.py: "tf.reduce_mean does not handle low precision overflow"): benchmarks/unseen/scalenorm_k3_ok.py.
    code = """
        import keras
        from keras import layers, ops

        keras.mixed_precision.set_global_policy("mixed_float16")


        class ScaleNorm(layers.Layer):
            def call(self, x):
                norm = ops.sqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + 1e-3)
                return x / norm
    """
    assert found(code, 3) == []
    assert found(code.replace("ops.mean(", "ops.sum("), 3) == [("MP203", 9)]


# -- 2. MP206: a float16 model output meets a certainly float32 tensor in a training step or a loss ----------
L2_STEP = """
    import numpy as np
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    def build():
        inputs = keras.Input((20,))
        h = keras.layers.Dense(64, activation="relu")(inputs)
        return keras.Model(inputs, keras.layers.Dense(1{head})(h))


    model = build()
    optimizer = keras.optimizers.Adam(1e-3)
    mse = keras.losses.mean_squared_error


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = tf.reduce_mean(mse(y, pred)) + 1e-4 * tf.add_n([tf.nn.l2_loss(w) for w in model.trainable_weights])
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""


@BOTH
def test_a_float16_loss_plus_a_float32_weight_penalty_is_a_mix(keras):
    # Ran (TF 2.21, Keras 3): TypeError: Input 'y' of 'AddV2' Op has type float32 that does not match type float16.
    code = L2_STEP.format(imports=IMPORTS[keras], head="")
    result = [f for f in lint(code, keras, fix=False).findings if f.code == "MP206"]
    assert [(f.code, f.line) for f in result] == [("MP206", 23)]
    assert "`model`" in result[0].message
    assert "tf.cast(tf.reduce_mean(mse(y, pred)), tf.float32) + 1e-4" in fixed(code, keras)


@BOTH
def test_a_float32_head_makes_no_mix(keras):
    assert found(L2_STEP.format(imports=IMPORTS[keras], head=', dtype="float32"'), keras, only="MP206") == []


MASKED_STEP = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")

    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    optimizer = keras.optimizers.Adam(1e-3)


    @tf.function
    def train_step(x, y, valid):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            weights = tf.cast(valid, tf.float32)
            err = tf.square(out - tf.cast(y, out.dtype))
            loss = {loss}
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
"""


@BOTH
def test_a_float16_error_times_a_float32_mask_is_a_mix(keras):
    # Ran (TF 2.21, Keras 3): TypeError: Input 'y' of 'Mul' Op has type float32 that does not match type float16.
    loss = "tf.reduce_sum(err * weights[:, None]) / tf.reduce_sum(weights)"
    code = MASKED_STEP.format(imports=IMPORTS[keras], loss=loss)
    assert found(code, keras, only="MP206") == [("MP206", 16)]
    assert "tf.reduce_sum(tf.cast(err, tf.float32) * weights[:, None])" in fixed(code, keras)


@BOTH
def test_the_error_cast_to_float32_first_is_no_mix(keras):
    loss = "tf.reduce_sum(tf.cast(err, tf.float32) * weights[:, None]) / tf.reduce_sum(weights)"
    code = MASKED_STEP.format(imports=IMPORTS[keras], loss=loss)
    assert found(code, keras, only="MP206") == []


def test_the_unseen_tf_keras_masked_token_loss():
    # benchmarks/unseen/seq2seq_masking_k2.py: a tf_keras Loss object computes in y_pred's dtype (float16 logits),
    # and the float32 sequence_mask meets it (ran: TypeError Mul float32 vs float16).
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "unseen" / "seq2seq_masking_k2.py"
    engine = Engine(MP2, Options(keras="2", unsafe_fixes=True, project_policy=False))
    result = engine.lint(path.read_text(), path, fix=True)
    assert ("MP206", 28) in [(f.code, f.line) for f in engine.lint(path.read_text(), path, fix=False).findings]
    assert "tf.reduce_sum(tf.cast(per_token, tf.float32) * mask)" in result.fixed_text


@BOTH
def test_a_model_handed_in_is_not_certain(keras):
    # A function of a library handed some model: its output's dtype is the caller's business, and code that runs
    # proves the float32 side right (dtype_env._float32_by_use): no finding by assumption.
    code = """
        import tensorflow as tf

        def masked_error(model, x, y, valid):
            out = model(x)
            return tf.reduce_sum(tf.square(out - y) * tf.cast(valid, tf.float32))
    """
    assert found(code, keras, only="MP206") == []


@BOTH
def test_a_float32_mask_meeting_a_value_of_unknown_origin_stays_evidence(keras):
    # The library shape `neg_log_iou * mask_`: nothing here is a model this file builds.
    code = """
        import tensorflow as tf

        @tf.function
        def iou_loss(pred_boxes, boxes, mask):
            mask_ = tf.cast(mask, tf.float32)
            area = (pred_boxes[..., 2] - pred_boxes[..., 0]) * (pred_boxes[..., 3] - pred_boxes[..., 1])
            neg_log_iou = -tf.math.log(area / (tf.reduce_sum(boxes, -1) + 1e-8))
            return tf.reduce_sum(neg_log_iou * mask_)
    """
    assert found(code, keras, only="MP206") == []


# -- wave 6 (benchmarks/unseen/gem_pool_k3.py): a learned exponent starts at its initializer's value --------
GEM = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class GeMPooling(keras.layers.Layer):
        def __init__(self, p={p}, eps=1e-6, **kwargs):
            super().__init__(**kwargs)
            self.init_p, self.eps = p, eps

        def build(self, input_shape):
            self.p = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.init_p), name="p")

        def call(self, x):
            x = tf.maximum(x, self.eps)
            pooled = tf.reduce_mean(tf.pow(x, self.p), axis=[1, 2])
            return tf.pow(pooled, 1.0 / self.p)
"""


@BOTH
def test_a_learned_exponent_counts_from_its_initial_value(keras):
    # GeM pooling, p = 3 at the start: relu features of 0-255 images past 40 cube past 65504 (ran: loss nan).
    # `self.init_p, self.eps = p, eps` is a paired unpacking: init_p is p (bindings.decompose), default 3.0.
    assert found(GEM.format(imports=IMPORTS[keras], p="3.0"), keras) == [("MP204", 17)]


@BOTH
def test_a_learned_exponent_starting_at_most_two_is_left_alone(keras):
    assert found(GEM.format(imports=IMPORTS[keras], p="1.0"), keras) == []


# -- wave 6 (benchmarks/unseen/causal_where_k3_ok.py): a causal select of -1e9 read only by a softmax ---------
CAUSAL = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class CausalScores(keras.layers.Layer):
        def call(self, q, k):
            length = tf.shape(q)[1]
            scores = tf.matmul(q, k, transpose_b=True)
            causal = tf.linalg.band_part(tf.ones((length, length), tf.bool), {band})
            scores = tf.where(causal, scores, -1e9)
            return {use}
"""


@BOTH
def test_a_causal_select_read_by_a_softmax_leaves_no_row_all_minus_inf(keras):
    # -1e9 is -inf in float16, but band_part(ones, -1, 0) keeps each row's first column and softmax's exp makes
    # -inf 0 (ran: finite loss); MP201 stays silent (wave 6 judged its finding false).
    code = CAUSAL.format(imports=IMPORTS[keras], band="-1, 0", use="tf.nn.softmax(scores, axis=-1)")
    assert found(code, keras, only="MP201") == []


@BOTH
@pytest.mark.parametrize(("band", "use"), [
    ("0, -1", "tf.nn.softmax(scores, axis=-1)"),  # upper band: a row past the keys' length keeps nothing
    ("-1, 0", "tf.nn.softmax(scores * 0.5, axis=-1)"),  # arithmetic before the softmax is not followed
    ("-1, 0", "scores"),  # handed on: what meets it later is not seen
    # log_softmax keeps the masked -inf (x - logsumexp): a token cross-entropy's one_hot * log_probs is then
    # 0 * -inf = NaN (TF 2.21 CPU, causal T=4: [nan nan nan 1.24] in float16, finite in float32).
    ("-1, 0", "tf.nn.log_softmax(scores, axis=-1)"),
    ("-1, 0", "tf.math.log_sigmoid(scores)"),
])
def test_other_selects_of_minus_inf_are_still_reported(band, use, keras):
    code = CAUSAL.format(imports=IMPORTS[keras], band=band, use=use)
    assert found(code, keras, only="MP201") == [("MP201", 12)]


SUBCLASSED = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Regressor(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(64, activation="relu")
            self.head = keras.layers.Dense(1{head})

        def call(self, x):
            return self.head(self.hidden(x))

        def train_step(self, data):
            x, y, w = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = tf.reduce_mean(tf.abs(y_pred - tf.cast(y, y_pred.dtype)) * tf.cast(w, tf.float32))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {{"loss": loss}}
"""


@BOTH
def test_a_models_own_output_in_its_train_step_is_certain(keras):
    # `self(x)` of a model whose call returns its float16 Dense head, times a float32 sample weight: TypeError.
    code = SUBCLASSED.format(imports=IMPORTS[keras], head="")
    assert found(code, keras, only="MP206") == [("MP206", 20)]
    assert found(SUBCLASSED.format(imports=IMPORTS[keras], head=', dtype="float32"'), keras, only="MP206") == []
