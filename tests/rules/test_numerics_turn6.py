"""Turn 6: MP2 false positives on the old corpora and in-file misses on issue 18's new corpora.

Compiled losses: a Keras 2 ``Loss`` subclass whose file calls its compiled losses itself (``self.loss.get(k)``,
``self.loss[k]`` in an overridden ``train_step``) sees what those calls pass (dle EfficientDet
``utils/train_lib.py:147``: the class/box outputs are cast to float32 before the focal loss).
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])


def found(code: str, keras: int = 3) -> list[tuple[str, int]]:
    result = lint_snippet(code, "MP2", keras=keras, policy="mixed_float16", fix=False, filename="train_lib.py")
    return sorted((f.code, f.line) for f in result.findings)


# -- compiled losses called by the file's own train_step -------------------------------------------------
FOCAL = """
    import tensorflow as tf

    class StableFocalLoss(tf.keras.losses.Loss):
        def __init__(self, gamma, **kwargs):
            super().__init__(**kwargs)
            self.gamma = gamma

        def call(self, y, y_pred):
            normalizer, y_true = y
            negative_pred = -1.0 * y_pred
            modulator = tf.exp(self.gamma * y_true * negative_pred - self.gamma * tf.math.log1p(tf.exp(negative_pred)))
            return modulator / normalizer

    class DetectorTrain(tf.keras.Model):
        def _detection_loss(self, cls_outputs, labels):
            cls_outputs = [tf.cast(i, tf.float32) for i in cls_outputs]
            losses = []
            for level in range(3):
                class_loss_layer = self.loss.get({key}, None)
                if class_loss_layer:
                    losses.append(class_loss_layer([1.0, labels[level]], {outputs}[level]))
            return tf.add_n(losses)

        def train_step(self, data):
            images, labels = data
            with tf.GradientTape() as tape:
                cls_outputs = self(images, training=True)
                loss = self._detection_loss(cls_outputs, labels)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {{"loss": loss}}
"""
SOFTPLUS_LINE = 11


@pytest.mark.parametrize("key", ["'class_loss'", "StableFocalLoss.__name__"])
def test_a_loss_its_file_calls_on_float32_outputs_computes_in_float32(key):
    # Keras 2 does not convert a Loss's inputs: y_pred is what the file's train_step passes, float32 here.
    assert found(FOCAL.format(key=key, outputs="cls_outputs"), keras=2) == []


@pytest.mark.parametrize("key", ["'class_loss'", "StableFocalLoss.__name__"])
def test_a_loss_its_file_calls_on_float16_outputs_still_overflows(key):
    # Same loss, called on the model's raw float16 outputs (`self(images)` in a mixed model): still reported.
    code = FOCAL.format(key=key, outputs="labels").replace("labels[level]], labels[level]", "labels[level]], x[level]")
    code = code.replace("cls_outputs = [tf.cast(i, tf.float32) for i in cls_outputs]", "x = cls_outputs")
    assert ("MP204", SOFTPLUS_LINE) in found(code, keras=2)


def test_a_loss_class_no_call_of_the_file_reaches_keeps_float16_inputs():
    # Without the file's own train_step calling it, the compiled loss gets the model's outputs: float16.
    code = FOCAL.format(key="'class_loss'", outputs="cls_outputs").split("    class DetectorTrain")[0]
    assert found(code, keras=2) == [("MP204", SOFTPLUS_LINE)]


def test_keras3_converts_a_loss_s_inputs_to_float32_either_way():
    assert found(FOCAL.format(key="'class_loss'", outputs="cls_outputs"), keras=3) == []


# -- pow exponents known through a constructor default or a parameter default (N13, N14) -----------------
GEM = """
    import tensorflow as tf

    def gem(x, axis=None, power=3., eps=1e-6):
        if axis is None:
            axis = [1, 2]
        tmp = tf.pow(tf.maximum(x, eps), power)
        return tf.pow(tf.reduce_mean(tmp, axis=axis, keepdims=False), 1. / power)

    class GeM(tf.keras.layers.Layer):
        def __init__(self, power=3.):
            super().__init__()
            self.power = power
            self.eps = 1e-6

        def call(self, x, axis=None):
            return gem(x, power=self.power, eps=self.eps, axis=axis)

    class GeMPooling2D(tf.keras.layers.Layer):
        def __init__(self, power=20., pool_size=(2, 2)):
            super().__init__()
            self.power = power
            self.pool_size = pool_size

        def call(self, x):
            tmp = tf.pow(x, self.power)
            tmp = tf.nn.avg_pool(tmp, self.pool_size, None, "VALID")
            return tf.pow(tmp, 1. / self.power)
"""


@BOTH
def test_pow_exponents_from_constructor_and_parameter_defaults_overflow(keras):
    # GeMPooling2D: x ** 20 is inf in float16 for x > 1.74; gem: x ** 3 past x ~ 40 (post-ReLU activations).
    assert found(GEM, keras) == [("MP204", 6), ("MP204", 25)]


@BOTH
def test_a_caller_passing_a_small_exponent_decides_the_parameter(keras):
    code = GEM.replace("gem(x, power=self.power,", "gem(x, power=2.,")
    assert ("MP204", 6) not in found(code, keras)


FOCAL_BETA = """
    import tensorflow as tf

    class PenaltyReducedLogisticFocalLoss(object):
        def __init__(self, alpha=2.0, beta=4.0, sigmoid_clip_value=1e-4):
            self._alpha = alpha
            self._beta = beta
            self._sigmoid_clip_value = sigmoid_clip_value

        def __call__(self, prediction_tensor, target_tensor, weights=1.0):
            is_present_tensor = tf.math.equal(target_tensor, 1.0)
            prediction_tensor = tf.clip_by_value(tf.sigmoid(prediction_tensor),
                                                 self._sigmoid_clip_value, 1 - self._sigmoid_clip_value)
            positive_loss = tf.math.pow((1 - prediction_tensor), self._alpha) * tf.math.log(prediction_tensor)
            negative_loss = (tf.math.pow((1 - target_tensor), self._beta) *
                             tf.math.pow(prediction_tensor, self._alpha) * tf.math.log(1 - prediction_tensor))
            return -tf.where(is_present_tensor, positive_loss, negative_loss) * weights

    class Gate(tf.keras.layers.Layer):
        def __init__(self, gamma=4.0):
            super().__init__()
            self.gamma = gamma

        def call(self, x):
            return tf.pow(tf.sigmoid(x), self.gamma)
"""


@BOTH
def test_hyper_parameter_exponents_of_loss_terms_and_bounded_bases_stay_silent(keras):
    # A loss's hyper-parameter exponents modulate terms in [0, 1] (focal alpha/beta: tfm centernet_losses.py:76);
    # a base at most 1 (a sigmoid) cannot overflow whatever the exponent.
    assert [f for f in found(FOCAL_BETA, keras) if f[0] == "MP204"] == []


# -- a running sum of an attention distribution is bounded by 1 (C25; addons attention_wrapper.py:947) ---------
MONOTONIC = """
    import functools

    import tensorflow as tf


    def monotonic_attention(p_choose_i, previous_attention, mode):
        p_choose_i = tf.convert_to_tensor(p_choose_i, name="p_choose_i")
        previous_attention = tf.convert_to_tensor(previous_attention, name="previous_attention")
        if mode == "parallel":
            cumprod_1mp = tf.math.cumprod(1 - p_choose_i, axis=1, exclusive=True)
            attention = p_choose_i * cumprod_1mp * tf.cumsum(
                previous_attention / tf.clip_by_value(cumprod_1mp, 1e-10, 1.0), axis=1)
        else:
            p_choose_i *= tf.cumsum(previous_attention, axis=1)
            attention = p_choose_i * tf.math.cumprod(1 - p_choose_i, axis=1, exclusive=True)
        return attention


    def _monotonic_probability_fn(score, previous_alignments, mode):
        p_choose_i = tf.sigmoid(score)
        return monotonic_attention(p_choose_i, previous_alignments, mode)


    class AttentionMechanism(tf.keras.layers.Layer):
        def __init__(self, units, probability_fn, **kwargs):
            super().__init__(**kwargs)
            self.probability_fn = probability_fn
            self.query_layer = tf.keras.layers.Dense(units)

        def call(self, inputs):
            query, state = inputs
            score = tf.reduce_sum(self.query_layer(query), axis=-1)
            return self.probability_fn(score, state)


    class MonotonicAttention(AttentionMechanism):
        def __init__(self, units, mode="parallel", **kwargs):
            wrapped_probability_fn = functools.partial(_monotonic_probability_fn, mode=mode)
            super().__init__(units, probability_fn=wrapped_probability_fn, **kwargs)
"""
PARALLEL_CUMSUM, HARD_CUMSUM = 11, 14


@BOTH
def test_a_cumsum_of_the_previous_alignments_is_bounded_by_one(keras):
    # probability_fn(score, state): the state is the previous alignments, a distribution (the seq2seq attention
    # contract); its running sum is at most 1. The quotient by a clipped cumprod is not: still reported.
    result = found(MONOTONIC, keras)
    assert ("MP203", PARALLEL_CUMSUM) in result
    assert ("MP203", HARD_CUMSUM) not in result


@BOTH
def test_a_cumsum_of_a_parameter_some_caller_passes_activations_still_overflows(keras):
    code = MONOTONIC + """
    class Window(tf.keras.layers.Layer):
        def call(self, x):
            return monotonic_attention(tf.sigmoid(x), x * 100.0, "hard")
    """
    assert ("MP203", HARD_CUMSUM) in found(code, keras)


@BOTH
def test_a_function_handed_on_under_another_name_is_no_distribution(keras):
    code = MONOTONIC.replace("probability_fn=wrapped_probability_fn", "score_fn=wrapped_probability_fn")
    code = code.replace("def __init__(self, units, probability_fn,", "def __init__(self, units, score_fn,")
    code = code.replace("self.probability_fn = probability_fn", "self.probability_fn = score_fn")
    assert ("MP203", HARD_CUMSUM) in found(code, keras)


# -- layers kept in a list of lists: the k-th element of what the class appends (N11, research detr_lib.py) -----
DECODER = """
    import tensorflow as tf


    class PrePostProcessingWrapper(tf.keras.layers.Layer):
        def __init__(self, layer, dropout):
            super().__init__()
            self.layer = layer
            self._dropout = dropout

        def build(self, input_shape):
            self.layer_norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32")
            super().build(input_shape)

        def call(self, to_add, *args, **kwargs):
            y = self.layer(*args, **kwargs)
            return self.layer_norm(to_add + y)


    class DecoderStack(tf.keras.layers.Layer):
        def __init__(self, hidden_size, num_layers):
            super().__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.layers = []

        def build(self, input_shape):
            for _ in range(self.num_layers):
                self_attention = tf.keras.layers.Dense(self.hidden_size)
                feed_forward = tf.keras.layers.Dense(self.hidden_size)
                self.layers.append([
                    {first},
                    PrePostProcessingWrapper(feed_forward, 0.1),
                ])
            super().build(input_shape)

        def call(self, decoder_inputs, training):
            queries = decoder_inputs
            outputs = []
            for _, layer in enumerate(self.layers):
                self_attention_layer = layer[0]
                attended = self_attention_layer(decoder_inputs, decoder_inputs)
                outputs.append(attended + queries)
            return tf.add_n(outputs)
"""
MIX = 42


@BOTH
def test_the_output_of_a_float32_wrapper_kept_in_a_list_meets_float16_queries(keras):
    # layer[0] is a PrePostProcessingWrapper (its call returns a dtype="float32" LayerNormalization's output):
    # attended is float32, queries float16 -> InvalidArgumentError in both generations.
    code = DECODER.format(first="PrePostProcessingWrapper(self_attention, 0.1)")
    assert ("MP206", MIX) in found(code, keras)


@BOTH
def test_a_list_element_of_plain_layers_is_the_compute_dtype(keras):
    # layer[0] is a plain Dense (the compute dtype); the float32 wrapper is element 1, never called here.
    assert ("MP206", MIX) not in found(DECODER.format(first="tf.keras.layers.Dense(self.hidden_size)"), keras)


# A loss class no compiled-loss key of the file can reach keeps its own inputs (float16 by the standard).
TWO_LOSSES = FOCAL.format(key="'class_loss'", outputs="cls_outputs").replace(
    "self.loss.get('class_loss', None)", "self.loss['box_loss']") + """
    class BoxLoss(tf.keras.losses.Loss):
        def call(self, y_true, box_outputs):
            return tf.reduce_sum(tf.abs(y_true - box_outputs))

    LOSSES = {'box_loss': BoxLoss()}
"""


def test_a_loss_class_no_compiled_key_of_its_file_reaches_keeps_float16_inputs():
    # 'box_loss' maps to BoxLoss in this file: StableFocalLoss is called by no train step here.
    assert found(TWO_LOSSES, keras=2) == [("MP204", SOFTPLUS_LINE)]


# -- exp of a value clipped by a constant computed with np.log (tfm legacy box_utils.py:352, stress) --------------
BOX_DECODE = """
    import numpy as np
    import tensorflow as tf

    BBOX_XFORM_CLIP = np.log({limit})


    def decode_boxes(encoded_boxes, anchors, weights=None):
        encoded_boxes = tf.cast(encoded_boxes, dtype=anchors.dtype)
        dh = encoded_boxes[..., 2:3]
        dw = encoded_boxes[..., 3:4]
        if weights:
            dh /= weights[2]
            dw /= weights[3]
        dh = tf.math.minimum(dh, BBOX_XFORM_CLIP)
        dw = tf.math.minimum(dw, BBOX_XFORM_CLIP)
        anchor_h = anchors[..., 2:3] - anchors[..., 0:1] + 1.0
        return tf.math.exp(dh) * anchor_h, tf.math.exp(dw) * anchor_h


    class BoxDecoder(tf.keras.layers.Layer):
        def call(self, encoded_boxes, anchors):
            return decode_boxes(encoded_boxes, anchors, weights=[10.0, 10.0, 5.0, 5.0])
"""
EXP_LINES = [("MP204", 17), ("MP204", 17)]


# Keras 3 only: tf_keras autocasts only the first call argument, so `anchors.dtype` (and the cast) is unknown there.
def test_exp_of_a_value_clipped_at_a_computed_constant_below_11_cannot_overflow():
    # np.log(1000 / 16) = 4.14: exp(dh) <= 62.5 whatever the box codes.
    assert [f for f in found(BOX_DECODE.format(limit="1000. / 16."), 3) if f[0] == "MP204"] == []


def test_exp_of_a_value_clipped_above_11_still_overflows():
    # np.log(1e6) = 13.8: exp reaches 1e6, inf in float16.
    assert [f for f in found(BOX_DECODE.format(limit="1e6"), 3) if f[0] == "MP204"] == EXP_LINES
