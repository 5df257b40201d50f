"""A run that crashed on a float16/float32 mix: the error read (TF 2.21's own messages, as
measured on CPU in traced and eager code), and the casts repair tries at the crash's line.
No TensorFlow: the messages are TF's text; tests/verify/test_repair.py runs the real thing."""

from __future__ import annotations

import pytest

from mpfix.verify import mix_crash
from mpfix.verify.mix_crash import Mix


@pytest.mark.parametrize("message, expected", [
    ("Input 'y' of 'AddV2' Op has type float16 that does not match type float32 of argument 'x'.", Mix("AddV2", 1)),
    ("Input 'y' of 'AddV2' Op has type float32 that does not match type float16 of argument 'x'.", Mix("AddV2", 0)),
    ("Input 'b' of 'MatMul' Op has type float32 that does not match type float16 of argument 'a'.", Mix("MatMul", 0)),
    ("cannot compute AddV2 as input #1(zero-based) was expected to be a float tensor but is a half tensor [Op:AddV2] "
     "name: ", Mix("AddV2", 1)),
    ("cannot compute Mul as input #1(zero-based) was expected to be a half tensor but is a float tensor [Op:Mul]",
     Mix("Mul", 0)),
    ("`x` and `y` must have the same dtype, got tf.float32 != tf.float16.", Mix("RealDiv", 1)),
    ("Input 'e' of 'SelectV2' Op has type float16 that does not match type float32 of argument 't'.", None),
    ("Input 'y' of 'AddV2' Op has type int32 that does not match type float32 of argument 'x'.", None),
    ("Tensors in list passed to 'values' of 'ConcatV2' Op have types [float32, float16, float32] that don't all "
     "match.", Mix("ConcatV2", 1, (False, True, False))),
    ("cannot compute ConcatV2 as input #1(zero-based) was expected to be a half tensor but is a float tensor "
     "[Op:ConcatV2] name: concat", Mix("ConcatV2", 0, (True, False))),
    ("cannot compute Pack as input #1(zero-based) was expected to be a float tensor but is a half tensor [Op:Pack] "
     "name: stack", Mix("Pack", 1, (False, True))),
    ("cannot compute ConcatV2 as input #2(zero-based) was expected to be a float tensor but is a half tensor", None),
    ("Tensors in list passed to 'values' of 'ConcatV2' Op have types [int32, float32] that don't all match.", None),
    ("division by zero", None),
])
def test_the_error_names_the_op_and_its_float16_side(message, expected):
    assert mix_crash.read(message) == expected


LOSS = (
    "import tensorflow as tf\n"
    "def energy_loss(y, pred, feats):\n"
    "    reg = tf.reduce_mean(tf.exp(feats))\n"
    "    return tf.reduce_mean(tf.square(y - pred)) + 1e-6 * reg\n"
)


def test_the_float16_term_of_a_loss_is_cast_to_float32_at_its_tensor():
    mix = Mix("AddV2", 1)
    assert mix_crash.sites(LOSS, 4, mix) == [mix_crash.Site("reg", "tf.reduce_mean(tf.square(y - pred))")]
    out = mix_crash.cast_at(LOSS, 4, mix, 0, upcast=True)
    assert out.splitlines()[3] == "    return tf.reduce_mean(tf.square(y - pred)) + 1e-6 * tf.cast(reg, tf.float32)"
    down = mix_crash.cast_at(LOSS, 4, mix, 0, upcast=False)
    assert down.splitlines()[3] == "    return tf.cast(tf.reduce_mean(tf.square(y - pred)), reg.dtype) + 1e-6 * reg"
    assert not mix_crash.sites(LOSS, 4, mix)[0].in_method


def test_in_a_layer_the_float32_operand_goes_to_the_compute_dtype():
    text = (
        "import tensorflow as tf\n"
        "class Scale(tf.keras.layers.Layer):\n"
        "    def call(self, x):\n"
        "        return x * tf.math.sqrt(tf.cast(tf.shape(x)[-1], tf.float32))\n"
    )
    mix = mix_crash.read("Input 'y' of 'Mul' Op has type float32 that does not match type float16 of argument 'x'.")
    assert mix_crash.sites(text, 4, mix)[0].in_method
    out = mix_crash.cast_at(text, 4, mix, 0, upcast=False)
    assert out.splitlines()[3].strip() == (
        "return x * tf.cast(tf.math.sqrt(tf.cast(tf.shape(x)[-1], tf.float32)), self.compute_dtype)")
    compile(out, "<fixed>", "exec")


def test_a_function_spelling_and_the_operand_order_of_the_error():
    text = "import tensorflow as tf\ndef f(h, w):\n    return tf.matmul(h, w)\n"
    mix = Mix("MatMul", 0)
    assert mix_crash.sites(text, 3, mix) == [mix_crash.Site("h", "w")]
    assert "tf.matmul(tf.cast(h, tf.float32), w)" in mix_crash.cast_at(text, 3, mix, 0, upcast=True)


def test_no_site_when_the_line_does_not_spell_the_op_or_an_operand_is_a_number():
    mix = Mix("AddV2", 1)
    assert mix_crash.sites("def f(x):\n    return x * 2\n", 2, mix) == []
    assert mix_crash.sites("def f(x):\n    return x + 2.0\n", 2, mix) == []
    assert mix_crash.cast_at("def f(x):\n    return x + 2.0\n", 2, mix, 0, upcast=True) is None
    assert mix_crash.cast_at("def f(:\n", 1, mix, 0, upcast=True) is None


def test_a_concat_of_a_float32_accumulator_and_float16_features():
    # research/delf's shape (issue 18's N15-N21): a float32 tf.zeros accumulator concatenated with
    # the model's float16 output.
    text = ("import tensorflow as tf\n"
            "def extract(model, images):\n"
            "    descriptors = tf.zeros((0, 128), tf.float32)\n"
            "    for image in images:\n"
            "        descriptors = tf.concat([descriptors, model(image)], axis=0)\n"
            "    return descriptors\n")
    mix = mix_crash.read("Tensors in list passed to 'values' of 'ConcatV2' Op have types [float32, float16] that "
                         "don't all match.")
    assert mix_crash.sites(text, 5, mix) == [mix_crash.Site("model(image)", "descriptors")]
    up = mix_crash.cast_at(text, 5, mix, 0, upcast=True)
    assert up.splitlines()[4].strip() == "descriptors = tf.concat([descriptors, tf.cast(model(image), tf.float32)], axis=0)"
    # Downcast needs a named float16 operand (or a layer method) for the dtype: none here.
    assert mix_crash.cast_at(text, 5, mix, 0, upcast=False) is None
    assert mix_crash.sites(text.replace("[descriptors, model(image)]", "parts"), 5, mix) == []


def test_a_float16_value_assigned_into_a_float32_variable_is_cast_not_the_variable():
    # wave 7's custom_metric_k2.py (tf_keras, TF 2.21): a Metric's float32 state takes a float16 sum.
    message = ("ValueError: Tensor conversion requested dtype float32 for Tensor with dtype float16: "
               "<tf.Tensor 'Sum_5:0' shape=() dtype=float16>")
    mix = mix_crash.read(message)
    assert mix == Mix("Assign", 0)
    assert mix_crash.read(message.replace("dtype float32 for", "dtype int32 for")) is None
    text = ("import tensorflow as tf\nclass M:\n    def update_state(self, err):\n"
            "        self.total.assign_add(tf.reduce_sum(err))\n")
    assert [(s.float16, s.float32) for s in mix_crash.sites(text, 4, mix)] == [("tf.reduce_sum(err)", "self.total")]
    up = mix_crash.cast_at(text, 4, mix, 0, upcast=True)
    assert up.splitlines()[3] == "        self.total.assign_add(tf.cast(tf.reduce_sum(err), tf.float32))"
    assert mix_crash.cast_at(text, 4, mix, 0, upcast=False) is None  # never the variable itself
