"""The binding model (codemods/analysis/bindings.py): one per scope, for names, attributes, unpacking,
comprehensions, closures, ``global`` and ``nonlocal``."""

from __future__ import annotations

import textwrap

import libcst as cst

from mpfix.codemods.analysis.bindings import BindingKind, Bindings
from mpfix.codemods.analysis.gradient_syntax import _scopes

CODE = """
    import tensorflow as tf

    counter = 0
    opt = None


    class Accumulator:
        pass


    class Trainer:
        def __init__(self, model, optimizer=tf.keras.optimizers.SGD(0.1)):
            self.model = model
            self.optimizer = optimizer
            self.accumulator = Accumulator()


    def main(flag):
        global opt
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        opt = tf.keras.optimizers.Adam()
        q, k, v = [tf.split(x, 3)[i] for i in range(3)]
        first, second = "a", "b"
        if flag:
            scale = 1.0
        else:
            scale = 2.0
        total = 0

        def step(grads):
            nonlocal total
            total += 1
            with strategy.scope():
                return [g * scale for g in grads]

        return step
"""


def _model():
    module = cst.parse_module(textwrap.dedent(CODE).lstrip("\n"))
    scopes = _scopes(module)
    return module, scopes, Bindings(scopes), {s.name: s for s in scopes}


def _code(module, node):
    return module.code_for_node(node) if node is not None else None


def test_unpacking_of_a_comprehension_records_each_element_and_the_comprehension_target():
    module, scopes, bindings, by_name = _model()
    main = by_name["main"]
    (q,) = bindings.bindings_of(main, "q")
    assert q.kind is BindingKind.UNPACK and q.element == 0
    assert _code(module, q.value).startswith("[tf.split(x, 3)[i] for i in range(3)]")
    (i,) = bindings.bindings_of(main, "i")
    assert i.kind is BindingKind.COMPREHENSION and _code(module, i.value) == "range(3)"
    (second,) = bindings.bindings_of(main, "second")  # a literal tuple: its own element
    assert second.element is None and _code(module, second.value) == '"b"'


def test_branches_are_kept_apart():
    module, scopes, bindings, by_name = _model()
    first, other = bindings.bindings_of(by_name["main"], "scale")
    assert first.branch and other.branch and first.branch[0][0] == other.branch[0][0]
    assert first.branch[0][1] != other.branch[0][1]


def test_closures_nonlocal_and_global():
    module, scopes, bindings, by_name = _model()
    step = by_name["step"]
    # A name `step` reads but does not bind is the enclosing function's (a closure).
    (strategy,) = bindings.bindings_of(step, "strategy")
    assert _code(module, strategy.value) == "tf.distribute.MultiWorkerMirroredStrategy()"
    # `nonlocal total`: step's `total += 1` binds main's total; both see both bindings.
    for scope in (step, by_name["main"]):
        assert [b.kind for b in bindings.bindings_of(scope, "total")] == [BindingKind.ASSIGN, BindingKind.AUGMENTED]
    # `global opt` in main binds the module's opt.
    module_opt = bindings.bindings_of(scopes[0], "opt")
    assert [_code(module, b.value) for b in module_opt] == ["None", "tf.keras.optimizers.Adam()"]
    # The `with` target and the `for` of the comprehension in step.
    assert [b.kind for b in bindings.bindings_of(step, "g")] == [BindingKind.COMPREHENSION]


def test_attributes_and_their_constructor_defaults():
    module, scopes, bindings, by_name = _model()
    init = by_name["__init__"]
    optimizer = bindings.bindings_of(init, "self.optimizer")
    assert [b.kind for b in optimizer] == [BindingKind.ASSIGN, BindingKind.ATTRIBUTE_DEFAULT]
    assert _code(module, optimizer[1].value) == "tf.keras.optimizers.SGD(0.1)"
    (acc,) = bindings.attribute("Trainer", "self.accumulator")
    assert _code(module, acc.value) == "Accumulator()"
    assert bindings.attribute("Accumulator", "self.accumulator") == []
