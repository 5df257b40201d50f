"""Classes found missing (or wrongly reported) on wave 11 of ``benchmarks/unseen`` (turn 15, scored before tuning).

1. onepass_layernorm_k3.py: a Keras 3 one-pass layer norm computes ``variance = mean(x**2) - mean(x)**2`` on
   float16 activations (raw ~180 kW readings). Both terms are ~32400, where float16's spacing is 32, so the
   difference is a multiple of 32 and often negative: ``rsqrt`` of it is NaN. Ran, TF 2.21 CPU: loss nan every
   epoch; the centred form ``mean(square(x - mean))``: 0.087 -> 0.042. Missed: the fact missing is that a
   difference of two float16 moments cancels (a variance must be centred before it is squared, or computed in
   float32). Reported by MP203 without a fix (the centred form changes the call's arguments).
2. welford_norm_k3.py: a Keras 3 running observation normaliser keeps count/mean/m2 as ``add_weight`` variables
   and updates them in ``call`` (``self.count.assign(self.count + n)``). Inside ``call`` the variables are read
   as float16 (autocast, both generations), so the running total passes 65504 after a few hundred batches'
   samples: inf, then NaN. Ran: loss nan every epoch; ``autocast=False`` and a float32 update: 0.039 -> 0.019.
   Missed: the fact missing is that a weight updated as ``itself + a non-negative amount`` grows across calls
   without bound, and read as float16 it overflows. Reported by MP203 without a fix (the weight's creation and
   every read change). A running mean (``mean + delta * n / total``: delta of either sign) and an EMA
   (``v * m + x * (1 - m)``) are bounded and stay silent, as does the same layer built with ``dtype="float32"``.
3. store_id_embed_k2.py: a tf_keras layer splits a store-id column (0..5999) off a float feature matrix and embeds
   it (``tf.cast(features[:, 0], tf.int32)`` into an ``Embedding``). The layer's float input is autocast to
   float16, where integers past 2048 are not exact: ids collide, and 5998/5999 round to 6000. Ran:
   InvalidArgumentError 'indices[140] = 6000 is not in [0, 6000)' in the first epoch; the layer (and its
   Embedding) built with dtype float32: 0.0122 -> 0.0096. Missed: the fact missing is that an id-reading layer
   (``keras_layers.READS_IDS``: Keras' own Embedding turns autocast off for this reason) fed a column of a float16
   input receives rounded ids. New rule MP209 (report only). A whole parameter handed to the Embedding (an int
   Input the caller passes: store_id_embed_k3_ok) is left alone.
4. focal_clip_k2.py: a tf_keras focal Loss subclass clips the float16 sigmoid output to
   ``[epsilon, 1.0 - epsilon]`` with ``epsilon = keras.backend.epsilon()`` (1e-7). float16's spacing below 1 is
   4.9e-4, so ``1.0 - 1e-7`` is 1.0: the clip leaves saturated probabilities at 1 and ``log(1 - p)`` is -inf,
   NaN once multiplied by ``1 - y = 0``. Ran: loss nan from epoch 1; y_pred cast to float32 first: 0.217 -> 0.184.
   Found at untuned only through MP205 (the float16 head); the clip itself, the root cause, was silent: the fact
   missing is that ``1 - eps`` for eps <= 2**-12 rounds to 1 in float16. MP202 reports it (no fix) when the clipped
   tensor is float16; a Keras 3 Loss subclass (y_pred cast to float32 by Loss.__call__) stays silent."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mpfix.codemods import all_rules
from mpfix.engine import Engine, Options

MP2 = tuple(r for r in all_rules() if r.code.startswith("MP2"))


def lint(code: str, keras: str = "3", rules=MP2):
    code = textwrap.dedent(code).lstrip("\n")
    compile(code, "train.py", "exec")
    return Engine(rules, Options(keras=keras, project_policy=False)).lint(code, Path("train.py")).findings


def rows(findings, code: str) -> list[int]:
    return sorted(f.line for f in findings if f.code == code)


ONEPASS_K3 = """
    import keras
    from keras import ops


    class OnePassLayerNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.gamma = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            mean = ops.mean(x, axis=-1, keepdims=True)
            mean_sq = ops.mean(ops.square(x), axis=-1, keepdims=True)
            variance = {variance}
            return (x - mean) * ops.rsqrt(variance + 1e-3) * self.gamma


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((96,)), OnePassLayerNorm(), keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""

ONEPASS_K2 = """
    import tensorflow as tf
    import tf_keras as keras


    class OnePassNorm(keras.layers.Layer):
        def call(self, x):
            mean = tf.reduce_mean(x, axis=-1, keepdims=True)
            variance = {variance}
            return (x - mean) * tf.math.rsqrt(variance + 1e-3)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((96,)), keras.layers.Dense(96), OnePassNorm(),
                                  keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""


def test_one_pass_variance_of_float16_activations_is_reported_keras3():
    found = lint(ONEPASS_K3.format(variance="mean_sq - ops.square(mean)"))
    assert rows(found, "MP203") == [12]
    finding = next(f for f in found if f.code == "MP203")
    assert "cancel" in finding.message and finding.fix is None


def test_one_pass_variance_spelled_inline_and_with_powers_is_reported_keras2():
    code = ONEPASS_K2.format(variance="tf.reduce_mean(x * x, axis=-1, keepdims=True) - mean ** 2")
    found = lint(code, keras="2")
    # one report (the cancellation), not a second one for the mean of squares on the same line
    assert rows(found, "MP203") == [8]
    finding = next(f for f in found if f.code == "MP203")
    assert "cancel" in finding.message and finding.fix is None


def test_centred_variance_is_not_a_cancellation():
    found = lint(ONEPASS_K3.format(variance="ops.mean(ops.square(x - mean), axis=-1, keepdims=True)"))
    assert not any("cancel" in f.message for f in found)


def test_one_pass_variance_in_float32_is_silent():
    code = ONEPASS_K3.format(variance="mean_sq - ops.square(mean)").replace(
        "OnePassLayerNorm(), keras", 'OnePassLayerNorm(dtype="float32"), keras')
    assert rows(lint(code), "MP203") == []


def test_difference_of_unrelated_moments_is_not_a_cancellation():
    # E[x²] - E[y]²: not one variable's variance
    code = ONEPASS_K3.format(variance="mean_sq - ops.square(ops.mean(self.gamma))")
    assert not any("cancel" in f.message for f in lint(code))


WELFORD_K3 = """
    import keras
    from keras import ops


    class RunningNormalizer(keras.layers.Layer):
        def build(self, input_shape):
            self.count = self.add_weight(shape=(), initializer="zeros", trainable=False{autocast})
            self.mean = self.add_weight(shape=(input_shape[-1],), initializer="zeros", trainable=False{autocast})
            self.m2 = self.add_weight(shape=(input_shape[-1],), initializer="zeros", trainable=False{autocast})

        def call(self, x, training=False):
            if training:
                n = ops.cast(ops.shape(x)[0], x.dtype)
                batch_mean = ops.mean(x, axis=0)
                batch_m2 = ops.sum(ops.square(x - batch_mean), axis=0)
                total = self.count + n
                delta = batch_mean - self.mean
                self.mean.assign(self.mean + delta * n / total)
                self.m2.assign(self.m2 + batch_m2 + ops.square(delta) * self.count * n / total)
                self.count.assign(total)
            return (x - self.mean) / ops.sqrt(self.m2 / ops.maximum(self.count, 1.0) + 1e-2)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((15,)), RunningNormalizer({layer_dtype}), keras.layers.Dense(3, dtype="float32")])
        model.compile("adam", "mse")
"""

WELFORD_K2 = """
    import tensorflow as tf
    import tf_keras as keras


    class RunningNormalizer(keras.layers.Layer):
        def build(self, input_shape):
            self.count = self.add_weight("count", shape=(), initializer="zeros", trainable=False)
            self.total = self.add_weight("total", shape=(input_shape[-1],), initializer="zeros", trainable=False)

        def call(self, x, training=None):
            if training:
                self.count.assign(self.count + tf.cast(tf.shape(x)[0], x.dtype))
                self.total.assign(self.total + tf.reduce_sum(x, axis=0))
            return x - self.total / tf.maximum(self.count, 1.0)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((9,)), RunningNormalizer({layer_dtype}), keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""

EMA_K3 = """
    import keras
    from keras import ops


    class EmaNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.moving_mean = self.add_weight(shape=(input_shape[-1],), initializer="zeros", trainable=False)

        def call(self, x, training=False):
            if training:
                self.moving_mean.assign(self.moving_mean * 0.99 + ops.mean(x, axis=0) * 0.01)
            return x - self.moving_mean


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((9,)), EmaNorm(), keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""


def running(findings) -> list[int]:
    return sorted(f.line for f in findings if f.code == "MP203" and "running total" in f.message)


def test_running_count_and_sum_of_squares_read_as_float16_are_reported_keras3():
    found = lint(WELFORD_K3.format(autocast="", layer_dtype=""))
    assert running(found) == [16, 19]  # count + n, m2 + batch_m2; not the running mean (delta of either sign)
    assert all(f.fix is None for f in found if "running total" in f.message)
    assert "self.count" in next(f for f in found if f.line == 16 and "running total" in f.message).message


def test_running_count_and_total_are_reported_keras2():
    found = lint(WELFORD_K2.format(layer_dtype=""), keras="2")
    assert running(found) == [12]  # the count; the sum of x may be negative
    finding = next(f for f in found if "running total" in f.message)
    assert "experimental_autocast=False" in finding.message


def test_running_state_kept_in_float32_is_silent():
    assert running(lint(WELFORD_K3.format(autocast=", autocast=False", layer_dtype=""))) == []
    assert running(lint(WELFORD_K3.format(autocast="", layer_dtype='dtype="float32"'))) == []
    assert running(lint(WELFORD_K2.format(layer_dtype='dtype="float32"'), keras="2")) == []


def test_moving_average_is_bounded_and_silent():
    assert running(lint(EMA_K3)) == []


PACKED_K2 = """
    import tensorflow as tf
    import tf_keras as keras


    class StoreFeatures(keras.layers.Layer):
        def __init__(self, n_stores, dim, **kwargs):
            super().__init__(**kwargs)
            self.embed = keras.layers.Embedding(n_stores, dim)

        def call(self, features):
            store = tf.cast(features[:, 0], tf.int32)
            return tf.concat([self.embed(store), features[:, 1:]], axis=-1)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), StoreFeatures(6000, 8{layer_dtype}), keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""

PACKED_K3 = """
    import keras
    from keras import ops


    class UserFeatures(keras.layers.Layer):
        def __init__(self, n_users, dim, **kwargs):
            super().__init__(**kwargs)
            self.users = keras.layers.Embedding(n_users, dim)

        def call(self, inputs):
            return ops.concatenate([self.users(ops.cast(inputs[:, 0], "int32")), inputs[:, 1:]], axis=-1)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((6,)), UserFeatures(50000, 16), keras.layers.Dense(1, dtype="float32")])
        model.compile("adam", "mse")
"""

INT_INPUT_K3 = """
    import keras
    from keras import ops


    class AppFeatures(keras.layers.Layer):
        def __init__(self, n_apps, dim, **kwargs):
            super().__init__(**kwargs)
            self.embed = keras.layers.Embedding(n_apps, dim)

        def call(self, app_id, dense):
            return ops.concatenate([self.embed(ops.cast(app_id, "int32")), dense], axis=-1)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        app_in, dense_in = keras.Input((), dtype="int32"), keras.Input((2,))
        out = keras.layers.Dense(1, dtype="float32")(AppFeatures(6000, 8)(app_in, dense_in))
        keras.Model([app_in, dense_in], out).compile("adam", "mse")
"""


def test_ids_cut_from_a_float16_layer_input_are_reported_keras2():
    found = [f for f in lint(PACKED_K2.format(layer_dtype=""), keras="2") if f.code == "MP209"]
    assert [f.line for f in found] == [11]
    assert "2048" in found[0].message and found[0].fix is None


def test_ids_cut_from_a_float16_layer_input_are_reported_keras3():
    found = [f for f in lint(PACKED_K3) if f.code == "MP209"]
    assert [f.line for f in found] == [11]


def test_ids_in_a_float32_layer_are_silent():
    assert [f for f in lint(PACKED_K2.format(layer_dtype=', dtype="float32"'), keras="2") if f.code == "MP209"] == []


def test_a_whole_parameter_handed_to_the_embedding_is_silent():
    assert [f for f in lint(INT_INPUT_K3) if f.code == "MP209"] == []


def test_a_column_handed_over_without_a_cast_is_silent():
    # a model fitted on int id pairs (benchmarks/unseen/minimize_train_step_k2_ok.py): no cast, maybe no float at all
    code = PACKED_K2.format(layer_dtype="").replace("tf.cast(features[:, 0], tf.int32)", "features[:, 0]")
    assert [f for f in lint(code, keras="2") if f.code == "MP209"] == []


FOCAL_K2 = """
    import tensorflow as tf
    import tf_keras as keras


    class BinaryFocalLoss(keras.losses.Loss):
        def call(self, y_true, y_pred):
            y_true = tf.cast(y_true, y_pred.dtype)
            epsilon = keras.backend.epsilon()
            p = tf.clip_by_value(y_pred, epsilon, {upper})
            return -tf.reduce_mean(y_true * tf.math.log(p) + (1.0 - y_true) * tf.math.log(1.0 - p), axis=-1)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", BinaryFocalLoss())
"""

FOCAL_K3 = """
    import keras
    from keras import ops


    class BinaryFocalLoss(keras.losses.Loss):
        def call(self, y_true, y_pred):
            p = ops.clip(y_pred, 1e-7, 1.0 - 1e-7)
            return -ops.mean(y_true * ops.log(p) + (1.0 - y_true) * ops.log(1.0 - p), axis=-1)


    def main():
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", BinaryFocalLoss())
"""


def near_one(findings) -> list[int]:
    return sorted(f.line for f in findings if f.code == "MP202" and "1.0 in float16" in f.message)


def test_upper_clip_bound_rounding_to_one_is_reported_keras2():
    found = lint(FOCAL_K2.format(upper="1.0 - epsilon"), keras="2")
    assert near_one(found) == [9]
    assert all(f.fix is None for f in found if f.code == "MP202" and f.line == 9)
    assert near_one(lint(FOCAL_K2.format(upper="1 - 1e-7"), keras="2")) == [9]


def test_upper_clip_bound_float16_can_hold_is_silent():
    assert near_one(lint(FOCAL_K2.format(upper="1.0 - 1e-3"), keras="2")) == []


def test_keras3_loss_class_clips_float32_predictions():
    assert near_one(lint(FOCAL_K3)) == []
