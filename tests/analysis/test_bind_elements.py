"""A name a tuple unpacking binds reads every unpacking that binds it, as the binding model does (``Bindings``
keeps one ``Binding`` per statement): the region's name table joins the element of each one (before, every
``ELEMENT`` of the name read the first unpacking's source, so ``mean, variance = tf.nn.moments(x)`` in one branch
and ``mean, variance = <float32 statistics>`` in the other was float16, or float32, by source order alone).

A parameter every caller passes a bool, an int or a Python number is not a float16 tensor (tf_keras
``BatchNormalization._moments(..., keep_dims=keep_dims)`` with ``keep_dims = ... is not None or len(...) > 1``:
the helper's parameter was float16 by default, and its float16 entered what the helper computes).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.dtype_lattice import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for

_IMPORT = {3: "import keras", 2: "import tf_keras as keras"}

NORM = """
    import tensorflow as tf
    {import_keras}


    class RunningNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.stats = self.add_weight(shape=(2, input_shape[-1]), initializer="zeros", trainable=False)

        def call(self, inputs, training=False):
            if {first}:
                mean, variance = tf.nn.moments(inputs, axes=[0])
            else:
                mean, variance = tf.unstack(tf.cast(self.stats, tf.float32))
            for _ in range(2):
                inputs = (inputs - mean) * tf.math.rsqrt(variance + 1e-3)
            return inputs
"""


def _region(code: str, keras: int, name: str):
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    analysis = facts_for(module, keras)._a
    return next(r for r in analysis.regions if r.name == name)


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("first", ["training", "not training"])
def test_a_name_unpacked_twice_joins_both_unpackings(keras, first):
    # float16 moments of the autocast inputs on one branch, float32 statistics on the other: whichever comes
    # first in the source, the name table says unknown (the join of float16 and float32), never one of the two.
    region = _region(NORM.format(import_keras=_IMPORT[keras], first=first), keras, "call")
    assert region.env["mean"] is Dtype.UNKNOWN
    assert region.env["variance"] is Dtype.UNKNOWN


FLOAT32_BOTH = """
    import tensorflow as tf
    {import_keras}


    class RunningNorm(keras.layers.Layer):
        def call(self, inputs, training=False):
            if training:
                mean, variance = tf.nn.moments(tf.cast(inputs, tf.float32), axes=[0])
            else:
                mean, variance = tf.unstack(tf.cast(self.stats, tf.float32))
            return tf.cast((tf.cast(inputs, tf.float32) - mean) * tf.math.rsqrt(variance + 1e-3), inputs.dtype)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_unpackings_that_agree_keep_their_dtype(keras):
    region = _region(FLOAT32_BOTH.format(import_keras=_IMPORT[keras]), keras, "call")
    assert region.env["mean"] is Dtype.FLOAT32 and region.env["variance"] is Dtype.FLOAT32


MOMENTS = """
    import tensorflow as tf
    {import_keras}


    class GhostNorm(keras.layers.Layer):
        def call(self, inputs):
            keep_dims = self.virtual_batch_size is not None or len(self.axis) > 1
            count = tf.shape(inputs)[0]
            mean, variance = self._moments(tf.cast(inputs, tf.float32), keep_dims=keep_dims, count=count)
            return tf.cast((tf.cast(inputs, tf.float32) - mean) * tf.math.rsqrt(variance + 1e-3), inputs.dtype)

        def _moments(self, x, keep_dims, count):
            mean = tf.reduce_mean(x, axis=self.axis, keepdims=keep_dims)
            variance = tf.reduce_mean(tf.square(x - mean), axis=self.axis, keepdims=keep_dims)
            return mean, variance * tf.cast(count, x.dtype) / tf.cast(count - 1, x.dtype)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_a_parameter_every_caller_passes_a_bool_or_an_int_is_not_float16(keras):
    region = _region(MOMENTS.format(import_keras=_IMPORT[keras]), keras, "_moments")
    assert region.env["keep_dims"] is Dtype.BOOL
    assert region.env["count"] is Dtype.INT
    assert region.env["x"] is Dtype.FLOAT32 and region.env["variance"] is Dtype.FLOAT32


CALLBACK = """
    import tensorflow as tf
    {import_keras}


    def fit_with_probe(model, dataset, epochs):
        probe_called = False
        best = tf.constant(float("inf"))

        class Probe(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                nonlocal probe_called, best
                probe_called = True
                best = tf.minimum(best, tf.cast(logs["loss"], tf.float32))

        model.fit(dataset, epochs=epochs, callbacks=[Probe()])
        return probe_called, best
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_nonlocal_in_a_method_of_a_nested_class_binds_the_enclosing_function(keras):
    # `Bindings` sends a `nonlocal` name's bindings to the enclosing function; its table holds them too (before, the
    # nested class was skipped whole and `probe_called` had one value: tfm seq2seq_transformer_test.py).
    from mpfix.codemods.analysis.bindings import Bindings, BindingKind
    from mpfix.codemods.analysis.gradient_syntax import _scopes
    from mpfix.codemods.analysis.dtype_tables import own

    code = textwrap.dedent(CALLBACK.format(import_keras=_IMPORT[keras])).lstrip("\n")
    module = cst.parse_module(code)
    analysis = facts_for(module, keras)._a
    func = next(n for n in module.body if isinstance(n, cst.FunctionDef))
    region = analysis.region_for(func)
    scopes = _scopes(module)
    names = Bindings(scopes).of(next(s for s in scopes if s.node is func)).names
    for name in ("probe_called", "best"):
        bound = [b for b in names[name] if b.kind is not BindingKind.PARAMETER]
        assert len(own(region.assigned)[name]) == len(bound) == 2
