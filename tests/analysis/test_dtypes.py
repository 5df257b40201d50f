"""The dtype facts every float16 rule queries (``DtypeFacts``), case by case, through its public API."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.dtypes import Dtype, spelled_dtype
from mpfix.codemods.facts.dtype_facts import RegionKind, facts_for
from mpfix.codemods.facts.dtype_facts import new_mixes as new_dtype_mixes
from mpfix.codemods.facts import ops as op_table
from mpfix.codemods.names import ImportTable

F16, F32, F64, BF16 = Dtype.FLOAT16, Dtype.FLOAT32, Dtype.FLOAT64, Dtype.BFLOAT16
CPLX, INT, BOOL, PY, UNK = Dtype.COMPLEX, Dtype.INT, Dtype.BOOL, Dtype.PYTHON, Dtype.UNKNOWN


def node_of(code: str, expression: str, keras: int = 3):
    """The facts of ``code`` and its last analysed expression whose source is ``expression``."""
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module, keras)
    found = [n for n in walk(module) if isinstance(n, cst.BaseExpression) and facts.place(n) is not None
             and module.code_for_node(n) == expression]
    assert found, f"{expression!r} is not in a float16 region"
    return facts, found[-1]


def dtype_of(code: str, expression: str, keras: int = 3) -> Dtype:
    """The dtype of the last expression in ``code`` whose source is ``expression``."""
    facts, node = node_of(code, expression, keras)
    return facts.dtype_of(node)


def layer(body: str, imports: str = "import tensorflow as tf", params: str = "x") -> str:
    return f"{imports}\n\nclass L(tf.keras.layers.Layer):\n    def call(self, {params}):\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), " " * 8) + "\n"


def ops_layer(body: str, params: str = "x") -> str:
    return "from keras import layers, ops\n\nclass L(layers.Layer):\n" + f"    def call(self, {params}):\n" + \
        textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8) + "\n"


# -- spellings of dtypes ------------------------------------------------------------------
@pytest.mark.parametrize(("spelling", "expected"), [
    ('"float32"', F32), ("tf.float32", F32), ("tf.float16", F16), ("tf.bfloat16", BF16), ("tf.float64", F64),
    ("np.float32", F32), ("tf.complex64", CPLX), ("tf.int32", INT), ('"int64"', INT), ("tf.bool", BOOL),
    ("tf.keras.backend.floatx()", F32), ('"mixed_float16"', F16), ("float", F32), ("x.dtype", None),
])
def test_spelled_dtype(spelling, expected):
    module = cst.parse_module(f"import tensorflow as tf\nimport numpy as np\nv = {spelling}\n")
    value = module.body[-1].body[0].value
    assert spelled_dtype(value, ImportTable(module).resolve) is expected


# -- where float16 comes from --------------------------------------------------------------
def test_layer_inputs_are_float16_on_keras3_all_arguments():
    code = layer("return x + mask", params="x, mask")
    assert dtype_of(code, "x", keras=3) is F16
    assert dtype_of(code, "mask", keras=3) is F16


def test_tf_keras_autocasts_only_the_first_argument():
    code = layer("return x + mask", params="x, mask")
    assert dtype_of(code, "x", keras=2) is F16
    assert dtype_of(code, "mask", keras=2) is UNK


def test_autocast_false_layer_inputs_are_unknown():
    code = """
        import tensorflow as tf
        class Spectrogram(tf.keras.layers.Layer):
            def __init__(self, **kwargs):
                super().__init__(autocast=False, **kwargs)
            def call(self, audio):
                return tf.exp(audio)
    """
    assert dtype_of(code, "audio") is UNK


def test_preprocessing_layer_inputs_are_unknown():
    code = """
        import keras
        class Features(keras.layers.preprocessing.PreprocessingLayer):
            def call(self, x):
                return x * 2.0
    """
    assert dtype_of(code, "x * 2.0") is UNK


def test_input_signature_gives_the_parameters_dtypes():
    code = """
        import tensorflow as tf
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int32)])
        def step(x, ids):
            return x * 2.0, ids
    """
    assert dtype_of(code, "x * 2.0") is F32
    assert dtype_of(code, "ids") is INT


def test_a_signature_spec_from_a_tensor_has_that_tensors_dtype_not_float32():
    """``tf.TensorSpec.from_tensor(t)`` (or any spec but ``tf.TensorSpec(...)``) names no dtype of its own:
    ``TensorSpec``'s float32 default is not its dtype (it was read as float32, as a ``TensorSpec`` with none)."""
    code = """
        import tensorflow as tf
        half = tf.zeros([4], tf.float16)
        @tf.function(input_signature=[tf.TensorSpec.from_tensor(half), tf.TensorSpec([None])])
        def step(x, y):
            return x * 2.0, y * 2.0
    """
    assert dtype_of(code, "x * 2.0") is UNK
    assert dtype_of(code, "y * 2.0") is F32


def test_python_parameters():
    code = layer("return x * scale", params="x, training=False, scale=2.0")
    assert dtype_of(code, "scale") is PY
    assert dtype_of(code, "training") is PY


# -- casts and explicit dtypes ---------------------------------------------------------------
@pytest.mark.parametrize(("expression", "expected"), [
    ("tf.cast(x, tf.float32)", F32), ("tf.cast(x, self.compute_dtype)", F16), ("tf.cast(x, self.dtype)", F32),
    ("tf.cast(x, tf.int32)", INT), ("tf.cast(x, x.dtype)", F16), ("tf.cast(x, tf.complex64)", CPLX),
    ("tf.cast(x, tf.bfloat16)", BF16), ("x.astype('float32')", F32), ("tf.saturate_cast(x, tf.float16)", F16),
])
def test_casts(expression, expected):
    assert dtype_of(layer(f"return {expression}"), expression) is expected


@pytest.mark.parametrize("expression", [
    "tf.random.normal([3])", "tf.eye(3)", "tf.linspace(0.0, 1.0, 5)", "tf.fill([3], 2.0)", "tf.zeros([3])",
    "tf.ones([3])", "tf.constant(1.5)", "tf.constant([1.0, 2.0])", "tf.range(0.0, 5.0)", "tf.random.uniform([2])",
    "tf.math.linspace(0.0, 1.0, 5)", "tf.range(5, dtype=tf.float32)", "tf.sqrt(2.0)",
])
def test_float32_creators_tf(expression):
    assert dtype_of(layer(f"return {expression}"), expression) is F32


@pytest.mark.parametrize("expression", [
    "ops.arange(0, 8, 2, dtype='float32')", "ops.linspace(0.0, 1.0, 5)", "ops.eye(3)", "ops.ones((3,))",
    "ops.zeros((3,))", "ops.full((3,), 2.0)", "ops.cast(8, 'float32')", "keras.random.normal((3,))",
    "ops.convert_to_tensor([1.0, 2.0])",
])
def test_float32_creators_keras_ops(expression):
    code = "import keras\n" + ops_layer(f"return {expression}")
    assert dtype_of(code, expression) is F32


@pytest.mark.parametrize(("expression", "expected"), [
    ("tf.range(5)", INT), ("ops.arange(5)", INT), ("tf.constant(3)", INT), ("tf.shape(x)", INT),
    ("tf.shape(x)[-1]", INT), ("tf.argmax(x, -1)", INT), ("tf.equal(x, 0.0)", BOOL),
    ("tf.logical_and(x > 0, x < 1)", BOOL), ("(x > 0) & (x < 1)", BOOL), ("~(x > 0)", BOOL),
    ("tf.zeros_like(x)", F16), ("tf.ones_like(x, dtype=tf.float32)", F32), ("tf.one_hot(ids, 10)", F32),
])
def test_ints_bools_and_likes(expression, expected):
    code = layer(f"return {expression}", imports="import tensorflow as tf\nfrom keras import ops", params="x, ids")
    assert dtype_of(code, expression) is expected


def test_complex_values():
    code = layer("""
        phase = tf.cast(x, tf.complex64)
        return tf.exp(2j * 3.14159 * phase)
    """)
    assert dtype_of(code, "2j * 3.14159 * phase") is CPLX
    assert dtype_of(code, "tf.signal.rfft(x)" if False else "phase") is CPLX
    assert dtype_of(layer("return tf.signal.stft(x, 256, 128)"), "tf.signal.stft(x, 256, 128)") is CPLX
    assert dtype_of(layer("return tf.math.real(tf.signal.rfft(x))"), "tf.math.real(tf.signal.rfft(x))") is F32


# -- arithmetic --------------------------------------------------------------------------------
def test_python_numbers_take_the_tensors_dtype():
    assert dtype_of(layer("return x * 2.0 + 1"), "x * 2.0 + 1") is F16
    assert dtype_of(layer("return tf.cast(x, tf.float32) * 2.0"), "tf.cast(x, tf.float32) * 2.0") is F32


def test_outside_a_layer_meeting_float32_proves_float32():
    code = """
        import tensorflow as tf
        def loss_fn(y_true, y_pred):
            mask = tf.cast(y_true > 0, tf.float32)
            err = y_pred - y_true
            return tf.reduce_sum(err * mask)
    """
    assert dtype_of(code, "err") is F32


def test_inside_a_layer_a_mix_stays_float16():
    assert dtype_of(layer("return x * tf.cast(3, tf.float32)"), "x * tf.cast(3, tf.float32)") is F16


def test_rotary_float32_island():
    code = ops_layer("""
        dim = ops.shape(x)[-1]
        idx = ops.arange(0, dim, 2, dtype="float32")
        denom = ops.cast(dim, "float32")
        return idx / denom
    """)
    assert dtype_of(code, "idx") is F32
    assert dtype_of(code, "denom") is F32
    assert dtype_of(code, "idx / denom") is F32


# -- attributes and constructor defaults -----------------------------------------------------
def test_attribute_from_constructor_default_is_a_python_constant():
    code = """
        import tensorflow as tf
        class LayerNorm(tf.keras.layers.Layer):
            def __init__(self, epsilon=1e-8, mask_value=-1e9, **kwargs):
                super().__init__(**kwargs)
                self.epsilon = epsilon
                self.mask_value = mask_value
            def call(self, x):
                return x + self.epsilon + self.mask_value
    """
    facts, epsilon = node_of(code, "self.epsilon")
    constant = facts.constant(epsilon)
    assert constant.value == 1e-8 and facts.module.code_for_node(constant.literal) == "1e-8"
    facts, mask_value = node_of(code, "self.mask_value")
    assert facts.constant(mask_value).value == -1e9
    assert dtype_of(code, "self.epsilon") is PY


def test_attribute_float32_tensor_built_in_init():
    code = """
        from keras import layers, ops
        class Rotary(layers.Layer):
            def __init__(self, dim):
                super().__init__()
                self.inv_freq = 1.0 / (10000.0 ** (ops.arange(0, dim, 2, dtype="float32") / dim))
            def call(self, x):
                return x * self.inv_freq
    """
    assert dtype_of(code, "self.inv_freq") is F32


def test_layer_built_with_float32_dtype_outputs_float32():
    code = """
        import tensorflow as tf
        class Block(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.norm = tf.keras.layers.LayerNormalization(dtype="float32")
                self.dense = tf.keras.layers.Dense(4)
            def call(self, x):
                return self.norm(x), self.dense(x), tf.keras.layers.Dense(2, dtype="float32")(x)
    """
    assert dtype_of(code, "self.norm(x)") is F32
    assert dtype_of(code, "self.dense(x)") is F16
    assert dtype_of(code, 'tf.keras.layers.Dense(2, dtype="float32")(x)') is F32


# -- functions, closures, tuples ----------------------------------------------------------------
def test_same_file_helper_with_a_float32_result():
    code = """
        import tensorflow as tf
        def get_padding(ids):
            return tf.cast(tf.equal(ids, 0), tf.float32)
        class Encoder(tf.keras.layers.Layer):
            def call(self, x, ids):
                return get_padding(ids) * -1e9
    """
    assert dtype_of(code, "get_padding(ids)") is F32


def test_nested_closure_parameters_follow_their_call_sites():
    code = layer("""
        def add_mask(s):
            return s + 1.0
        return add_mask(x)
    """)
    assert dtype_of(code, "s + 1.0") is F16


def test_unpacking_a_models_tuple_output():
    code = """
        import tensorflow as tf
        @tf.function
        def train_step(model, x, y):
            logits, aux = model(x, training=True)
            return logits, aux
    """
    assert dtype_of(code, "logits") is F16
    assert dtype_of(code, "aux") is F16


def test_unpacking_a_same_file_functions_tuple():
    code = """
        import tensorflow as tf
        def split(x):
            return tf.cast(x, tf.float32), tf.shape(x)
        @tf.function
        def step(x):
            a, b = split(x)
            return a, b
    """
    assert dtype_of(code, "a") is F32
    assert dtype_of(code, "b") is INT


def test_unpacking_split():
    code = layer("""
        q, k = tf.split(x, 2, axis=-1)
        return q
    """)
    assert dtype_of(code, "q") is F16


def test_caller_casts_to_float32():
    code = """
        import tensorflow as tf
        class Task:
            def build_losses(self, labels, outputs):
                return outputs
            def train_step(self, x, labels, model):
                outputs = tf.cast(model(x), tf.float32)
                return self.build_losses(labels, outputs)
    """
    assert dtype_of(code, "outputs") is F32


def test_gradients_are_float32():
    code = """
        import tensorflow as tf
        @tf.function
        def step(model, x):
            with tf.GradientTape() as tape:
                loss = model(x)
            grads = tape.gradient(loss, model.trainable_variables)
            return grads
    """
    assert dtype_of(code, "grads") is F32


def test_unknown_stays_unknown():
    code = """
        import tensorflow as tf
        from elsewhere import helper
        @tf.function
        def step(x):
            return helper(x)
    """
    assert dtype_of(code, "helper(x)") is UNK


# -- value ranges: what exp cannot overflow ------------------------------------------------------
@pytest.mark.parametrize(("expression", "bounded"), [
    ("-x ** 2", True), ("-(x ** 2) / (2.0 * s ** 2)", True), ("-tf.abs(x)", True), ("-tf.square(x)", True),
    ("-math.log(10000.0) * i / d_model", True), ("x", False), ("-x", False), ("x - 1.0", False), ("0.5 * x", False),
])
def test_nonpositive(expression, bounded):
    code = layer(f"i = tf.range(8)\nreturn {expression}", imports="import math\nimport tensorflow as tf",
                 params="x, s, d_model=512")
    facts, node = node_of(code, expression)
    assert facts.nonpositive(node) is bounded


# -- the float32 ops table drives the prefilter -------------------------------------------------
def test_every_float32_creator_is_a_prefilter_trigger():
    from mpfix.codemods.base import triggered

    for name in [n for n, spec in op_table.TABLE.items() if spec.creates_float32]:
        spelled = f"y = tf.{name}(3)\n"
        assert triggered(op_table.FLOAT32_TRIGGERS, spelled), name


def test_op_names_fold_every_namespace():
    assert op_table.op_name("tensorflow.math.reduce_sum") == "reduce_sum"
    assert op_table.op_name("keras.ops.numpy.arange") == "arange"
    assert op_table.op_name("keras.ops.arange") == "arange"
    assert op_table.op_name("keras.random.normal") == "random.normal"
    assert op_table.op_name("tensorflow.compat.v1.random.normal") == "random.normal"
    assert op_table.op_name("numpy.arange") is None


# -- the check fix validation runs ----------------------------------------------------------------
def test_new_dtype_mixes_sees_a_fix_that_makes_a_mix():
    original = cst.parse_module(ops_layer("""
        dim = ops.shape(x)[-1]
        idx = ops.arange(0, dim, 2, dtype="float32")
        denom = ops.cast(dim, "float32")
        return x * ops.cast(idx / denom, x.dtype)
    """))
    broken = cst.parse_module(original.code.replace('ops.cast(dim, "float32")', "ops.cast(dim, self.compute_dtype)"))
    assert new_dtype_mixes(original, original) == []
    mixes = new_dtype_mixes(original, broken)
    assert [str(m) for m in mixes] == ["`idx / denom` mixes float32 and float16"]


# -- where float16 does not come from ------------------------------------------------------------
def test_cast_where_needed_is_float32_on_the_float16_path():
    code = """
        import tensorflow as tf
        def loss(y_true, y_pred):
            convert = y_pred.dtype == tf.float16
            precise = tf.cast(y_pred, tf.float32) if convert else y_pred
            return precise
    """
    assert dtype_of(code, "precise") is F32


def test_float32_layer_class_sees_float32():
    code = """
        import tensorflow as tf
        class Head(tf.keras.layers.Layer):
            def __init__(self, **kwargs):
                super().__init__(dtype="float32", **kwargs)
            def call(self, x):
                return tf.cast(x, self.compute_dtype) + x
    """
    assert dtype_of(code, "x") is F32
    assert dtype_of(code, "tf.cast(x, self.compute_dtype)") is F32


def test_every_construction_with_float32_makes_a_float32_layer():
    code = """
        import tensorflow as tf
        class Norm(tf.keras.layers.Layer):
            def call(self, x):
                return x * 2.0
        norm = Norm(dtype="float32")
    """
    assert dtype_of(code, "x * 2.0") is F32
    assert dtype_of(code.replace('Norm(dtype="float32")', "Norm()"), "x * 2.0") is F16


def test_tf_module_call_does_not_autocast_but_its_compute_dtype_follows_the_policy():
    code = """
        import tensorflow as tf
        class Base(tf.Module):
            pass
        class Attention(Base):
            def __call__(self, scores, mask):
                return tf.cast(mask, self.compute_dtype), scores
    """
    assert dtype_of(code, "scores") is UNK
    assert dtype_of(code, "tf.cast(mask, self.compute_dtype)") is F16


def test_library_loss_helper_parameters_are_what_callers_pass():
    alone = """
        import tensorflow as tf
        def contrastive_loss(hidden):
            return hidden * 2.0
    """
    assert dtype_of(alone, "hidden * 2.0") is UNK
    called = alone + """
        @tf.function
        def train_step(model, x):
            return contrastive_loss(model(x))
    """
    assert dtype_of(called, "hidden * 2.0") is F16
    keras_loss = alone.replace("contrastive_loss(hidden)", "my_loss(y_true, y_pred)").replace("hidden", "y_pred")
    # compile hands it the model's raw predictions: tf_keras as they are (its callers decide: unknown here, float16
    # if the predictions are), Keras 3 converted to float32 (C24)
    assert dtype_of(keras_loss, "y_pred * 2.0", 2) is UNK
    facts, node = node_of(keras_loss, "y_pred * 2.0", 2)
    assert facts.assuming(F16).dtype_of(node) is F16
    assert dtype_of(keras_loss, "y_pred * 2.0", 3) is F32


def test_callable_parameter_follows_its_argument():
    code = """
        import tensorflow as tf
        def pairwise_loss(y_true, y_pred, distance_metric=None):
            d = distance_metric(tf.cast(y_pred, tf.float32))
            return d
    """
    assert dtype_of(code, "d") is F32


def test_keras_op_implementations_are_not_layers():
    code = """
        from keras.src import backend
        from keras.src.ops.operation import Operation
        class Norm(Operation):
            def call(self, x):
                return backend.linalg.norm(x)
    """
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    facts = facts_for(module)
    norm = next(n for n in walk(module) if isinstance(n, cst.Call) and module.code_for_node(n) == "backend.linalg.norm(x)")
    assert facts.place(norm) is None  # `call` of a keras.ops Operation is not float16 compute
    assert [facts.place(n).kind for n in walk(module) if isinstance(n, cst.Import | cst.ImportFrom)] == \
        [RegionKind.MODULE, RegionKind.MODULE]


@pytest.mark.parametrize("keras", [2, 3])
def test_a_name_that_follows_itself_keeps_the_dtype_its_cast_gives(keras):
    code = layer("""
        if mask is not None:
            mask = tf.cast(mask, tf.float32)
            if len(mask.shape) == 2:
                mask = tf.expand_dims(mask, 1)
            y = 1.0 - mask
        return x
    """, params="x, mask=None")
    assert dtype_of(code, "mask", keras=keras) is F32
    assert dtype_of(code, "1.0 - mask", keras=keras) is F32


def test_a_name_cast_both_ways_is_what_its_last_assignment_made_it_where_read():
    # The name table joins float16 and float32 to unknown; read at its use (dtype_flow), x is the last cast.
    code = layer("""
        x = tf.cast(x, tf.float32)
        x = tf.expand_dims(x, 1)
        z = x + 1.0
        x = tf.cast(x, self.compute_dtype)
        y = x * 2.0
        return y
    """)
    assert dtype_of(code, "x * 2.0") is F16
    assert dtype_of(code, "x + 1.0") is F32
