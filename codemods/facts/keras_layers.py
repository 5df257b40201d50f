"""The one table of Keras layers and what they do under a mixed policy, per generation.

``computes_float32``: the layer computes in float32 internally whatever the policy, and returns
its compute dtype (float16). Checked against the sources:

* Keras 3 ``LayerNormalization.call`` casts float16/bfloat16 inputs to float32 when its variable
  dtype is float32, and casts the result back (``keras/src/layers/normalization/
  layer_normalization.py``); ``BatchNormalization.call`` casts float16/bfloat16 inputs to float32
  unconditionally and casts back (``batch_normalization.py``); ``GroupNormalization`` likewise.
* tf_keras ``LayerNormalization`` casts to float32 on its non-fused path and its fused path
  computes in float32 (``KERAS_API.md``); ``BatchNormalization``'s fused kernel takes float16
  inputs with float32 statistics.

So a small epsilon there is safe (MP202 stays silent), and building one with ``dtype="float32"``
changes its *output* to float32, which then meets float16 residuals (a dtype error on tf_keras):
no fix may add that.

``autocasts``: the layer casts floating inputs to its compute dtype (preprocessing layers do not).
``output_head``: a layer whose output may be a model's prediction (MP205's candidates).
``raw_statistics``: a preprocessing layer that holds statistics of raw (unscaled) data and casts its input and
those statistics to its compute dtype itself (float16 under mixed_float16). Checked against the sources: Keras 3
``Normalization.build`` stores ``ops.cast(mean/variance, self.compute_dtype)`` and ``call`` casts the input to it;
tf_keras ``Normalization.finalize_state``/``build`` cast ``mean``/``variance`` and ``call`` casts the input to
``self.compute_dtype``. Run (wave 16's adapt_norm_raw_k3, TF 2.21): adapted on incomes ~70000 and kWh ~9000, the
float16 variances are inf, the income column inf/inf = NaN in 3200/3200 rows; ``dtype="float32"`` trains (MP210).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerSpec:
    name: str
    computes_float32: bool = False
    autocasts: bool = True
    output_head: bool = False
    raw_statistics: bool = False


def _table(*specs: LayerSpec) -> dict[str, LayerSpec]:
    return {s.name: s for s in specs}


_COMMON = (
    LayerSpec("LayerNormalization", computes_float32=True),
    LayerSpec("BatchNormalization", computes_float32=True),
    LayerSpec("SyncBatchNormalization", computes_float32=True),
    *(LayerSpec(n, output_head=True) for n in ("Dense", "EinsumDense", "Activation", "Softmax", "Conv1D", "Conv2D",
                                               "Conv3D", "Conv2DTranspose")),
    # Rescaling computes `cast(inputs, compute_dtype) * scale + offset` (both generations): the last layer of a
    # model whose float16 head it scales (a box head times the image size, wave 4) is its output layer.
    LayerSpec("Rescaling", autocasts=False, output_head=True),
    LayerSpec("Normalization", autocasts=False, raw_statistics=True),
    *(LayerSpec(n, autocasts=False) for n in (
        "Resizing", "Discretization", "Hashing", "StringLookup", "IntegerLookup",
        "CategoryEncoding", "TextVectorization", "CenterCrop", "RandomCrop", "RandomFlip", "RandomRotation",
        "RandomZoom", "RandomContrast", "RandomTranslation", "HashedCrossing", "MelSpectrogram")),
)

LAYERS: dict[int, dict[str, LayerSpec]] = {
    2: _table(*_COMMON),
    3: _table(*_COMMON, LayerSpec("GroupNormalization", computes_float32=True)),
}

# Layers holding statistics of raw data that they cast to float16 with their input (MP210's candidates).
RAW_STATISTICS_LAYERS = frozenset(name for table in LAYERS.values() for name, spec in table.items()
                                  if spec.raw_statistics)
# Layers that may be a model's output layer (MP205's candidates, and where model_outputs stops looking).
OUTPUT_LAYERS = frozenset(name for table in LAYERS.values() for name, spec in table.items() if spec.output_head)


def layer(qualified: str, keras: int) -> LayerSpec | None:
    """The spec of a Keras layer by its resolved name (``keras.layers.LayerNormalization``); None if unlisted."""
    if not qualified.startswith(("keras.layers.", "keras.src.layers.")):
        return None
    return LAYERS.get(keras, LAYERS[3]).get(qualified.rsplit(".", 1)[-1])


# Activations whose outputs are probabilities, in [0, 1]: a layer built with one (``Dense(n, activation="sigmoid")``,
# ``Activation("softmax")``, ``Softmax()``) outputs values in [0, 1].
PROBABILITY_ACTIVATIONS = frozenset({"sigmoid", "softmax", "hard_sigmoid"})
PROBABILITY_LAYERS = frozenset({"Softmax"})
# A Keras model's hooks that Keras calls with the model's own output (Keras 3's trainers and tf_keras' train_step call
# ``compute_loss(x=x, y=y, y_pred=y_pred, ...)``): the hook, and its parameter that holds ``self(x)``'s value.
MODEL_PREDICTIONS = {"compute_loss": "y_pred", "compute_metrics": "y_pred"}
MODEL_TARGETS = {"compute_loss": "y", "compute_metrics": "y"}
# The calls that train a model on data, and per generation those that cast float arrays to floatx() (float32 under
# mixed_float16). Run (TF 2.21 CPU, under mixed_float16, y seen in train_step): Keras 3 `fit` casts NumPy arrays and
# tf.Tensors to float32 (keras/src/trainers/data_adapters/array_slicing.py) and a float16 tf.data pipeline stays
# float16; tf_keras casts NumPy arrays only (a float16 tf.Tensor stays float16), so it is not listed.
TRAINING_CALLS = frozenset({"fit", "train_on_batch", "fit_generator"})
FIT_CASTS_TO_FLOATX = {3: frozenset({"fit"})}


# Layers whose output is not their autocast input's compute dtype: it depends on what they wrap or read.
OUTPUT_FOLLOWS_INPUT = frozenset({"Lambda", "InputLayer", "Masking", "Identity", "TFSMLayer", "TorchModuleWrapper",
                                  "JaxLayer", "FlaxLayer"})
# Layers that read integer ids and output the compute dtype (an int input to them is no sign of an int output).
READS_IDS = frozenset({"Embedding"})


def is_input(qualified: str | None) -> bool:
    """``keras.Input``/``keras.layers.Input``: a symbolic input in its ``dtype``, ``floatx()`` (float32) by
    default under every policy (keras/src/layers/core/input_layer.py; tf_keras engine/input_layer.py)."""
    return bool(qualified) and qualified.startswith("keras.") and qualified.rsplit(".", 1)[-1] == "Input"


def computes_float32(qualified: str | None, keras: int) -> bool:
    spec = layer(qualified or "", keras)
    return spec is not None and spec.computes_float32


# Methods the Keras base class's own `call` runs on the inputs (Merge, Pooling layers): a layer
# defining one of them without `call` computes there.
LAYER_HOOKS = frozenset({"_merge_function", "_pooling_function"})


# Keras functions that return a fixed number by default: `keras.backend.epsilon()` is 1e-7 (a float16
# subnormal, 1.19e-7 once converted: 19% off), the fuzz factor of Keras' own losses and metrics.
KERAS_CONSTANTS = {"keras.backend.epsilon": 1e-7, "keras.config.epsilon": 1e-7}


# What Keras optimizer and loss calls return (C27, C28; measured against TensorFlow's traced dtypes):
# `apply_gradients`/`minimize` return the iteration count (int64); a loss scaler returns its argument's dtype.
# GradientTape methods that differentiate: `gradient`, and the per-example/per-output `jacobian` and
# `batch_jacobian` (linear in the target, so a jacobian of a scaled loss carries the loss scale: DP-SGD steps).
TAPE_GRADIENT_METHODS = frozenset({"gradient", "jacobian", "batch_jacobian"})
OPTIMIZER_RESULTS = {"apply_gradients": "int", "minimize": "int", "scale_loss": "argument",
                     "get_scaled_loss": "argument", "get_unscaled_gradients": "argument"}
# A Keras 3 `Loss` object converts y_true/y_pred to its dtype (floatx, float32) before computing;
# a tf_keras one computes in y_pred's dtype.
LOSS_OBJECT_COMPUTES_FLOAT32 = {2: False, 3: True}
# So the inputs a loss receives (C24): Keras 3's `Loss.__call__` converts y_true/y_pred to the loss dtype
# (`dtype or backend.floatx()`, float32 under mixed policies: keras/src/losses/loss.py:49,56-64) before
# `call`, and `compile(loss=fn)` wraps a plain `fn(y_true, y_pred)` in `LossFunctionWrapper`, a `Loss`
# (trainers/compile_utils.py:126). tf_keras casts y_true to y_pred's dtype: float16 predictions stay.
LOSS_INPUTS = {2: None, 3: "float32"}
LOSS_INPUT_POSITIONS = 2  # y_true, y_pred: the other parameters are the function's own options
LOSS_BASES = ("keras.losses.", "keras.src.losses.")  # a class deriving from these is a Keras loss
# Keras loss *functions* (`keras.losses.mean_squared_error`): both generations convert y_true to y_pred's dtype
# and compute in it (keras/src/losses/losses.py: `ops.convert_to_tensor(y_true, dtype=y_pred.dtype)`), so their
# result has the predictions' dtype. The lowercase names of these modules that are no loss: LOSS_HELPERS.
LOSS_FUNCTION_MODULES = ("keras.losses.", "keras.src.losses.losses.")
LOSS_HELPERS = frozenset({"get", "serialize", "deserialize"})


# Constructors of a dtype policy from its name (`dtype_policies.get("mixed_float16")`): compute dtype float16,
# variable dtype float32 for the mixed ones; a plain dtype name is both (Keras 3 `Loss`: `dtype or floatx()`).
POLICY_BUILDERS = ("dtype_policies.get", "DTypePolicy", "FloatDTypePolicy", "mixed_precision.Policy",
                   "mixed_precision.DTypePolicy")


def builds_policy(qualified: str | None) -> bool:
    return bool(qualified) and qualified.startswith("keras.") and qualified.endswith(
        tuple("." + name for name in POLICY_BUILDERS))


# tf_keras `backend.RandomGenerator` methods (a layer's `self._random_generator`, set by the base layer): the draws
# return their `dtype` argument's dtype, `floatx()` (float32) by default, never the compute dtype (C40); `dropout`
# returns its input's dtype ("like").
GENERATOR_METHODS = {"random_uniform": "dtype", "random_normal": "dtype", "truncated_normal": "dtype",
                     "dropout": "like"}


# A layer's own weights: `self.w = self.add_weight(...)` (tf_keras `add_variable` too) or a bare `tf.Variable(...)`.
# A product with one is a projection, not attention scores between two activations (C41).
WEIGHT_BUILDERS = frozenset({"add_weight", "add_variable"})
# Initializers that start every element of a weight at one value (their first argument, `value`).
CONSTANT_INITIALIZERS = frozenset({"keras.initializers.Constant", "keras.initializers.constant",
                                   "keras.src.initializers.Constant", "tensorflow.constant_initializer",
                                   "tensorflow.keras.initializers.Constant", "tensorflow.initializers.constant"})
# A variable made directly (`self.w = tf.Variable(...)` on a layer or model, not add_weight) is a plain variable in
# both generations: never an AutoCastVariable, read in its own dtype (its initial value's or its `dtype=`) inside
# `call` too (C35; TF 2.21: float32 under mixed_float16 in tf_keras and Keras 3). Keras 3's `keras.Variable` autocasts.
# Python operators on a Keras 3 variable (``add_weight``) are keras.ops, which promote float16 with float32:
# the variable's own operator runs when it is on the left, and on the right of these operators TensorFlow's
# tensor operator gives way to it when the dtypes differ (``x + w`` does not: it raises in eager mode).
# Measured TF 2.21 / keras 3.15; tf_keras variables are tf.Variables: every mix raises. By CST operator class.
VARIABLE_OPERATORS_PROMOTE = {
    3: {"left": frozenset({"Add", "Subtract", "Multiply", "Divide"}),
        "right": frozenset({"Subtract", "Multiply", "Divide"})},
}
PLAIN_VARIABLES = frozenset({"tensorflow.Variable", "tensorflow.compat.v1.Variable", "tensorflow.compat.v2.Variable"})
# Initializer classes: an instance called with a shape (`GlorotUniform()(shape=[d, n])`) makes a tensor of its
# `dtype` argument (position 1), floatx (float32) by default, never the compute dtype.
INITIALIZER_MODULES = ("tensorflow.initializers.", "tensorflow.keras.initializers.", "keras.initializers.",
                       "keras.src.initializers.", "tensorflow.compat.v1.initializers.",
                       "tensorflow.compat.v2.initializers.")


# Callbacks handed on under these keyword names, by the parameter positions that hold a probability distribution:
# seq2seq attention mechanisms call `probability_fn(score, state)` with the previous alignments as `state`
# (tensorflow_addons `_BaseAttentionMechanism`, TF1 contrib.seq2seq: "converts the score and previous alignments to
# probabilities"), so a running sum of it is at most 1 (C25).
CALLBACK_DISTRIBUTIONS = {"probability_fn": (1,)}


# Keras helpers that return their tensor arguments reshaped, in order: element i of the result has argument i's
# dtype (`y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)` in every Keras 3 loss function; tf_keras'
# `losses_utils.squeeze_or_expand_dimensions(y_pred, y_true)`; tf_keras resolves as keras.src).
RESHAPES_ARGUMENTS = frozenset({"keras.src.losses.loss.squeeze_or_expand_to_same_rank",
                                "keras.losses.loss.squeeze_or_expand_to_same_rank",
                                "keras.src.utils.losses_utils.squeeze_or_expand_dimensions",
                                "keras.utils.losses_utils.squeeze_or_expand_dimensions"})
