"""Turn 12: classes of static misses and false positives, each reproduced first in a realistic script (failing),
then fixed in the model (both Keras generations where they differ; runtime truth from TF 2.21 CPU, Keras 3.15.1
and tf_keras 2.21).

1. "Refuses mixed dtypes" is a fact of an op's namespace (``ops.MIXING``), not a ``tensorflow.`` prefix in the
   analyses: TensorFlow raises on a float16 and a float32 operand, keras.ops (and Keras 3's backend packages)
   promote, and tf_keras' ``backend`` functions are TensorFlow ops (``backend.concatenate`` is ``tf.concat``).
2. A running (or whole) product of float16 probabilities underflows to 0 (``ops.Kind.PRODUCT``; MP203 owns unsafe
   reductions): a survival curve ``cumprod(1 - hazard)`` over 120 bins of a float16 sigmoid head is 0 and its log
   -inf (ran, both generations: the loss is inf; wave 7's survival_hazard_k3.py:22).
3. Keras 3's ``fit(x, y)`` casts float arrays and tensors to floatx (float32 under mixed_float16; run: y in
   train_step is float32 for float64/float16 NumPy arrays and float16 tensors, float16 from a tf.data pipeline;
   tf_keras casts NumPy arrays only). A ``compute_loss`` that reads its float16 predictions only in keras.ops next to
   those targets (``ops.subtract(y, y_pred)``) computes in float32: MP205's false positive at wave 7's
   checkpoint_resume_k3_ok.py:17 (``codemods/analysis/dtype_targets.py``).
"""

from __future__ import annotations

import pytest

from mpfix.codemods.facts import ops

from .mp2_lint import BOTH, IMPORTS, found, lint


# -- 1. refusing mixed dtypes is a namespace's fact ----------------------------------------------------
def test_the_namespaces_that_refuse_mixed_operands():
    # Run: tf.add/concat/matmul raise InvalidArgumentError; keras.ops.add/concatenate/where and
    # keras.src.backend.numpy.add return float32; tf_keras backend.concatenate/dot/maximum/stack raise.
    assert ops.refuses_mixed("tensorflow.concat")
    assert ops.refuses_mixed("tensorflow.compat.v1.matmul")
    assert ops.refuses_mixed("keras.backend.concatenate")  # tf_keras (tf_keras.backend folds to keras.backend)
    assert not ops.refuses_mixed("keras.ops.concatenate")
    assert not ops.refuses_mixed("keras.ops.numpy.add")
    assert not ops.refuses_mixed("keras.backend.numpy.add")  # Keras 3's backend package (keras.src.backend.numpy)
    assert not ops.refuses_mixed("numpy.concatenate")
    assert ops.namespace("keras.backend.numpy.add") is ops.Namespace.KERAS_OPS


def test_what_rules_asked_of_op_names_is_in_the_table():
    # A reciprocal unscales a gradient (gradient_values.reciprocal_scale); log/log1p are natural logs (softplus
    # written out), expm1 is no exp there; logsumexp bounds x - logsumexp(x); softmax/sigmoid name their stable log.
    assert ops.lookup("tensorflow.math.reciprocal").has(ops.Kind.RECIPROCAL)
    assert ops.lookup("keras.ops.reciprocal").has(ops.Kind.RECIPROCAL)
    assert ops.lookup("tensorflow.math.log1p").has(ops.Kind.NATURAL_LOG)
    assert not ops.lookup("tensorflow.math.log10").has(ops.Kind.NATURAL_LOG)
    assert ops.lookup("tensorflow.math.expm1").has(ops.Kind.EXPM1) and not ops.lookup("keras.ops.exp").has(ops.Kind.EXPM1)
    assert ops.lookup("tensorflow.math.reduce_logsumexp").has(ops.Kind.LOGSUMEXP)
    assert ops.lookup("keras.ops.softmax").stable_log == "log_softmax"
    assert ops.lookup("tensorflow.nn.sigmoid").stable_log == "log_sigmoid"


POSITIONAL = """
    import numpy as np
    import tensorflow as tf
    {imports}
    {extra}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class PositionalConcat(keras.layers.Layer):
        def build(self, input_shape):
            self.pos = tf.Variable(tf.random.normal((1, input_shape[1], 8)), trainable=False)

        def call(self, x):
            pos = tf.tile(self.pos, [tf.shape(x)[0], 1, 1])
            return {concat}([x, pos], axis=-1)


    inputs = keras.Input((16, 4))
    x = PositionalConcat()(keras.layers.Dense(8)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(keras.layers.Flatten()(x)))
    model.compile("adam", "mse")
    model.fit(np.random.rand(32, 16, 4), np.random.rand(32, 1), epochs=1, verbose=0)
"""


def _positional(keras: int, concat: str, extra: str = "") -> str:
    return POSITIONAL.format(imports=IMPORTS[keras], concat=concat, extra=extra)


@pytest.mark.parametrize("concat, extra", [("K.concatenate", "from tf_keras import backend as K"),
                                           ("keras.backend.concatenate", "")])
def test_tf_keras_backend_concatenate_refuses_a_float32_variable(concat, extra):
    # tf_keras 2.21: "cannot compute ConcatV2 as input #1(zero-based) was expected to be a half tensor".
    assert ("MP206", 15) in found(_positional(2, concat, extra), 2)


def test_tensorflow_concat_refuses_it_too():
    assert ("MP206", 15) in found(_positional(3, "tf.concat"), 3)


def test_keras3_ops_concatenate_promotes():
    # Keras 3.15.1: ops.concatenate of float16 and float32 is float32, no error.
    assert ("MP206", 15) not in found(_positional(3, "keras.ops.concatenate"), 3)


def test_tf_keras_concatenate_mix_is_reported_without_a_fix():
    result = lint(_positional(2, "K.concatenate", "from tf_keras import backend as K"), 2)
    assert [f for f in result.findings if f.code == "MP206"]
    assert result.fixed_text is None  # no rewrite: which side to cast is the author's choice


# -- 2. a product of float16 probabilities underflows ---------------------------------------------------
SURVIVAL = """
    import numpy as np
    import tensorflow as tf
    {imports}

    N_BINS = 120
    keras.mixed_precision.set_global_policy("mixed_float16")


    class DiscreteHazard(keras.Model):
        def __init__(self):
            super().__init__()
            self.body = keras.layers.Dense(64, activation="relu")
            self.hazard = keras.layers.Dense(N_BINS, activation={activation}{dtype})

        def call(self, x):
            return self.hazard(self.body(x))

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            at_event = tf.one_hot(tf.cast(y[:, 0], tf.int32), N_BINS, dtype=y_pred.dtype)
            survival = {product}
            surv_t = tf.reduce_sum(survival * at_event, axis=-1)
            return -tf.reduce_mean(tf.math.log(surv_t))


    model = DiscreteHazard()
    model.compile(optimizer="adam")
    model.fit(np.random.rand(512, 12), np.ones((512, 2)) * (N_BINS - 1), batch_size=128, epochs=1)
"""
CUMPROD = "tf.math.cumprod(1.0 - y_pred, axis=-1)"


def _survival(keras: int, product: str = CUMPROD, activation: str = '"sigmoid"', dtype: str = "") -> str:
    return SURVIVAL.format(imports=IMPORTS[keras], product=product, activation=activation, dtype=dtype)


def test_the_op_table_knows_products():
    for op in ("tensorflow.math.cumprod", "tensorflow.math.reduce_prod", "keras.ops.cumprod", "keras.ops.prod"):
        assert ops.lookup(op).has(ops.Kind.PRODUCT), op
    assert not ops.lookup("tensorflow.math.cumsum").has(ops.Kind.PRODUCT)


@BOTH
@pytest.mark.parametrize("product", [CUMPROD, "tf.reduce_prod(1.0 - y_pred, axis=-1, keepdims=True)",
                                     "keras.ops.cumprod(1.0 - y_pred, axis=-1)"])
def test_a_survival_curve_of_a_float16_sigmoid_head_underflows(keras, product):
    # Ran (TF 2.21 CPU, both generations): y_pred and the product are float16, the loss is inf.
    if keras == 2 and product.startswith("keras.ops"):
        pytest.skip("tf_keras has no keras.ops")
    assert ("MP203", 20) in found(_survival(keras, product), keras)


def test_the_wave7_survival_script_is_found_at_its_cumprod():
    from pathlib import Path

    code = (Path(__file__).resolve().parents[2] / "benchmarks/unseen/survival_hazard_k3.py").read_text()
    assert ("MP203", 22) in found(code, 3, policy=None)


def test_the_product_is_reported_without_a_fix():
    products = [f for f in lint(_survival(3), 3, fix=False).findings if f.code == "MP203"]
    assert len(products) == 1 and products[0].fix is None


@BOTH
def test_a_float32_head_gives_float32_probabilities(keras):
    assert ("MP203", 20) not in found(_survival(keras, dtype=', dtype="float32"'), keras)


@pytest.mark.parametrize("product", [
    "tf.math.cumprod(1.0 + y_pred, axis=-1)",  # growth factors, not probabilities: overflow or not, not decided
    "tf.math.cumprod(tf.cast(1.0 - y_pred, tf.float32), axis=-1)",  # computed in float32
    "tf.math.cumprod(y, axis=-1)",  # the targets
])
def test_products_that_are_not_float16_probabilities_are_silent(product):
    assert ("MP203", 20) not in found(_survival(3, product), 3)


def test_a_linear_head_is_no_probability():
    assert ("MP203", 20) not in found(_survival(3, activation='"linear"'), 3)


LAYER_PRODUCT = """
    import tensorflow as tf
    {imports}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class StickBreaking(keras.layers.Layer):
        def call(self, logits):
            v = tf.sigmoid(logits)
            remaining = tf.math.cumprod(1.0 - v, axis=-1, exclusive=True)
            return v * remaining
"""


@BOTH
def test_a_stick_breaking_layer_multiplies_float16_probabilities(keras):
    assert ("MP203", 10) in found(LAYER_PRODUCT.format(imports=IMPORTS[keras]), keras)


# -- 3. Keras 3 fit casts array targets to float32; keras.ops promote the float16 predictions -----------------
REGRESSOR = """
    import numpy as np
    import tensorflow as tf
    import keras
    from keras import ops

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Regressor(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(128, activation="relu")
            self.out = keras.layers.Dense(1)

        def call(self, x):
            return self.out(self.hidden(x))

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            err = {error}
            return ops.mean(ops.square(err))
    {step}

    x = np.random.normal(size=(1024, 6)).astype("float32")
    y = (300.0 * np.tanh(x[:, :1])).astype("float32")
    model = Regressor()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    {fit}
"""
STEP = """
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}
"""
FIT = "model.fit(x, y, batch_size=64, epochs=2)"


def _regressor(error: str = "ops.subtract(y, y_pred)", step: str = "", fit: str = FIT) -> str:
    return REGRESSOR.format(error=error, step=step, fit=fit.replace("\n", "\n    "))


def _head(code: str, keras: int = 3) -> bool:
    return any(c == "MP205" for c, _ in found(code, keras))


@pytest.mark.parametrize("step", ["", STEP])
def test_keras3_fit_on_arrays_and_ops_subtract_compute_the_loss_in_float32(step):
    assert not _head(_regressor(step=step))


def test_the_wave7_checkpoint_script_is_silent():
    from pathlib import Path

    code = (Path(__file__).resolve().parents[2] / "benchmarks/unseen/checkpoint_resume_k3_ok.py").read_text()
    assert ("MP205", 17) not in found(code, 3, policy=None)


@pytest.mark.parametrize("fit", [
    "model.fit(tf.data.Dataset.from_tensor_slices((x, y.astype('float16'))).batch(64), epochs=2)",  # keeps float16
    "model.fit(x, y, epochs=1)\nmodel.train_on_batch(x[:64], y[:64])",  # another way in
    "model.fit(x, y, epochs=1)\nkeras.config.set_floatx('float16')",
    "model.fit(x, epochs=1)",  # no separate targets: x may be a dataset
])
def test_targets_not_certainly_float32_keep_the_finding(fit):
    assert _head(_regressor(fit=fit))


@pytest.mark.parametrize("error", [
    "y - y_pred",  # a TensorFlow operator: no promotion (TypeError), not keras.ops
    "ops.subtract(ops.cast(y, 'float16'), y_pred)",  # the targets made float16 first
    "ops.subtract(y, y_pred) + ops.square(y_pred)",  # the predictions read in float16 too
    "tf.subtract(y, y_pred)",  # TensorFlow refuses mixed operands
])
def test_a_loss_that_does_not_promote_first_keeps_the_finding(error):
    assert _head(_regressor(error=error))


def test_a_train_step_that_hands_other_targets_keeps_the_finding():
    step = STEP.replace("x, y = data", "x, y = data\n            y = tf.cast(y, tf.float16)")
    assert _head(_regressor(step=step))


def test_tf_keras_fit_does_not_cast_tensors_so_it_is_not_declared():
    assert _head(_regressor(), keras=2)
