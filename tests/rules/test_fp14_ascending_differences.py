"""Held-out benchmarks/unseen/nerf_render_k2.py:43 (wave 14): NeRF's quadrature ``exp(-relu(raw) * dists)`` with
``dists`` the gaps between sample depths ``t[1:] - t[:-1]`` of a ``linspace(NEAR, FAR, n)`` (then widened by a concat
and scaled by a norm). MP204 reported the exp as a float16 overflow. The facts missing: the differences of an
ascending sequence (``linspace`` with start <= stop, ``range`` with a positive step, ``sort``; through a cast, which
rounds monotonically) are >= 0; a concat of values >= 0 is >= 0; and a name every binding of which is >= 0 (one that
reads the name itself, ``d = d * norm(v)``, by induction) is >= 0. So ``-relu(raw) * dists`` <= 0 and its exp <= 1.
"""

from __future__ import annotations

import textwrap

from mpfix.testing import lint_snippet


def codes(code: str, keras: str) -> list[tuple[str, int]]:
    compile(textwrap.dedent(code).lstrip("\n"), "train.py", "exec")
    result = lint_snippet(code, ("MP2",), keras=keras, filename="train.py")
    return sorted((f.code, f.line) for f in result.findings if f.code == "MP204")


K2_RENDERER = """
    import os

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    NEAR, FAR = 2.0, 6.0


    class Renderer(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.mlp = keras.layers.Dense(4)

        def call(self, rays):
            origins, dirs = rays[:, :3], rays[:, 3:]
            t = tf.cast({depths}, origins.dtype)
            raw = self.mlp(origins[:, None, :] + dirs[:, None, :] * t[None, :, None])
            sigma = tf.nn.relu(raw[..., 3])
            dists = tf.broadcast_to({gaps}, tf.shape(sigma[:, 1:]))
            dists = tf.concat([dists, 1e3 * tf.ones_like(sigma[:, :1])], axis=-1)
            dists = dists * tf.norm(dirs, axis=-1, keepdims=True)
            alpha = 1.0 - tf.exp({exponent})
            return tf.reduce_sum(alpha, axis=-1)
"""

K3_RENDERER = """
    import keras
    from keras import ops

    keras.mixed_precision.set_global_policy("mixed_float16")


    class Renderer(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.mlp = keras.layers.Dense(4)

        def call(self, rays, depths):
            z = {depths}
            raw = self.mlp(rays[:, None, :] * z[..., None])
            sigma = ops.softplus(raw[..., 3])
            delta = {gaps}
            return 1.0 - ops.exp({exponent})
"""


def k2(depths="tf.linspace(NEAR, FAR, 48)", gaps="t[1:] - t[:-1]", exponent="-sigma * dists"):
    return codes(K2_RENDERER.format(depths=depths, gaps=gaps, exponent=exponent), "2")


def k3(depths="ops.sort(depths, axis=-1)", gaps="z[..., 1:] - z[..., :-1]", exponent="-sigma * delta"):
    return codes(K3_RENDERER.format(depths=depths, gaps=gaps, exponent=exponent), "3")


def test_tf_keras_gaps_of_a_linspace_are_nonnegative():
    assert k2() == []
    assert k2(depths="tf.range(2.0, 6.0, 0.1)") == []  # a positive step
    assert k2(depths="tf.linspace(0.0, 1.0, 48) * 4.0 + NEAR") == []  # scaled by a factor >= 0, shifted
    assert k2(gaps="t[2:] - t[:-2]") == []


def test_tf_keras_controls_still_reported():
    assert k2(gaps="t[:-1] - t[1:]") == [("MP204", 24)]  # the gaps the other way round are <= 0
    assert k2(depths="tf.linspace(FAR, NEAR, 48)") == [("MP204", 24)]  # a descending linspace
    assert k2(depths="tf.range(6.0, 2.0, -0.1)") == [("MP204", 24)]  # a negative step
    assert k2(depths="tf.linspace(0.0, 1.0, 48) * -4.0") == [("MP204", 24)]  # a negative factor reverses it
    assert k2(exponent="sigma * dists") == [("MP204", 24)]  # an unbounded positive product
    assert k2(gaps="t[1:] - t[:-2]") == [("MP204", 24)]  # not the same shift


def test_keras3_gaps_of_sorted_depths_are_nonnegative():
    assert k3() == []
    assert k3(depths="ops.sort(depths)") == []  # the last axis by default


def test_keras3_controls_still_reported():
    assert k3(depths="depths") == [("MP204", 17)]  # unsorted depths: the gaps have either sign
    assert k3(depths="ops.sort(depths, axis=0)") == [("MP204", 17)]  # sorted along another axis
    assert k3(gaps="z[1:] - z[:-1]") == [("MP204", 17)]  # the first axis of a sorted batch: any sign
    assert k3(exponent="sigma * delta") == [("MP204", 17)]
