"""Turn 7: C33, float32 accumulators that meet a Keras model's float16 output outside any layer (issue 18).

research DELF ``global_model.py`` (N15, N16): module functions receive the model as a parameter ``net``, keep a
float32 ``descriptors = tf.zeros(...)`` and concatenate (or add) ``net(x)`` into it. Under mixed_float16 the
model returns float16 and ``tf.concat``/``+=`` raise (no implicit promotion). No caller in the file passes the
model: what decides ``net`` is what the function reads of it, ``net.meta``, an attribute only the project's
Keras model class assigns (structural typing, ``codemods/analysis/param_types.py``). Outside a layer no fix is
offered: ``self.compute_dtype`` does not exist there, and making the accumulator float16 moves the mix (and
float16 sums) downstream.
"""

from __future__ import annotations

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])


def found(code: str, keras: int = 3, select: str = "MP2") -> list[tuple[str, int]]:
    result = lint_snippet(code, select, keras=keras, policy="mixed_float16", fix=False, filename="global_model.py")
    return sorted((f.code, f.line) for f in result.findings)


def fixes(code: str, keras: int = 3) -> list:
    result = lint_snippet(code, "MP206", keras=keras, policy="mixed_float16", fix=False, filename="global_model.py")
    return [f for f in result.findings if f.fix is not None]


GLOBAL_MODEL = """
    import tensorflow as tf

    _OUTPUT_DIM = {"ResNet50": 2048, "ResNet101": 2048}


    class GlobalFeatureNet(BASE):
        def __init__(self, architecture="ResNet101", pooling="gem"):
            super().__init__()
            dim = _OUTPUT_DIM[architecture]
            self.feature_extractor = getattr(tf.keras.applications, architecture)(include_top=False, weights=None)
            self.pool = tf.keras.layers.GlobalAveragePooling2D()
            self.meta = {"architecture": architecture, "pooling": pooling, "outputdim": dim}

        def call(self, x, training=False):
            o = self.feature_extractor(x, training)
            return tf.math.l2_normalize(self.pool(o), axis=-1)


    def extract_global_descriptors_from_list(net, images, scales=(1,), multi_scale_power=3.0):
        loader = tf.data.Dataset.from_tensor_slices(images).batch(1)
        descriptors = tf.zeros((0, net.meta["outputdim"]))
        for i, image in enumerate(loader):
            if len(scales) == 1 and scales[0] == 1:
                descriptors = tf.concat([descriptors, net(image)], 0)
            else:
                descriptors = tf.concat([descriptors, extract_multi_scale_descriptor(
                    net, image, scales, multi_scale_power)], 0)
        return tf.transpose(descriptors, perm=[1, 0])


    def extract_multi_scale_descriptor(net, image, scales, multi_scale_power):
        descriptors = tf.zeros(net.meta["outputdim"])
        for s in scales:
            output_shape = s * tf.shape(image)[1:3].numpy()
            image_t = tf.image.resize(image, output_shape, method="bilinear")
            descriptors += tf.pow(net(image_t), multi_scale_power)
        descriptors /= len(scales)
        return descriptors / tf.norm(descriptors)
"""
CONCAT_LINE = 24  # descriptors = tf.concat([descriptors, net(image)], 0)
MULTI_LINE = 36  # descriptors += tf.pow(net(image_t), multi_scale_power)
KERAS2 = "tf.keras.Model"
KERAS3 = "keras.Model"


def model(base: str = KERAS2) -> str:
    code = GLOBAL_MODEL.replace("BASE", base)
    # Keras 3 spelling, same line numbers: `import keras` replaces the blank line after the imports.
    return code.replace("import tensorflow as tf\n\n", "import tensorflow as tf\n    import keras\n", 1) \
        if base == KERAS3 else code


@BOTH
def test_a_float32_accumulator_concatenated_with_the_model_output_is_a_mix(keras):
    """N15: ``tf.concat([descriptors, net(image)], 0)``, ``descriptors`` float32, ``net`` a GlobalFeatureNet."""
    code = model(KERAS2 if keras == 2 else KERAS3)
    assert ("MP206", CONCAT_LINE) in found(code, keras)


@BOTH
def test_a_float32_accumulator_added_to_the_model_output_is_a_mix(keras):
    """N16: ``descriptors += tf.pow(net(image_t), p)``."""
    code = model(KERAS2 if keras == 2 else KERAS3)
    assert ("MP206", MULTI_LINE) in found(code, keras)


def test_outside_a_layer_no_fix_is_offered():
    """``self.compute_dtype`` does not exist in a module function; float16 accumulators move the mix downstream."""
    assert found(model(), select="MP206") == [("MP206", CONCAT_LINE), ("MP206", MULTI_LINE)]
    assert fixes(model()) == []


def test_a_plain_class_with_the_same_attribute_is_no_model():
    """A non-Keras class assigning ``meta`` too: ``net.meta`` no longer says which class ``net`` is."""
    code = model() + """
    class DatasetInfo:
        def __init__(self, dim):
            self.meta = {"outputdim": dim}
"""
    assert [f for f in found(code, select="MP206")] == []


def test_a_parameter_read_only_through_a_plain_class_attribute_is_no_model():
    """``net.meta`` where only a plain (non-Keras) class assigns ``meta``: a callable object, not a model."""
    code = model().replace("class GlobalFeatureNet(tf.keras.Model)", "class GlobalFeatureNet(object)")
    assert found(code, select="MP206") == []


def test_an_attribute_no_project_class_assigns_proves_nothing():
    """``net.trainable_variables`` is every Keras layer's (and every tf.Module's): no class is named by it."""
    code = model().replace('net.meta["outputdim"]', "len(net.trainable_variables)")
    assert found(code, select="MP206") == []


def test_an_attribute_of_the_model_and_another_the_model_lacks_is_no_model():
    """Every project attribute the function reads must be the model's: ``net.vocab`` is nobody's here."""
    code = model().replace('tf.zeros((0, net.meta["outputdim"]))', 'tf.zeros((0, net.meta["outputdim"] + net.vocab))')
    code += """
    class Tokenizer:
        def __init__(self):
            self.vocab = {}
"""
    assert ("MP206", CONCAT_LINE) not in found(code, select="MP206")


def test_a_model_that_may_return_float32_is_not_taken_for_float16():
    """A model class spelling float32 (a float32 head) may return float32: no fact, no finding."""
    code = model().replace("return tf.math.l2_normalize(self.pool(o), axis=-1)",
                           "return tf.cast(tf.math.l2_normalize(self.pool(o), axis=-1), tf.float32)")
    assert found(code, select="MP206") == []


def test_a_parameter_the_function_rebinds_is_not_typed_by_its_reads():
    code = model().replace('    descriptors = tf.zeros((0, net.meta["outputdim"]))\n',
                           '    descriptors = tf.zeros((0, net.meta["outputdim"]))\n    net = tf.keras.Sequential()\n', 1)
    assert ("MP206", CONCAT_LINE + 1) not in found(code, select="MP206")


def test_an_accumulator_in_the_model_s_dtype_is_no_mix():
    """``tf.zeros(..., dtype=net.compute_dtype)``: both float16."""
    code = model().replace('tf.zeros((0, net.meta["outputdim"]))',
                           'tf.zeros((0, net.meta["outputdim"]), dtype=net.compute_dtype)')
    assert ("MP206", CONCAT_LINE) not in found(code, select="MP206")


def test_a_model_output_cast_to_float32_is_no_mix():
    code = model().replace("tf.concat([descriptors, net(image)], 0)",
                           "tf.concat([descriptors, tf.cast(net(image), tf.float32)], 0)")
    assert ("MP206", CONCAT_LINE) not in found(code, select="MP206")


def test_without_a_mixed_policy_nothing_is_reported():
    result = lint_snippet(model(), "MP206", keras=3, policy=None, fix=False, filename="global_model.py")
    assert result.findings == []


def test_the_prefilter_needs_a_layer_or_an_accumulator_as_well_as_a_float32_creator():
    """MP206's ``also_requires`` holds an any-of element: ``def call``, ``concat(`` or ``+=`` (a layer, or an
    accumulator), with a float32 trigger; the generated table reads it the same way (raw bytes)."""
    from mpfix.codemods import all_rules
    from mpfix.trigger_table import Table, _entry

    rule = next(r for r in all_rules() if r.code == "MP206")
    table = Table([_entry(rule)])
    texts = {
        "acc = tf.zeros((0, 8))\nacc = tf.concat([acc, net(x)], 0)\n": True,
        "acc = tf.zeros((8,))\nacc += net(x)\n": True,
        "class L(tf.keras.layers.Layer):\n    def call(self, x):\n        return x * tf.ones(3)\n": True,
        "acc = tf.zeros((8,))\nreturn acc * net(x)\n": False,  # no layer, no accumulation
        "acc = tf.concat([acc, net(x)], 0)\n": False,  # no float32 trigger
    }
    for text, expected in texts.items():
        assert rule.may_match(text) is expected, text
        assert rule.may_match(text.encode()) is expected, text
        assert table.matches("MP206", text.encode()) is expected, text
