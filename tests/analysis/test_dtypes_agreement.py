"""Dtype facts that disagreed with TensorFlow's traced dtypes (benchmarks/dtype_agreement), one class a test.

Each test is a realistic script or library shape; the expected dtype is the one TensorFlow gave the
expression under ``mixed_float16`` (the benchmark's traces, both Keras generations where they differ).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for

F16, F32, INT, PY, UNK = Dtype.FLOAT16, Dtype.FLOAT32, Dtype.INT, Dtype.PYTHON, Dtype.UNKNOWN


def dtypes(code: str, keras: int = 3) -> dict[str, Dtype]:
    """Source text -> dtype of every analysed call and binary operation of ``code`` (the last one wins)."""
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, keras)
    return {module.code_for_node(n): facts.dtype_of(n) for n in walk(module)
            if isinstance(n, (cst.Call, cst.BinaryOperation)) and facts.place(n) is not None}


FUNCTIONAL_SCRIPT = """
import tensorflow as tf

keras = tf.keras
keras.mixed_precision.set_global_policy("mixed_float16")


class MaskedPool(keras.layers.Layer):
    def call(self, inputs):
        x, mask = inputs
        return tf.reduce_sum(x * tf.cast(mask, x.dtype)[..., None], axis=1)


tokens = keras.Input((6, 4))
mask = keras.Input((6,), dtype="bool")
ids = keras.layers.Input(shape=(6,), dtype="int32")
hidden = keras.layers.Dense(4)(tokens)
pooled = MaskedPool()([hidden, mask])
scaled = keras.layers.Rescaling(0.5)(tokens)
outputs = keras.layers.Dense(1, dtype="float32")(pooled)
model = keras.Model([tokens, mask], outputs)
loss_fn = keras.losses.MeanSquaredError()
optimizer = keras.optimizers.SGD(0.01)


@tf.function
def train_step(x, m, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model([x, m], training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def evaluate(x, m):
    return model([x, m])


for step in range(3):
    loss = train_step(tf.ones((2, 6, 4)), tf.ones((2, 6), tf.bool), tf.ones((2, 1)))
    print(evaluate(tf.ones((2, 6, 4)), tf.ones((2, 6), tf.bool)))
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_keras_inputs_are_float32_unless_given_a_dtype(keras):
    """``keras.Input(shape)`` is a float32 placeholder (``floatx()``) under every mixed policy."""
    found = dtypes(FUNCTIONAL_SCRIPT, keras)
    assert found["keras.Input((6, 4))"] is F32
    assert found['keras.Input((6,), dtype="bool")'] is Dtype.BOOL
    assert found['keras.layers.Input(shape=(6,), dtype="int32")'] is INT


@pytest.mark.parametrize("keras", [2, 3])
def test_functional_layer_calls_at_module_level_are_in_the_compute_dtype(keras):
    """``Dense(4)(tokens)`` builds a float16 output under mixed_float16 (a float32-dtype layer: float32)."""
    found = dtypes(FUNCTIONAL_SCRIPT, keras)
    assert found["keras.layers.Dense(4)(tokens)"] is F16
    assert found["MaskedPool()([hidden, mask])"] is F16
    assert found['keras.layers.Dense(1, dtype="float32")(pooled)'] is F32
    # A preprocessing layer does not autocast: it keeps its input's dtype, which a bare name does not say.
    assert found["keras.layers.Rescaling(0.5)(tokens)"] is not F16


def test_a_module_level_call_of_a_train_step_has_its_return_dtype():
    """``loss = train_step(...)`` at top level: the step returns a Keras 3 loss object's float32 result."""
    found = dtypes(FUNCTIONAL_SCRIPT, 3)
    assert found["train_step(tf.ones((2, 6, 4)), tf.ones((2, 6), tf.bool), tf.ones((2, 1)))"] is F32
    # A function whose result follows its arguments says nothing at top level.
    assert found["evaluate(tf.ones((2, 6, 4)), tf.ones((2, 6), tf.bool))"] is not F16


MOVING_AVERAGE_LAYER = """
import tensorflow as tf
from tf_keras.src.utils import control_flow_util


class Norm(tf.keras.layers.Layer):
    def __init__(self, momentum=0.99, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum

    @property
    def _param_dtype(self):
        if self.dtype == tf.float16 or self.dtype == tf.bfloat16:
            return tf.float32
        return self.dtype or tf.float32

    def build(self, input_shape):
        self.gamma = self.add_weight(name="gamma", shape=input_shape[-1:], dtype=self._param_dtype,
                                     experimental_autocast=False)
        self.moving_mean = self.add_weight(name="moving_mean", shape=input_shape[-1:], dtype=self._param_dtype,
                                           trainable=False, experimental_autocast=False)

    def _assign_moving_average(self, variable, value, momentum):
        def calculate_update_delta():
            decay = tf.convert_to_tensor(1.0 - momentum, name="decay")
            if decay.dtype != variable.dtype.base_dtype:
                decay = tf.cast(decay, variable.dtype.base_dtype)
            update_delta = (variable - tf.cast(value, variable.dtype)) * decay
            return update_delta

        return variable.assign_sub(calculate_update_delta())

    def _assign_new_value(self, variable, value):
        if tf.executing_eagerly():
            return variable.assign(value)
        return tf.compat.v1.assign(variable, value)

    def call(self, inputs, training=None):
        mean = tf.reduce_mean(tf.cast(inputs, self._param_dtype), axis=0)
        scale = tf.reshape(self.gamma, [1, -1])

        def _do_update(var, value):
            return self._assign_moving_average(var, value, self.momentum)

        def mean_update():
            true_branch = lambda: _do_update(self.moving_mean, mean)
            false_branch = lambda: self.moving_mean
            return control_flow_util.smart_cond(training, true_branch, false_branch)

        def reset():
            true_branch = lambda: inputs
            return true_branch()

        self.add_update(mean_update)
        self.add_update(lambda: self._assign_new_value(self.moving_mean, mean))
        return inputs * tf.cast(scale, inputs.dtype)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_variables_without_autocast_are_float32_whatever_spells_their_dtype(keras):
    """``add_weight(dtype=self._param_dtype, experimental_autocast=False)``: the property names float32."""
    found = dtypes(MOVING_AVERAGE_LAYER, keras)
    assert found["tf.reshape(self.gamma, [1, -1])"] is F32


@pytest.mark.parametrize("keras", [2, 3])
def test_moving_average_helpers_compute_in_the_variables_float32(keras):
    """A parameter the helper assigns to is a variable (float32); ``x.dtype.base_dtype`` is x's dtype; a
    closure's return is its own, not the enclosing function's; Python-number-or-float32 callers mean float32."""
    found = dtypes(MOVING_AVERAGE_LAYER, keras)
    assert found['tf.convert_to_tensor(1.0 - momentum, name="decay")'] is F32
    assert found["(variable - tf.cast(value, variable.dtype)) * decay"] is F32
    assert found["calculate_update_delta()"] is F32
    assert found["variable.assign_sub(calculate_update_delta())"] is F32


@pytest.mark.parametrize("keras", [2, 3])
def test_closures_see_self_and_conditionals_return_their_branches(keras):
    """Closures of a method call its methods (``self._assign_moving_average``); ``smart_cond``/``tf.cond``
    return what their branches return; ``tf.compat.v1.assign`` returns the (float32) variable."""
    found = dtypes(MOVING_AVERAGE_LAYER, keras)
    assert found["_do_update(self.moving_mean, mean)"] is F32
    assert found["control_flow_util.smart_cond(training, true_branch, false_branch)"] is F32
    assert found["self._assign_new_value(self.moving_mean, mean)"] is F32
    # A sibling closure's `true_branch` is another name: its input is the layer's float16 input.
    assert found["true_branch()"] is not F32


AUTOCAST_WEIGHTS = """
import tensorflow as tf


class Conv(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(3, input_shape[-1], 4))
        self.bias = self.add_weight(name="bias", shape=(4,), dtype="float32")
        self.steps = self.add_weight(name="steps", shape=(), dtype="int64", trainable=False)
        self.ema = self.add_weight(name="ema", shape=(4,), autocast=False)

    def call(self, inputs):
        bias = tf.reshape(self.bias, [1, 1, -1])
        outputs = tf.nn.conv1d(inputs, self.kernel, 1, "SAME") + bias
        return outputs + tf.reshape(self.ema, [1, 1, -1]) * 0.0


class Head(tf.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(dtype="float32", **kwargs)

    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(input_shape[-1], 1))

    def call(self, inputs):
        return tf.matmul(inputs, tf.reshape(self.w, [-1, 1]))


@tf.function
def l2(layer):
    return tf.reduce_sum(tf.square(layer.kernel))
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_layers_weights_read_in_its_call_are_in_the_compute_dtype(keras):
    """tf_keras AutoCastVariables and Keras 3's autocast scope: a floating ``add_weight`` read in ``call`` is
    float16 (float32 in a float32 layer; ``autocast=False`` keeps float32)."""
    found = dtypes(AUTOCAST_WEIGHTS, keras)
    assert found["tf.reshape(self.bias, [1, 1, -1])"] is F16
    assert found["tf.reshape(self.ema, [1, 1, -1])"] is F32
    assert found["tf.reshape(self.w, [-1, 1])"] is F32



KERAS3_LOSS_BASE = """
from keras.src import backend, dtype_policies, ops, tree


class Loss:
    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        self.name = name
        self.reduction = reduction
        self._dtype_policy = dtype_policies.get(dtype or backend.floatx())
        self._dtype = self._dtype_policy.compute_dtype

    @property
    def dtype(self):
        return self._dtype

    def __call__(self, y_true, y_pred, sample_weight=None):
        y_pred = tree.map_structure(lambda x: ops.convert_to_tensor(x, dtype=self.dtype), y_pred)
        y_true = tree.map_structure(lambda x: ops.convert_to_tensor(x, dtype=self.dtype), y_true)
        losses = self.call(y_true, y_pred)
        return reduce_weighted_values(losses, sample_weight=sample_weight, reduction=self.reduction,
                                      dtype=self.dtype)

    def call(self, y_true, y_pred):
        raise NotImplementedError


def reduce_weighted_values(values, sample_weight=None, reduction="sum_over_batch_size", dtype=None):
    values = ops.convert_to_tensor(values, dtype=dtype)
    return ops.sum(values)
"""


def test_a_keras3_loss_dtype_is_its_policys_compute_dtype_floatx():
    """``Loss.dtype`` is ``dtype_policies.get(dtype or floatx()).compute_dtype``: float32 under every mixed
    policy, so ``Loss.__call__`` converts y_true/y_pred to float32 and its helpers get ``dtype=self.dtype``."""
    found = dtypes(KERAS3_LOSS_BASE, 3)
    assert found["ops.convert_to_tensor(x, dtype=self.dtype)"] is F32
    assert found["tree.map_structure(lambda x: ops.convert_to_tensor(x, dtype=self.dtype), y_pred)"] is F32
    assert found["self.call(y_true, y_pred)"] is F32
    assert found["ops.convert_to_tensor(values, dtype=dtype)"] is F32


def test_a_policy_built_from_a_mixed_name_computes_in_float16():
    code = """
        from keras.src import dtype_policies, ops

        class ScaledLoss:
            def __init__(self):
                self._policy = dtype_policies.get("mixed_float16")

            def __call__(self, x):
                return ops.cast(x, self._policy.compute_dtype) * ops.cast(x, self._policy.variable_dtype)
    """
    found = dtypes(code, 3)
    assert found["ops.cast(x, self._policy.compute_dtype)"] is F16
    assert found["ops.cast(x, self._policy.variable_dtype)"] is F32


def test_c39_an_autocast_variable_handed_to_a_helper_of_call_is_not_float32():
    """tfm gaussian_process.py:369,374: a weight passed from ``call`` to a helper that assigns it reads in the
    compute dtype there (AutoCastVariable); assigning to it does not make the read float32."""
    code = """
        import tensorflow as tf

        class Cov(tf.keras.layers.Layer):
            def build(self, s):
                self.precision_matrix = self.add_weight(shape=(s[-1], s[-1]), dtype=self.dtype, trainable=False)

            def update(self, gp_feature, precision_matrix):
                new = 0.9 * precision_matrix + tf.matmul(gp_feature, gp_feature, transpose_a=True)
                return precision_matrix.assign(new)

            def call(self, inputs):
                self.add_update(self.update(inputs, precision_matrix=self.precision_matrix))
                return inputs
    """
    for keras in (2, 3):
        found = dtypes(code, keras)
        assert found["0.9 * precision_matrix"] is not F32
        assert found["precision_matrix.assign(new)"] is F32


def test_c40_a_random_generators_draws_follow_their_dtype_argument():
    """tf_keras image_preprocessing.py:626: ``self._random_generator.random_uniform(..., dtype=tf.float32)``."""
    code = """
        import tensorflow as tf

        class Translate(tf.keras.layers.Layer):
            def call(self, inputs, training=True):
                def translated(inputs):
                    img_hd = tf.cast(tf.shape(inputs)[1], tf.float32)
                    shift = self._random_generator.random_uniform(shape=[2, 1], minval=-1.0, maxval=1.0,
                                                                 dtype=tf.float32)
                    noise = self._random_generator.random_normal(shape=[2, 1])
                    return shift * img_hd + noise
                return translated(inputs)
    """
    found = dtypes(code, 2)
    assert found["shift * img_hd"] is F32
    assert found["self._random_generator.random_normal(shape=[2, 1])"] is F32


def test_keras3_batch_norm_upcasts_through_result_type():
    """(A guard: this already held before the dtype-spelling rule for ``result_type``.)
    keras/src/layers/normalization/batch_normalization.py: ``compute_dtype = backend.result_type(inputs.dtype,
    "float32")`` is float32, so ``inputs = ops.cast(inputs, compute_dtype)`` and its statistics are float32."""
    code = """
        from keras.src import backend, ops
        from keras.src.layers.layer import Layer

        class BatchNorm(Layer):
            def call(self, inputs):
                compute_dtype = backend.result_type(inputs.dtype, "float32")
                inputs = ops.cast(inputs, compute_dtype)
                return ops.mean(inputs, axis=0)
    """
    found = dtypes(code, 3)
    assert found["ops.cast(inputs, compute_dtype)"] is F32
    assert found["ops.mean(inputs, axis=0)"] is F32


def test_tf_keras_backend_functions_are_ops_of_the_table():
    """tf_keras layers call ``backend.relu``/``backend.softmax``/``backend.mean`` (tf_keras.backend resolves as
    keras.src.backend): they follow their input; the backend's dtype utilities are not ops."""
    code = """
        import tensorflow as tf
        from tf_keras.src import backend

        class Pool(tf.keras.layers.Layer):
            def call(self, inputs):
                pooled = backend.mean(backend.relu(inputs), axis=[1, 2])
                return backend.softmax(pooled) + backend.epsilon()
    """
    found = dtypes(code, 2)
    assert found["backend.relu(inputs)"] is F16
    assert found["backend.mean(backend.relu(inputs), axis=[1, 2])"] is F16
    assert found["backend.softmax(pooled)"] is F16


def test_a_method_returning_a_shape_does_not_follow_its_tensor_argument():
    """tf_keras dropout.py:117: ``self._get_noise_shape(inputs)`` returns an int shape (or None), not ``inputs``'
    dtype; a hook without a body here (``_merge_function``) still follows its inputs."""
    code = """
        import tensorflow as tf

        class Drop(tf.keras.layers.Layer):
            def _get_noise_shape(self, inputs):
                if self.noise_shape is None:
                    return None
                concrete_inputs_shape = tf.shape(inputs)
                noise_shape = []
                for i, value in enumerate(self.noise_shape):
                    noise_shape.append(concrete_inputs_shape[i] if value is None else value)
                return tf.convert_to_tensor(noise_shape)

            def _merge_function(self, inputs):
                raise NotImplementedError

            def call(self, inputs):
                noise_shape = self._get_noise_shape(inputs)
                return self._merge_function(inputs)
    """
    found = dtypes(code, 2)
    assert found["self._get_noise_shape(inputs)"] is not F16
    assert found["self._merge_function(inputs)"] is F16


def test_a_helper_no_caller_hands_float16_is_not_float16():
    """keras/src/losses/loss.py: ``reduce_values(values, ...)`` is called only with values of unknown dtype: its
    parameter is unknown, not float16 (float16 code calling a helper is what makes its parameters float16)."""
    code = """
        import tensorflow as tf

        def reduce_values(values):
            return tf.reduce_sum(values) / tf.cast(tf.size(values), values.dtype)

        class Head(tf.keras.layers.Layer):
            def call(self, inputs):
                return reduce_values(self.helper_output) + reduce_values(tf.cast(inputs, tf.float32))
    """
    found = dtypes(code, 3)
    assert found["tf.reduce_sum(values)"] is not F16


def test_ops_given_their_tensors_by_keyword_and_convolutions_follow_the_input():
    """tf_keras dense.py:241 ``tf.matmul(a=inputs, b=self.kernel)``; depthwise_conv2d.py:162 and
    zero_padding2d.py:149 (``backend.depthwise_conv2d``/``backend.spatial_2d_padding`` of the input)."""
    code = """
        import tensorflow as tf
        from tf_keras.src import backend

        class Dense(tf.keras.layers.Layer):
            def build(self, input_shape):
                self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], 4))

            def call(self, inputs):
                padded = backend.spatial_2d_padding(inputs, padding=((1, 1), (1, 1)))
                conv = backend.depthwise_conv2d(padded, self.kernel, strides=(1, 1))
                return tf.matmul(a=conv, b=self.kernel)
    """
    found = dtypes(code, 2)
    assert found["tf.matmul(a=conv, b=self.kernel)"] is F16
    assert found["backend.depthwise_conv2d(padded, self.kernel, strides=(1, 1))"] is F16
    assert found["backend.spatial_2d_padding(inputs, padding=((1, 1), (1, 1)))"] is F16


def test_keras3_loss_functions_keep_their_float32_inputs_through_rank_matching():
    """keras/src/losses/losses.py:1785-1788: ``y_pred = ops.convert_to_tensor(y_pred)`` …
    ``y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)``: every value follows the (float32 on
    Keras 3) parameter, and the helper returns its arguments reshaped in order."""
    code = """
        from keras.src import ops
        from keras.src.losses.loss import squeeze_or_expand_to_same_rank

        def mean_squared_error(y_true, y_pred):
            y_pred = ops.convert_to_tensor(y_pred)
            y_true = ops.convert_to_tensor(y_true, dtype=y_pred.dtype)
            y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
            return ops.mean(ops.square(y_true - y_pred), axis=-1)
    """
    found = dtypes(code, 3)
    assert found["ops.convert_to_tensor(y_pred)"] is F32
    assert found["ops.mean(ops.square(y_true - y_pred), axis=-1)"] is F32


def test_merge_attention_and_embedding_layers():
    """Keras 3 multiply.py:51 (``for x in inputs[1:]``: elements of the autocast inputs),
    multi_head_attention.py:556 (``ops.dot_product_attention(query=, key=, value=)``), relu.py:68
    (``keras.activations.relu``), tfm on_device_embedding.py:95 (ids used as gather indices are int)."""
    code = """
        import tensorflow as tf
        from keras.src import activations, ops
        from keras.src.layers.layer import Layer

        class Multiply(Layer):
            def call(self, inputs):
                output = inputs[0]
                for x in inputs[1:]:
                    output = ops.multiply(output, x)
                return activations.relu(output)

        class Attention(Layer):
            def call(self, query, key, value):
                return ops.dot_product_attention(query=query, key=key, value=value, bias=None)

        class Embedding(Layer):
            def call(self, inputs):
                flat_inputs = tf.reshape(inputs, [-1])
                return tf.gather(self.embeddings, flat_inputs)
    """
    found = dtypes(code, 3)
    assert found["ops.multiply(output, x)"] is F16
    assert found["activations.relu(output)"] is F16
    assert found["ops.dot_product_attention(query=query, key=key, value=value, bias=None)"] is F16
    assert found["tf.reshape(inputs, [-1])"] is INT


def test_a_helper_returning_its_parameters_returns_what_each_call_passes():
    """keras/src/losses/loss.py:79: ``values, sample_weight = squeeze_or_expand_to_same_rank(values, sample_weight)``
    (a same-file helper returning ``x1, x2``) keeps this call's float32 values, not the float16 that other callers
    make its parameters."""
    code = """
        import tensorflow as tf

        def same_rank(x1, x2):
            if len(x1.shape) == len(x2.shape) + 1:
                x2 = tf.expand_dims(x2, axis=-1)
            return x1, x2

        class Head(tf.keras.layers.Layer):
            def call(self, inputs):
                a, b = same_rank(inputs, inputs)
                return a * b

        @tf.function
        def weighted(values, weights):
            values = tf.cast(values, tf.float32)
            weights = tf.cast(weights, tf.float32)
            values, weights = same_rank(values, weights)
            return tf.reduce_sum(values * weights)
    """
    found = dtypes(code, 3)
    assert found["values * weights"] is F32
    assert found["a * b"] is F16


def test_elements_of_a_calls_result_are_not_taken_for_the_structures_dtype():
    """mp2's 19:01 class (tfexamples/dle EfficientDet train_lib.py, MP203 'l2_loss of v'): ``for v in
    self._freeze_vars()`` iterates what the method returns (variables), not a float16 structure."""
    code = """
        import tensorflow as tf

        class Det(tf.keras.Model):
            def _freeze_vars(self):
                return [v for v in self.trainable_variables if "head" in v.name]

            def call(self, inputs):
                for v in self._freeze_vars():
                    self.add_loss(tf.nn.l2_loss(v))
                for part in inputs[1:]:
                    inputs[0] = inputs[0] * part
                return inputs[0]
    """
    found = dtypes(code, 3)
    assert found["tf.nn.l2_loss(v)"] is not F16
    assert found["inputs[0] * part"] is F16


def test_a_random_generators_dropout_keeps_its_input_dtype_and_a_dropout_layer_is_still_a_layer():
    """tf_keras dropout.py:120: ``smart_cond(training, dropped_inputs, lambda: tf.identity(inputs))`` where
    ``dropped_inputs`` returns ``self._random_generator.dropout(inputs, ...)``; ``self.dropout(x)`` built with
    ``dtype="float32"`` still outputs float32."""
    code = """
        import tensorflow as tf
        from tf_keras.src.utils import control_flow_util

        class Drop(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.dropout = tf.keras.layers.Dropout(0.1, dtype="float32")

            def call(self, inputs, training=None):
                def dropped_inputs():
                    return self._random_generator.dropout(inputs, 0.5)

                out = control_flow_util.smart_cond(training, dropped_inputs, lambda: tf.identity(inputs))
                return out, self.dropout(inputs)
    """
    found = dtypes(code, 2)
    assert found["control_flow_util.smart_cond(training, dropped_inputs, lambda: tf.identity(inputs))"] is F16
    assert found["self.dropout(inputs)"] is F32


# C35 (research delf delg_model.py:127-138): `tf.Variable(...)` made directly on a layer/model is a plain
# float32 variable in both generations (only add_weight gives an AutoCastVariable; TF 2.21 traced float32 in
# tf_keras and Keras 3), so it stays float32 inside `call`; a keras.Variable (Keras 3, autocast) is not one.
DIRECT_VARIABLES = """
import tensorflow as tf


class Head(tf.keras.Model):
    def __init__(self, dim, n):
        super().__init__()
        self.dense = tf.keras.layers.Dense(dim)
        self.cosine_weights = tf.Variable(tf.initializers.GlorotUniform()(shape=[dim, n]))
        self.bias = tf.Variable(tf.zeros([n]), name="bias")
        self.steps = tf.Variable(0, trainable=False)
        self.scale = tf.Variable(initial_value=tf.keras.initializers.Ones()([n], dtype=tf.float16))

    def call(self, x):
        h = self.dense(x)
        logits = tf.matmul(h, tf.math.l2_normalize(self.cosine_weights, 0))
        shifted = self.bias + 1.0
        counted = self.steps + 1
        scaled = self.scale * 2.0
        return logits
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_tf_variable_made_directly_on_a_layer_is_float32_in_call(keras):
    found = dtypes(DIRECT_VARIABLES, keras)
    assert found["tf.math.l2_normalize(self.cosine_weights, 0)"] is F32
    assert found["self.bias + 1.0"] is F32
    assert found["self.steps + 1"] is INT
    assert found["self.scale * 2.0"] is F16
    assert found["self.dense(x)"] is F16


# tfm gaussian_process.py:180-192 (found while checking C35 for false positives): a sublayer built with
# `dtype=self.dtype` gets the outer layer's *variable* dtype (Layer.dtype is the policy's variable_dtype in both
# generations), float32 under a mixed policy: TF 2.21 gives Dense(dtype=self.dtype) a float32 output, and the
# `tf.Variable(..., dtype=self.dtype)` bias added to it is float32 too (no mix).
VARIABLE_DTYPE_SUBLAYER = """
import tensorflow as tf


class GaussianProcess(tf.keras.layers.Layer):
    def build(self, input_shape):
        self._features = tf.keras.layers.Dense(8)
        self._output_layer = tf.keras.layers.Dense(3, use_bias=False, dtype=self.dtype)
        self._output_bias = tf.Variable(initial_value=[0.0] * 3, dtype=self.dtype, name="bias")

    def call(self, inputs):
        features = self._features(inputs)
        logits = self._output_layer(features) + self._output_bias
        return logits
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_sublayer_built_with_self_dtype_is_a_float32_layer(keras):
    found = dtypes(VARIABLE_DTYPE_SUBLAYER, keras)
    assert found["self._features(inputs)"] is F16
    assert found["self._output_layer(features)"] is F32
    assert found["self._output_layer(features) + self._output_bias"] is F32


# C36, C37 (research detr_lib.py PrePostProcessingWrapper / TwoDimensionalPositionEmbedding): a layer of this file
# whose `call` returns float32 by construction outputs float32 under a policy too (Keras casts inputs, never
# outputs; TF 2.21, both generations): a dtype="float32" sublayer's output, sin/cos of tf.cast(..., tf.float32).
FLOAT32_LAYERS = """
import math

import tensorflow as tf


class Wrapper(tf.keras.layers.Layer):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.norm = tf.keras.layers.LayerNormalization(epsilon=1e-6, dtype="float32")

    def call(self, x):
        return self.norm(x + self.layer(x))


class PositionEmbedding(tf.keras.layers.Layer):
    def call(self, inputs):
        position = tf.cast(tf.range(tf.shape(inputs)[1]), tf.float32)
        inv_timescales = tf.exp(tf.cast(tf.range(8), tf.float32) * -math.log(1e4) / 8)
        scaled = tf.expand_dims(position, 1) * tf.expand_dims(inv_timescales, 0)
        return tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)


class Projection(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(16)

    def call(self, x):
        return self.dense(x)


class Encoder(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.block = Wrapper(tf.keras.layers.Dense(16))
        self.position = PositionEmbedding()
        self.projection = Projection()

    def call(self, inputs):
        encoding = self.position(inputs)
        normed = self.block(inputs)
        projected = self.projection(inputs)
        return normed + encoding
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_layer_returning_float32_by_construction_outputs_float32(keras):
    found = dtypes(FLOAT32_LAYERS, keras)
    assert found["self.position(inputs)"] is F32
    assert found["self.block(inputs)"] is F32
    assert found["normed + encoding"] is F32
    assert found["self.projection(inputs)"] is F16  # returns a policy sublayer's output: the compute dtype


# tf_keras losses.py:1704-1706 (agreement: static float16, traced float32): a Keras loss function
# `fn(y_true, y_pred)` gets what its callers pass: compile hands it the model's predictions as they are
# (tf_keras casts y_true to them), float32 behind a float32 head (samples/k2_half_done_scaling.py), float16
# without one. Nobody in this file calls it: its dtype is its callers' (unknown); the conditional fact
# "float16 if the predictions are" is asked for with `predictions=F16`.
TF_KERAS_LOSS_FUNCTION = """
import tensorflow as tf
from tf_keras.src import backend


def mean_squared_error(y_true, y_pred):
    y_pred = tf.convert_to_tensor(y_pred)
    y_true = tf.cast(y_true, y_pred.dtype)
    return backend.mean(tf.math.squared_difference(y_pred, y_true), axis=-1)
"""


def conditional_dtypes(code: str, keras: int, predictions: Dtype) -> dict[str, Dtype]:
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, keras)
    return {module.code_for_node(n): facts.dtype_of(n, predictions=predictions) for n in walk(module)
            if isinstance(n, (cst.Call, cst.BinaryOperation)) and facts.place(n) is not None}


def test_a_tf_keras_loss_functions_inputs_are_what_its_callers_pass():
    squared = "tf.math.squared_difference(y_pred, y_true)"
    found = dtypes(TF_KERAS_LOSS_FUNCTION, 2)
    assert found["tf.convert_to_tensor(y_pred)"] is UNK
    assert found["tf.cast(y_true, y_pred.dtype)"] is UNK
    assert found[squared] is UNK
    # The conditional fact: float16 when the model's predictions are float16 (no float32 head).
    assert conditional_dtypes(TF_KERAS_LOSS_FUNCTION, 2, F16)[squared] is F16
    assert conditional_dtypes(TF_KERAS_LOSS_FUNCTION, 2, F32)[squared] is F32
    # A caller of this file passing the model's float16 predictions decides it (a custom loop).
    called = TF_KERAS_LOSS_FUNCTION + """

@tf.function
def train_step(model, x, y):
    return mean_squared_error(y, model(x, training=True))
"""
    assert dtypes(called, 2)[squared] is F16
    # Keras 3 converts a compiled loss's inputs to float32 (C24): unchanged.
    assert dtypes(TF_KERAS_LOSS_FUNCTION, 3)[squared] is F32


# Keras 3 keras/src/losses/loss.py:56,134: `Loss.__call__(self, y_true, y_pred, sample_weight=None)`:
# a loss's options after y_true/y_pred are its callers' (here None: no tensor), not float16; through
# reduce_weighted_values -> apply_mask -> squeeze_or_expand_to_same_rank(float_mask, sample_weight) the
# float16 guess made `x1 = ops.expand_dims(x1, axis=-1)` float16 where TensorFlow traced float32.
KERAS3_LOSS_PLUMBING = """
from keras.src import backend, dtype_policies, ops


class Loss:
    def __init__(self, name=None, dtype=None):
        self._dtype_policy = dtype_policies.get(dtype or backend.floatx())
        self._dtype = self._dtype_policy.compute_dtype

    @property
    def dtype(self):
        return self._dtype

    def __call__(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.convert_to_tensor(y_pred, dtype=self.dtype)
        y_true = ops.convert_to_tensor(y_true, dtype=self.dtype)
        losses = self.call(y_true, y_pred)
        return reduce_weighted_values(losses, sample_weight=sample_weight, dtype=self.dtype)

    def call(self, y_true, y_pred):
        raise NotImplementedError


def squeeze_or_expand_to_same_rank(x1, x2):
    if len(x1.shape) == len(x2.shape) - 1:
        x1 = ops.expand_dims(x1, axis=-1)
    return x1, x2


def reduce_weighted_values(values, sample_weight=None, mask=None, dtype=None):
    values = ops.convert_to_tensor(values, dtype=dtype)
    if sample_weight is not None:
        sample_weight = ops.convert_to_tensor(sample_weight, dtype=dtype)
    sample_weight = apply_mask(sample_weight, mask, dtype=values.dtype)
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, values.dtype)
        values, sample_weight = squeeze_or_expand_to_same_rank(values, sample_weight)
        values = values * sample_weight
    return ops.sum(values)


def apply_mask(sample_weight, mask, dtype):
    if mask is not None:
        float_mask = ops.cast(mask, dtype=dtype)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, dtype=dtype)
            float_mask, sample_weight = squeeze_or_expand_to_same_rank(float_mask, sample_weight)
            sample_weight *= float_mask
        else:
            sample_weight = float_mask
    return sample_weight
"""


def test_a_keras3_losss_options_are_its_callers_not_float16():
    found = dtypes(KERAS3_LOSS_PLUMBING, 3)
    assert found["ops.expand_dims(x1, axis=-1)"] is F32  # what TensorFlow traced
    assert found["ops.cast(sample_weight, dtype=dtype)"] is F32


# tf_keras batch_normalization.py:606-612,782-797: a name assigned float16 and float32 is unknown in the name
# table; read where it is used, it holds the last assignment that surely ran before (an `if` testing a dtype
# against dtype spellings is decided under the policy), or one of those after it that may have.
FLOW_SENSITIVE_BN = """
import tensorflow as tf


class Norm(tf.keras.layers.Layer):
    def call(self, inputs, training=None):
        inputs = tf.cast(inputs, self.compute_dtype)
        early = tf.nn.relu(inputs)
        inputs_dtype = inputs.dtype.base_dtype
        if inputs_dtype in (tf.float16, tf.bfloat16):
            inputs = tf.cast(inputs, tf.float32)
        mean = tf.reduce_mean(inputs, axis=0)
        outputs = tf.nn.batch_normalization(inputs, mean, mean, None, None, 1e-3)
        if inputs_dtype in (tf.float16, tf.bfloat16):
            outputs = tf.cast(outputs, inputs_dtype)
        if training:
            inputs = tf.cast(inputs, self.compute_dtype)
        late = tf.nn.relu(inputs)
        for _ in range(2):
            looped = tf.nn.relu(inputs)
            inputs = tf.cast(inputs, tf.float32)
        return outputs
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_name_cast_to_float32_under_a_dtype_test_is_read_where_it_is_used(keras):
    found = dtypes(FLOW_SENSITIVE_BN, keras)
    assert found["tf.nn.relu(inputs)"] is UNK  # the last one: inside a loop a later assignment reaches it too
    assert found["tf.reduce_mean(inputs, axis=0)"] is F32
    assert found["tf.nn.batch_normalization(inputs, mean, mean, None, None, 1e-3)"] is F32
    assert found["tf.cast(outputs, inputs_dtype)"] is F16
    module = cst.parse_module(textwrap.dedent(FLOW_SENSITIVE_BN).lstrip("\n"))
    facts = facts_for(module, keras)
    relus = [n for n in walk(module) if isinstance(n, cst.Call) and module.code_for_node(n) == "tf.nn.relu(inputs)"]
    assert [facts.dtype_of(n) for n in relus] == [F16, UNK, UNK]  # before the cast; after a branch; in a loop


# tf_keras layer_normalization.py:280-317: an assignment in one branch of an `if` never reaches a use in the
# other; `input_dtype in (...) and self.dtype == "float32"` is decided (a layer's dtype is its float32 variable dtype).
FLOW_SENSITIVE_LN = """
import tensorflow as tf


class LayerNorm(tf.keras.layers.Layer):
    def call(self, inputs):
        inputs = tf.cast(inputs, self.compute_dtype)
        if not self._fused:
            input_dtype = inputs.dtype
            if input_dtype in ("float16", "bfloat16") and self.dtype == "float32":
                inputs = tf.cast(inputs, "float32")
            outputs = tf.nn.l2_normalize(inputs, axis=-1)
        else:
            inputs = tf.reshape(inputs, [1, -1, 1, 1])
            outputs = inputs
        return outputs
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_an_assignment_in_one_branch_does_not_reach_the_other(keras):
    found = dtypes(FLOW_SENSITIVE_LN, keras)
    assert found["tf.nn.l2_normalize(inputs, axis=-1)"] is F32
    assert found["tf.reshape(inputs, [1, -1, 1, 1])"] is F16


# tfm transformer_encoder_block.py:540-564: a name unpacked from a layer's output and reassigned float16 and float32
# (a dtype="float32" norm) is read where used: the dropout output, not the other branch's norm.
FLOW_SENSITIVE_UNPACKED = """
import tensorflow as tf


class Block(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self._attention_layer = tf.keras.layers.MultiHeadAttention(2, 4)
        self._attention_dropout = tf.keras.layers.Dropout(0.1)
        self._attention_layer_norm = tf.keras.layers.LayerNormalization(dtype=tf.float32)

    def call(self, target_tensor):
        attention_output, scores = self._attention_layer(target_tensor, target_tensor, return_attention_scores=True)
        attention_output = self._attention_dropout(attention_output)
        if self._norm_first:
            attention_output = self._attention_layer_norm(attention_output)
        else:
            attention_output = target_tensor + attention_output
        return attention_output
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_name_unpacked_then_reassigned_is_read_where_it_is_used(keras):
    assert dtypes(FLOW_SENSITIVE_UNPACKED, keras)["target_tensor + attention_output"] is F16


# tf_keras batch_normalization.py:516-541,865-881: `self.renorm_mean = _renorm_variable(...)`, a function nested in
# build returning `var = self.add_weight(..., dtype=self._param_dtype, experimental_autocast=False)`, is the float32
# variable that add_weight makes; every caller then hands `_assign_moving_average` a float32 variable.
BUILDER_VARIABLES = """
import tensorflow as tf


class Norm(tf.keras.layers.Layer):
    @property
    def _param_dtype(self):
        return tf.float32

    def build(self, input_shape):
        self.moving_mean = self.add_weight(name="moving_mean", shape=(4,), dtype=self._param_dtype,
                                           trainable=False, experimental_autocast=False)
        if self.renorm:
            def _renorm_variable(name, shape):
                var = self.add_weight(name=name, shape=shape, dtype=self._param_dtype, trainable=False,
                                      experimental_autocast=False)
                return var

            self.renorm_mean = _renorm_variable("renorm_mean", (4,))

    def _assign_moving_average(self, variable, value, momentum):
        def calculate_update_delta():
            decay = tf.convert_to_tensor(1.0 - momentum, name="decay")
            return (variable - tf.cast(value, variable.dtype)) * decay

        return variable.assign_sub(calculate_update_delta())

    def call(self, inputs):
        mean = tf.reduce_mean(tf.cast(inputs, tf.float32), axis=0)
        self._assign_moving_average(self.moving_mean, mean, 0.99)
        self._assign_moving_average(self.renorm_mean, mean, 0.99)
        return inputs
"""


def test_a_variable_a_nested_builder_makes_is_that_variable():
    found = dtypes(BUILDER_VARIABLES, 2)
    assert found["(variable - tf.cast(value, variable.dtype)) * decay"] is F32
    assert found["calculate_update_delta()"] is F32


# tfdocs actor_critic.ipynb (a stress-mode MP203 the first flow-sensitive reads made): `returns = returns.stack()[::-1]`,
# a method of a local object no table knows (a float32 TensorArray), is a guess; read where used the name stays
# unknown rather than the guess's float16.
TENSOR_ARRAY_RETURNS = """
import tensorflow as tf


@tf.function
def expected_return(rewards, gamma):
    n = tf.shape(rewards)[0]
    returns = tf.TensorArray(dtype=tf.float32, size=n)
    rewards = tf.cast(rewards, dtype=tf.float32)
    discounted = tf.constant(0.0)
    for i in tf.range(n):
        discounted = rewards[i] + gamma * discounted
        returns = returns.write(i, discounted)
    returns = returns.stack()[::-1]
    return (returns - tf.math.reduce_mean(returns)) / (tf.math.reduce_std(returns) + 1e-7)
"""


def test_a_name_an_unknown_objects_method_assigns_is_not_read_as_float16():
    assert dtypes(TENSOR_ARRAY_RETURNS, 2)["tf.math.reduce_std(returns)"] is not F16
