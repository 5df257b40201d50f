"""Turn 11: classes of static misses and false positives, each reproduced first in a realistic script (failing),
then fixed in the model (both Keras generations where they differ).

1. Op knowledge keyed by namespace (``ops.lookup``): one op name computes differently in Keras 3's ``keras.ops``
   and in tf_keras' ``backend`` (verified with TF 2.21, Keras 3.15.1, tf_keras 2.21, CPU, on 4096 float16 values
   of deviation 10):
   - ``keras.ops.var`` casts float16 to float32, takes the variance and casts back (100.0), while tf_keras'
     ``backend.var`` is ``tf.math.reduce_variance`` in float16 (inf): MP203's "compute it in float32 and cast back"
     is what ``keras.ops.var`` already does (a false positive with a no-op fix);
   - tf_keras' ``backend.mean`` is ``tf.reduce_mean``, which sums in float16 (a mean of squares: inf), while
     ``keras.ops.mean`` sums in float32 (100.0): a miss.
2. A module function a Keras layer hands on with ``functools.partial(f, w=self.w)`` is called with the bound
   values: a plain ``tf.Variable`` of the layer bound there is float32 (not an autocast ``add_weight``).
"""

from __future__ import annotations

import pytest

from mpfix.codemods.facts import ops

from .mp2_lint import BOTH, IMPORTS, found, lint


# -- 1. op knowledge keyed by namespace ----------------------------------------------------------------
def test_the_op_table_tells_namespaces_apart():
    assert ops.lookup("keras.ops.var").has(ops.Kind.VARIANCE) is False  # float32 inside, cast back
    assert ops.lookup("keras.ops.numpy.var").has(ops.Kind.VARIANCE) is False
    assert ops.lookup("keras.backend.var").has(ops.Kind.VARIANCE)  # tf_keras: tf.math.reduce_variance
    assert ops.lookup("keras.src.backend.var").has(ops.Kind.VARIANCE)
    assert ops.lookup("tensorflow.math.reduce_variance").has(ops.Kind.VARIANCE)
    assert ops.lookup("keras.backend.mean").has(ops.Kind.LONG_MEAN)  # tf_keras: tf.reduce_mean
    assert not ops.lookup("keras.ops.mean").has(ops.Kind.LONG_MEAN)  # Keras 3: sums in float32
    assert ops.lookup("tensorflow.reduce_mean").has(ops.Kind.LONG_MEAN)
    assert ops.lookup("keras.ops.std").has(ops.Kind.DEVIATION)  # Keras 3's std is tf.math.reduce_std as it is
    assert ops.known("keras.ops.var") is not None and not ops.known("keras.ops.var").has(ops.Kind.VARIANCE)
    assert ops.namespace("keras.ops.var") is ops.Namespace.KERAS_OPS
    assert ops.namespace("keras.backend.mean") is ops.Namespace.KERAS_BACKEND
    assert ops.namespace("tensorflow.compat.v1.reduce_mean") is ops.Namespace.TENSORFLOW
    assert ops.namespace("numpy.mean") is None


STAT_LAYER = """
    import tensorflow as tf
    {imports}
    {extra}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class ChannelStats(keras.layers.Layer):
        def call(self, x):
            centred = x - {mean}(x, axis=-1, keepdims=True)
            scale = {stat}
            return centred * tf.math.rsqrt(scale + 1e-3)


    model = keras.Sequential([keras.layers.Dense(4096), ChannelStats(), keras.layers.Dense(1, dtype="float32")])
"""


def _stat_layer(keras: int, mean: str, stat: str, extra: str = "") -> str:
    return STAT_LAYER.format(imports=IMPORTS[keras], mean=mean, stat=stat, extra=extra)


def test_keras3_ops_var_already_computes_in_float32():
    code = _stat_layer(3, "keras.ops.mean", "keras.ops.var(x, axis=-1, keepdims=True)")
    assert ("MP203", 11) not in found(code, 3)


def test_keras3_ops_std_computes_in_float16():
    code = _stat_layer(3, "keras.ops.mean", "keras.ops.std(x, axis=-1, keepdims=True)")
    assert ("MP203", 11) in found(code, 3)


def test_tf_keras_backend_var_is_reduce_variance():
    code = _stat_layer(2, "keras.backend.mean", "keras.backend.var(x, axis=-1, keepdims=True)")
    assert ("MP203", 11) in found(code, 2)


def test_tf_keras_backend_mean_of_squares_sums_in_float16():
    code = _stat_layer(2, "keras.backend.mean", "keras.backend.mean(tf.square(centred), axis=-1, keepdims=True)")
    assert ("MP203", 11) in found(code, 2)


def test_keras3_ops_mean_of_squares_sums_in_float32():
    code = _stat_layer(3, "keras.ops.mean", "keras.ops.mean(keras.ops.square(centred), axis=-1, keepdims=True)")
    assert ("MP203", 11) not in found(code, 3)


def test_tf_keras_backend_module_imported_as_k():
    code = _stat_layer(2, "K.mean", "K.mean(tf.square(centred), axis=-1, keepdims=True)",
                       extra="from tf_keras import backend as K")
    assert ("MP203", 11) in found(code, 2)


# -- 2. functools.partial and call sites: a module function a layer runs -------------------------------
COSINE = """
    import functools

    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    def cosine_logits(prelogits, cosine_weights, scale_factor):
        normalized = tf.math.l2_normalize(prelogits, axis=1)
        weights = tf.math.l2_normalize(cosine_weights, axis=0)
        cosine_sim = tf.matmul(normalized, weights)
        return scale_factor * cosine_sim


    class CosineModel(keras.Model):
        def __init__(self, num_classes):
            super().__init__()
            self.backbone = keras.layers.Dense(32, activation="relu")
            self.cosine_weights = {weights}
            self.scale_factor = tf.Variable(16.0, trainable=False)
            self.classifier = functools.partial(
                cosine_logits, cosine_weights=self.cosine_weights, scale_factor=self.scale_factor)

        def call(self, images):
            return {call}


    model = CosineModel(10)
    print(model(tf.ones([2, 8])).dtype)
"""
PLAIN = 'tf.Variable(tf.random.normal([32, num_classes]), name="cosine_weights")'
AUTOCAST = 'self.add_weight(shape=(32, num_classes), name="cosine_weights")'
THROUGH_PARTIAL = "self.classifier(self.backbone(images))"
DIRECT = "cosine_logits(self.backbone(images), self.cosine_weights, self.scale_factor)"


def _cosine(keras: int, weights: str = PLAIN, call: str = THROUGH_PARTIAL) -> str:
    return COSINE.format(imports=IMPORTS[keras], weights=weights, call=call)


@BOTH
@pytest.mark.parametrize("call", [THROUGH_PARTIAL, DIRECT])
def test_a_plain_variable_handed_to_a_function_the_layer_runs_is_float32(call, keras):
    # TF 2.21: "cannot compute MatMul as input #1 was expected to be a half tensor but is a float tensor" (both).
    code = _cosine(keras, call=call)
    assert ("MP206", 12) in found(code, keras)
    assert ("MP202", 11) not in found(code, keras)  # the float32 variable's l2_normalize is no float16 one


@BOTH
def test_an_autocast_weight_handed_on_reads_float16_but_the_plain_scale_does_not(keras):
    # TF 2.21 (Keras 3): "cannot compute Mul as input #1 was expected to be a float tensor but is a half tensor".
    code = _cosine(keras, weights=AUTOCAST)
    assert ("MP206", 12) not in found(code, keras)
    assert ("MP206", 13) in found(code, keras)
    assert ("MP202", 11) in found(code, keras)  # an autocast variable read in call is float16


def test_the_fix_casts_the_float16_side():
    text = lint(_cosine(3), 3).fixed_text
    assert "tf.matmul(tf.cast(normalized, tf.float32), weights)" in text


def test_a_partial_handed_on_elsewhere_is_not_certain():
    # DELG (research N12): the partial is returned to a caller in another file; who runs it, on what, is not here.
    code = _cosine(3).replace("self.classifier = functools.partial(", "classifier = functools.partial(").replace(
        "self.classifier(self.backbone(images))", "self.backbone(images)").replace(
        "    def call(self, images):", "        self.heads = [classifier]\n\n    def call(self, images):")
    assert ("MP206", 12) not in found(code, 3)


def test_a_function_also_called_with_unknown_values_is_not_certain():
    code = _cosine(3, call=DIRECT) + "\n\ndef score(features, w):\n    return cosine_logits(features, w, 1.0)\n"
    assert ("MP206", 12) not in found(code, 3)


def test_a_function_also_handed_on_as_a_callback_is_not_certain():
    code = _cosine(3, call=DIRECT) + "\n\nmapped = tf.map_fn(cosine_logits, tf.ones([2, 3]))\n"
    assert ("MP206", 12) not in found(code, 3)


def test_a_partial_attribute_also_read_without_a_call_is_not_certain():
    code = _cosine(3).replace("return self.classifier(self.backbone(images))",
                              "head = self.classifier\n        return self.classifier(self.backbone(images))")
    assert ("MP206", 12) not in found(code, 3)


@pytest.mark.parametrize("weights", [
    'tf.Variable(np.random.randn(32, num_classes), name="cosine_weights")',  # NumPy: float64
    'tf.Variable(tf.random.normal([32, num_classes], dtype=tf.float64))',
    'tf.Variable(tf.zeros([32, num_classes]), dtype=tf.float64)',
])
def test_a_float64_variable_is_not_certain_float32(weights):
    # measure's probe of 9343ca8: the float32 cast of the float16 side still raised against a float64 variable.
    code = _cosine(3, weights=weights).replace("import functools\n", "import functools\n\nimport numpy as np\n", 1)
    assert ("MP206", 14) not in found(code, 3)  # (the import shifts the matmul to line 14)


def test_a_variable_made_by_an_initializer_is_float32():
    code = _cosine(3, weights='tf.Variable(initial_value=tf.initializers.GlorotUniform()(shape=[32, num_classes]))')
    assert ("MP206", 12) in found(code, 3)


def test_a_recursive_call_site_is_not_evidence():
    code = _cosine(3, call=DIRECT).replace(
        "    return scale_factor * cosine_sim\n",
        "    if prelogits.shape[0] > 64:\n        return cosine_logits(prelogits[:64], cosine_weights, scale_factor)\n"
        "    return scale_factor * cosine_sim\n")
    assert ("MP206", 12) not in found(code, 3)
