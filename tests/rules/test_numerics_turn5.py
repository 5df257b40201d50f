"""Issue 18's missed hazards on the new corpora (turn 5), each class reproduced first as a failing test.

C5: ``tf.concat``/``tf.stack`` of float16 and float32 tensors is a dtype mix (the elements of the list
argument are the operands; the result's dtype is theirs), research's ``nonlocal_block.py`` coord-conv.
C6: a number computed from small literals (``tf.Variable(20.0) ** 2``, then ``** 2`` again) cast to a
float16 tensor's dtype overflows: tfexamples' EfficientDet ``srelu_fn``.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods._float16_scope import folded
from mpfix.codemods.analysis.dtypes import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for
from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])


def lint(code: str, keras: int = 3, *, fix: bool = True):
    return lint_snippet(code, "MP2", keras=keras, policy="mixed_float16", fix=fix, filename="model.py")


def found(code: str, keras: int = 3) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint(code, keras, fix=False).findings)


def findings(code: str, keras: int = 3):
    return lint(code, keras, fix=False).findings


# -- C5: a concat/stack of float16 and float32 tensors raises like `x16 * y32` ---------------------------
COORD_CONV = """
    import tensorflow as tf

    class NonLocalBlock(tf.keras.layers.Layer):
        def __init__(self, channels, add_coord_conv=True, **kwargs):
            super().__init__(**kwargs)
            self.add_coord_conv = add_coord_conv
            self.queries = tf.keras.layers.Conv2D(channels, 1)

        def call(self, inputs):
            batch, height, width = tf.shape(inputs)[0], tf.shape(inputs)[1], tf.shape(inputs)[2]
            x = inputs
            if self.add_coord_conv:
                coords_x, coords_y = tf.meshgrid(tf.linspace(-1., 1., height), tf.linspace(-1., 1., width))
                coords = tf.stack([coords_y, coords_x], axis=-1)
                coords = tf.tile(coords[tf.newaxis, :, :, :], multiples=[batch, 1, 1, 1])
                x = tf.concat([x, coords], axis=-1)
            return self.queries(x)
"""


@BOTH
def test_c5_concat_of_float16_activations_and_float32_coordinates_is_a_mix(keras):
    result = findings(COORD_CONV, keras)
    assert [(f.code, f.line) for f in result] == [("MP206", 16)]
    assert "`coords` is float32" in result[0].message
    # linspace/meshgrid take no dtype: no fix spells one (the rule cannot decide a cast here).
    assert result[0].fix is None


@BOTH
def test_c5_stack_of_float32_elements_is_float32(keras):
    module = cst.parse_module(textwrap.dedent(COORD_CONV))
    facts = facts_for(module, keras)
    stacks = [n for n in facts.nodes(cst.Call) if module.code_for_node(n).startswith(("tf.stack", "tf.tile"))]
    assert [facts.dtype_of(n) for n in stacks] == [Dtype.FLOAT32, Dtype.FLOAT32]


@BOTH
def test_c5_concat_of_float16_tensors_alone_is_no_mix(keras):
    code = """
        import tensorflow as tf

        class Merge(tf.keras.layers.Layer):
            def call(self, x):
                y = tf.nn.relu(x)
                both = tf.stack([x, y], axis=-1)
                return tf.concat([x, tf.cast(both[..., 0], x.dtype)], axis=-1)
    """
    assert found(code, keras) == []


# -- C6: a number past 65504 computed from small literals, cast to float16 ------------------------------
SRELU = """
    import tensorflow as tf

    def srelu_fn(x):
        \"\"\"Smooth relu: a smooth version of relu.\"\"\"
        with tf.name_scope("srelu"):
            beta = tf.Variable(20.0, name="srelu_beta", dtype=tf.float32) ** 2
            beta = tf.cast(beta**2, x.dtype)
            safe_log = tf.math.log(tf.where(x > 0., beta * x + 1., tf.ones_like(x)))
            return tf.where((x > 0.), x - (1. / beta) * safe_log, tf.zeros_like(x))

    class Head(tf.keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv = tf.keras.layers.Conv2D(8, 3, padding="same")

        def call(self, x):
            return srelu_fn(self.conv(x))
"""


@BOTH
def test_c6_a_computed_constant_cast_to_float16_is_reported_once_without_a_fix(keras):
    result = findings(SRELU, keras)
    assert [(f.code, f.line) for f in result] == [("MP201", 7)]  # the cast, not each use of the inf after it
    assert "`beta**2` is 160000" in result[0].message
    assert result[0].fix is None


def test_c6_folding_follows_the_assignment_that_reaches_each_use():
    module = cst.parse_module(textwrap.dedent(SRELU))
    facts = facts_for(module, 3)
    values = {}
    for node in facts.nodes((cst.Name, cst.BinaryOperation)):
        result = folded(facts, node, facts._a.resolve)
        if result is not None:
            values.setdefault(module.code_for_node(node), []).append(result.value)
    assert values["beta**2"] == [160000.0]
    assert values["beta"] == [400.0, 160000.0, 160000.0]  # the cast's argument, then the cast's result


@BOTH
@pytest.mark.parametrize("body", [
    # below 65504 after folding
    "beta = tf.Variable(20.0) ** 2\n        return x * tf.cast(beta, x.dtype)",
    # a branch may rebind it: the last assignment before the use is not one that always runs
    "beta = 400.0 ** 2\n        if x.shape[0]:\n            beta = 2.0\n        return x * tf.cast(beta, x.dtype)",
    # cast to float32: fine
    "beta = tf.Variable(20.0) ** 4\n        return tf.cast(x, tf.float32) * tf.cast(beta, tf.float32)",
    # a dtype test guards it
    "beta = 400.0 ** 2 if x.dtype == tf.float32 else 1e4\n        return x * tf.cast(beta, x.dtype)",
])
def test_c6_what_is_not_a_computed_overflow(body, keras):
    code = f"""
        import tensorflow as tf

        class Scale(tf.keras.layers.Layer):
            def call(self, x):
                {body}
    """
    assert [c for c in found(code, keras) if c[0] == "MP201"] == []


@BOTH
def test_c6_a_python_number_computed_past_65504_meets_float16(keras):
    code = """
        import tensorflow as tf

        class Energy(tf.keras.layers.Layer):
            def call(self, x):
                scale = 2.0 ** 20
                return x * scale
    """
    result = findings(code, keras)
    assert [(f.code, f.line) for f in result] == [("MP201", 6)]
    assert result[0].fix is None


# -- A library loss helper's own helpers get what it passes them (tfexamples efficientdet iou_utils) ----
IOU = """
    import tensorflow as tf

    def _iou_per_anchor(pred_boxes, target_boxes):
        p_ymin, p_xmin, p_ymax, p_xmax = pred_boxes
        t_ymin, t_xmin, t_ymax, t_xmax = target_boxes
        enclose_ymax = tf.maximum(p_ymax, t_ymax)
        enclose_ymin = tf.minimum(p_ymin, t_ymin)
        enclose_xmax = tf.maximum(p_xmax, t_xmax)
        enclose_xmin = tf.minimum(p_xmin, t_xmin)
        return tf.math.reduce_sum(
            tf.math.square(tf.stack([enclose_ymax - enclose_ymin, enclose_xmax - enclose_xmin], axis=-1)), axis=-1)

    def iou_loss(pred_boxes, target_boxes):
        pred_boxes = tf.convert_to_tensor(pred_boxes)
        target_boxes = tf.cast(target_boxes, pred_boxes.dtype)
        return 1 - _iou_per_anchor(tf.unstack(pred_boxes, axis=-1), tf.unstack(target_boxes, axis=-1))
"""


@BOTH
def test_helpers_of_a_library_loss_helper_get_what_it_passes_not_float16(keras):
    # iou_loss's callers are elsewhere (they cast the boxes to float32 first): nothing is known here.
    assert found(IOU, keras) == []


@BOTH
def test_a_library_loss_helper_called_on_float16_in_the_file_still_reports_its_helpers(keras):
    code = IOU + """
    class BoxIouLoss(tf.keras.layers.Layer):
        def call(self, boxes, targets):
            return iou_loss(boxes * 1000.0, targets)
    """
    assert ("MP203", 10) in found(code, keras)



# -- C41: a product with a layer weight is a projection, not attention scores (tfm gaussian_process.py:413) --
COVARIANCE = """
    import tensorflow as tf

    class LaplaceRandomFeatureCovariance(tf.keras.layers.Layer):
        def build(self, input_shape):
            d = input_shape[-1]
            self.precision_matrix = self.add_weight(name="p", shape=(d, d), dtype=self.dtype, trainable=False)

        def call(self, gp_feature):
            feature_cov_matrix = tf.linalg.inv(self.precision_matrix)
            cov_feature_product = tf.matmul(feature_cov_matrix, gp_feature, transpose_b=True) * 0.001
            return tf.matmul(gp_feature, cov_feature_product)
"""


@BOTH
def test_c41_a_weight_times_activations_is_no_attention_score(keras):
    assert [c for c in found(COVARIANCE, keras) if c[0] == "MP203"] == []


@BOTH
def test_c41_queries_times_keys_are_still_attention_scores(keras):
    code = """
        import tensorflow as tf

        class Attention(tf.keras.layers.Layer):
            def build(self, input_shape):
                self.wq = self.add_weight(name="wq", shape=(input_shape[-1], 64))

            def call(self, x):
                q = tf.matmul(x, self.wq)
                return tf.nn.softmax(tf.matmul(q, x, transpose_b=True) * 0.125)
    """
    assert ("MP203", 9) in found(code, keras)


# -- Variables returned by a same-class method are float32 variables (EfficientDet _reg_l2_loss) ---------
REG_L2 = """
    import re

    import tensorflow as tf

    class EfficientDetNetTrain(tf.keras.Model):
        def _freeze_vars(self):
            if self.config.var_freeze_expr:
                return [v for v in self.trainable_variables if not re.match(self.config.var_freeze_expr, v.name)]
            return self.trainable_variables

        def _reg_l2_loss(self, weight_decay, regex=r".*(kernel|weight):0$"):
            var_match = re.compile(regex)
            return weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in self._freeze_vars() if var_match.match(v.name)])

        def train_step(self, data):
            images, labels = data
            with tf.GradientTape() as tape:
                energy = tf.nn.l2_loss(self.backbone(images))
                loss = self.compiled_loss(labels, self(images, training=True)) + self._reg_l2_loss(4e-5) + energy
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}
"""


@BOTH
def test_variables_a_same_class_method_returns_are_float32(keras):
    # l2_loss of the model's own variables: float32; of the backbone's activations: float16.
    assert [c for c in found(REG_L2, keras) if c[0] == "MP203"] == [("MP203", 18)]


def test_c6_a_name_rebound_many_times_is_not_folded():
    # Each use would walk every binding (a 1,500-line `y = y * 1.5` chain took minutes): past 8 bindings, unknown.
    body = "\n".join(["        y = 2.0 ** 2", *["        y = y * 1.5"] * 9, "        return x * y"])
    code = f"import tensorflow as tf\n\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n{body}\n"
    module = cst.parse_module(code)
    facts = facts_for(module, 3)
    last = [n for n in facts.nodes(cst.Name) if n.value == "y"][-1]
    assert folded(facts, last, facts._a.resolve) is None
    short = code.replace("\n".join(["        y = y * 1.5"] * 9), "        y = y * 1.5")
    module = cst.parse_module(short)
    facts = facts_for(module, 3)
    last = [n for n in facts.nodes(cst.Name) if n.value == "y"][-1]
    assert folded(facts, last, facts._a.resolve).value == 6.0


# -- C35: a tf.Variable made directly on a model is float32 in call (no AutoCastVariable) -----------------------
# research delf delg_model.py:127-138 (cosine classifier); TF 2.21: InvalidArgumentError under mixed_float16.
COSINE_HEAD = """
import tensorflow as tf


class Head(tf.keras.Model):
    def __init__(self, dim, n):
        super().__init__()
        self.dense = tf.keras.layers.Dense(dim)
        self.cosine_weights = {weights}

    def call(self, x):
        h = tf.math.l2_normalize(self.dense(x), axis=1)
        return tf.matmul(h, tf.math.l2_normalize(self.cosine_weights, axis=0))
"""


@BOTH
def test_c35_a_direct_tf_variable_meets_float16_activations(keras):
    code = COSINE_HEAD.format(weights="tf.Variable(tf.initializers.GlorotUniform()(shape=[dim, n]))")
    mixes = [f for f in findings(code, keras) if f.code == "MP206"]
    assert [f.line for f in mixes] == [12]
    assert "self.cosine_weights" in mixes[0].message
    assert lint(code, keras).applied == 0  # which side to cast is the author's call: no fix


@BOTH
def test_c35_an_add_weight_variable_autocasts_and_is_no_mix(keras):
    code = COSINE_HEAD.format(weights='self.add_weight(name="w", shape=[dim, n])')
    assert [f for f in findings(code, keras) if f.code == "MP206"] == []


# -- C36/C37: a layer of this file returning float32 by construction outputs float32 under the policy ---------------
# research detr_lib.py (PrePostProcessingWrapper returns a dtype="float32" LayerNormalization's output;
# TwoDimensionalPositionEmbedding returns sin/cos of float32 positions); TF 2.21: both additions below raise.
FLOAT32_OUTPUT_LAYERS = """
import tensorflow as tf


class PositionEmbedding(tf.keras.layers.Layer):
    def call(self, inputs):
        position = tf.cast(tf.range(tf.shape(inputs)[1]), tf.float32)
        scaled = tf.expand_dims(position, 1) * tf.exp(tf.cast(tf.range(8), tf.float32) * -0.5)[None, :]
        return tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)


class Wrapper(tf.keras.layers.Layer):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.norm = tf.keras.layers.LayerNormalization(epsilon=1e-6{norm_dtype})

    def call(self, x):
        return self.norm(x + self.layer(x))


class Encoder(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.position = PositionEmbedding()
        self.block = Wrapper(tf.keras.layers.Dense(16))
        self.dense = tf.keras.layers.Dense(16)

    def call(self, inputs):
        encoding = self.position(inputs)
        hidden = self.dense(inputs + encoding)
        queries = hidden
        out = self.block(hidden)
        return self.block(out + queries)
"""


@BOTH
def test_c36_c37_float32_layer_outputs_meet_float16_activations(keras):
    code = FLOAT32_OUTPUT_LAYERS.format(norm_dtype=', dtype="float32"')
    mixes = sorted((f.line, f.message.split("`")[1]) for f in findings(code, keras) if f.code == "MP206")
    assert mixes == [(30, "encoding"), (33, "out")]
    assert lint(code, keras).applied == 0


@BOTH
def test_c36_a_wrapper_around_a_policy_norm_outputs_the_compute_dtype(keras):
    code = FLOAT32_OUTPUT_LAYERS.format(norm_dtype="")
    assert [f.line for f in findings(code, keras) if f.code == "MP206"] == [30]


# -- C37 (tf_keras only): a float32 value passed as a later argument of a layer call is not autocast ---------------
# research detr_lib.py:236 (EncoderStack.call(encoder_inputs, training, encoding) gets the float32 position
# encoding); TF 2.21: tf_keras casts only `inputs` (InvalidArgumentError at `inputs + encoding`), Keras 3 casts
# every floating argument (runs).
ENCODER_WITH_ENCODING = """
import tensorflow as tf


class PositionEmbedding(tf.keras.layers.Layer):
    def call(self, inputs):
        position = tf.cast(tf.range(tf.shape(inputs)[1]), tf.float32)
        scaled = tf.expand_dims(position, 1) * tf.exp(tf.cast(tf.range(8), tf.float32) * -0.5)[None, :]
        return tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)


class Encoder(tf.keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(16)

    def call(self, inputs, training, encoding):
        return self.dense(inputs + encoding)


class Transformer(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.position = PositionEmbedding()
        self.encoder = Encoder()

    def call(self, inputs, training=None):
        encoding = self.position(inputs)
        return self.encoder(inputs, training, {encoding})
"""


@BOTH
def test_c37_a_float32_encoding_passed_to_a_layer_mixes_on_tf_keras_only(keras):
    code = ENCODER_WITH_ENCODING.format(encoding="encoding")
    mixes = [(f.line, f.message.split("`")[1]) for f in findings(code, keras) if f.code == "MP206"]
    assert mixes == ([(17, "encoding")] if keras == 2 else [])
    assert lint(code, keras).applied == 0


@BOTH
def test_c37_a_float16_encoding_passed_to_a_layer_is_no_mix(keras):
    code = ENCODER_WITH_ENCODING.format(encoding="tf.cast(encoding, self.compute_dtype)")
    assert [f for f in findings(code, keras) if f.code == "MP206"] == []


@BOTH
def test_c37_an_encoder_built_with_its_own_dtype_learns_nothing_from_its_callers(keras):
    # tfm gaussian_process.py: `LaplaceRandomFeatureCovariance(..., dtype=self.dtype)` is a float32 layer: its first
    # input is cast to float32 too, so a float32 later argument meets no float16 there.
    code = ENCODER_WITH_ENCODING.format(encoding="encoding").replace("Encoder()", 'Encoder(dtype="float32")')
    assert [f for f in findings(code, keras) if f.code == "MP206"] == []
