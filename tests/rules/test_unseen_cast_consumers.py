"""MP205: a model whose every output in a training step goes to a same-file function (or a same-file layer's
``call``) that casts that parameter to float32 before any other use feeds no loss in float16: its head is not
a float16 model output. Wave 5 of the held-out scripts, correct scripts that MP205 flagged before:
``ops_numerics_k3_ok.py`` (``mdn_nll(y, model(x))`` with ``params = ops.cast(params, "float32")`` first) and
``clip_k3_ok.py`` (two towers handed to a contrastive layer that casts both embeddings first). The cast-first
test of the parameter is the same as for ``tf.cast(model(x), tf.float32)`` at the call: every read of the
parameter before it is rebound is the first argument of a float32 cast; anything else (a read in float16, a
cast only on one branch) keeps the finding."""

from __future__ import annotations

import textwrap

import pytest

from mpfix.testing import lint_snippet

BOTH = pytest.mark.parametrize("keras", [2, 3])
_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

LOSS_FN = """
    import numpy as np
    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")


    def mdn_nll(y, params):
    {body}
        logits, mu, raw_sigma = tf.split(params, 3, axis=-1)
        sigma = tf.nn.softplus(raw_sigma) + 1e-6
        log_prob = -0.5 * tf.square((y - mu) / sigma) - tf.math.log(sigma)
        return -tf.reduce_mean(tf.reduce_logsumexp(tf.nn.log_softmax(logits) + log_prob, axis=-1))


    inputs = keras.Input((8,))
    h = keras.layers.Dense(128, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(15)(h))
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam(1e-3))


    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = mdn_nll(y, model(x, training=True))
"""

CAST_FIRST = '    params = tf.cast(params, "float32")'
FLOAT16_FIRST = '    params = tf.cast(params * 2.0, "float32")'
ONE_BRANCH = '    if y.shape[-1] == 1:\n            params = tf.cast(params, tf.float32)'

LAYER = """
    import math

    import tensorflow as tf
    {import_keras}

    keras.mixed_precision.set_global_policy("mixed_float16")


    class ContrastiveHead(keras.layers.Layer):
        def call(self, image_emb, text_emb):
            image_emb = tf.math.l2_normalize(tf.cast(image_emb, tf.float32), axis=-1)
            text_emb = tf.math.l2_normalize({text}, axis=-1)
            return 14.0 * tf.matmul(image_emb, text_emb, transpose_b=True)


    image_tower = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(64)])
    text_tower = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(64)])
    head = ContrastiveHead()


    @tf.function
    def train_step(images, tokens):
        with tf.GradientTape() as tape:
            logits = head(image_tower(images, training=True), text_tower(tokens, training=True))
"""


def line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(code).lstrip("\n").splitlines(), 1) if text in line)


def mp205_lines(code: str, keras: int) -> list[int]:
    result = lint_snippet(code, "MP205", keras=keras, policy=None, filename="train.py")
    return [f.line for f in result.findings]


@BOTH
def test_loss_function_casting_its_parameter_first(keras):
    assert mp205_lines(LOSS_FN.format(import_keras=_IMPORT[keras], body=CAST_FIRST), keras) == []


@BOTH
@pytest.mark.parametrize("body", [FLOAT16_FIRST, ONE_BRANCH, "    pass"])
def test_loss_function_reading_its_parameter_in_float16(keras, body):
    code = LOSS_FN.format(import_keras=_IMPORT[keras], body=body)
    assert mp205_lines(code, keras) == [line_of(code, "keras.layers.Dense(15)")]


@BOTH
def test_layer_casting_both_inputs_first(keras):
    code = LAYER.format(import_keras=_IMPORT[keras], text="tf.cast(text_emb, tf.float32)")
    assert mp205_lines(code, keras) == []


@BOTH
def test_layer_casting_one_input_only(keras):
    code = LAYER.format(import_keras=_IMPORT[keras], text="text_emb")
    assert mp205_lines(code, keras) == [line_of(code, "text_tower = ")]
