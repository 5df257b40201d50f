"""A nested ``def`` is a scope of its own in the dtype analysis, as in the binding model (``bindings.Bindings``).

Before, the walk of a function took its closures' assignments into the function's own name table: a name the
function and a closure both bind (``scale`` below) joined float16 and float32 into "unknown", and a closure's
value was one of the function's (``values_of``). Now each closure is a region of its own whose tables read
through to the enclosing function's (a name it does not bind is the outer one's), and ``nonlocal`` names are
the enclosing function's.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.dtype_lattice import Dtype
from mpfix.codemods.facts.dtype_facts import facts_for

GENERATIONS = [(3, "import keras\nfrom keras import ops\n", "keras.layers.Layer"),
               (2, "import tf_keras as keras\n", "keras.layers.Layer")]

LAYER = """
    import tensorflow as tf

    class Gate({base}):
        def call(self, inputs):
            def normalize(t):
                scale = tf.cast(tf.reduce_max(t), tf.float32)
                return t / tf.cast(scale, t.dtype)

            scale = tf.reduce_max(inputs)
            for _ in range(2):
                inputs = inputs * scale
            return normalize(inputs) + scale
"""


def _facts(code: str, keras: int):
    module = cst.parse_module(textwrap.dedent(code).lstrip("\n"))
    return module, facts_for(module, keras)


def _names(module: cst.Module, name: str) -> list[cst.Name]:
    from mpfix.codemods._walk import walk
    return [n for n in walk(module) if type(n) is cst.Name and n.value == name]


@pytest.mark.parametrize("keras, imports, base", GENERATIONS)
def test_a_closure_binding_the_same_name_does_not_make_it_unknown(keras, imports, base):
    module, facts = _facts(imports + textwrap.dedent(LAYER).format(base=base), keras)
    scales = _names(module, "scale")
    # def normalize: `scale = cast(..., float32)`, `cast(scale, ...)`; call: `scale = reduce_max`, `* scale`, `+ scale`
    in_closure, in_loop, returned = scales[1], scales[3], scales[4]
    assert facts.dtype_of(in_closure) is Dtype.FLOAT32
    assert facts.dtype_of(in_loop) is Dtype.FLOAT16  # was unknown: the closure's float32 joined in
    assert facts.dtype_of(returned) is Dtype.FLOAT16
    # values_of: each scope's own binding
    assert [module.code_for_node(v) for v in facts.values_of(in_loop)] == ["tf.reduce_max(inputs)"]
    assert [module.code_for_node(v) for v in facts.values_of(in_closure)] == \
        ["tf.cast(tf.reduce_max(t), tf.float32)"]


STEP = """
    import tensorflow as tf

    @tf.function
    def train(model, dataset, optimizer):
        total = tf.constant(0.0, tf.float32)
        steps = 0

        def forward(images, labels):
            nonlocal steps
            steps = steps + 1
            logits = model(images)
            loss = tf.reduce_mean(tf.cast(logits, tf.float32) - labels)
            return loss + total

        for images, labels in dataset:
            loss = forward(images, labels)
        return loss
"""


def test_a_closure_reads_the_enclosing_names_and_nonlocal_binds_there():
    module, facts = _facts(STEP, 3)
    total = _names(module, "total")[1]  # `loss + total` in the closure: the enclosing function's float32 constant
    assert [module.code_for_node(v) for v in facts.values_of(total)] == ["tf.constant(0.0, tf.float32)"]
    assert facts.dtype_of(total) is Dtype.FLOAT32
    steps = _names(module, "steps")[-1]  # the `steps + 1` read: both bindings are the function's
    assert [module.code_for_node(v) for v in facts.values_of(steps)] == ["0", "steps + 1"]
    outer_loss = _names(module, "loss")[-1]  # `return loss` of train: only `loss = step(...)`, not the closure's
    assert [module.code_for_node(v) for v in facts.values_of(outer_loss)] == ["forward(images, labels)"]


EXTRACT = """
    import tensorflow as tf

    @tf.function
    def extract_global_features(image, scales, model_fn):
        def resize_and_extract(scale_index):
            size = tf.cast(tf.cast(tf.shape(image)[:2], tf.float32) * tf.gather(scales, scale_index), tf.int32)
            descriptor = model_fn(tf.image.resize(image, size))
            return descriptor

        output = resize_and_extract(0)
        return tf.nn.l2_normalize(output, axis=1)
"""


def test_a_closure_call_is_what_the_closure_returns_in_its_own_scope():
    module, facts = _facts(EXTRACT, 3)
    descriptor, output = _names(module, "descriptor")[-1], _names(module, "output")[-1]
    assert facts.dtype_of(descriptor) is Dtype.FLOAT16  # a model called in float16 code
    assert facts.dtype_of(output) is Dtype.FLOAT16  # was unknown: the closure's returns read in the closure
