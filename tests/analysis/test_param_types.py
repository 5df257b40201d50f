"""Structural parameter typing (``codemods/analysis/param_types.py``): a parameter whose project attributes only a
project Keras class defines is an instance of it (issue 18, C33)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from mpfix.codemods.analysis.param_types import class_shapes, parameter_reads, structural_layer_params
from mpfix.project.structural_types import ClassShape, class_index, typed_parameters
from mpfix.codemods.names import ImportTable


def _module(code: str) -> cst.Module:
    return cst.parse_module(textwrap.dedent(code).lstrip("\n"))


def _typed(code: str) -> dict[str, set[str]]:
    module = _module(code)
    classes = {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    found = structural_layer_params(functions, classes, ImportTable(module).resolve)
    return {func.name.value: set(params) for func, params in found.items()}


NET = """
    import tensorflow as tf
    from tf_keras import layers


    class Base(layers.Layer):
        def __init__(self):
            super().__init__()
            self.outputdim = 8


    class GlobalNet(Base):
        def __init__(self):
            super().__init__()
            self.meta = {"outputdim": 8}
            self.head, self.pool = layers.Dense(8), layers.GlobalAveragePooling2D()

        def call(self, x):
            return self.head(self.pool(x))

        def meta_repr(self):
            return str(self.meta)


    def extract(net, images, print_freq=10):
        print(net.meta_repr())
        return [net(x) for x in images], net.meta["outputdim"], net.outputdim, print_freq.real
"""


def test_the_keras_class_s_own_and_inherited_attributes_and_methods_type_the_parameter():
    assert _typed(NET) == {"extract": {"net"}}


def test_the_shapes_follow_project_bases_and_resolved_keras_bases():
    module = _module(NET)
    classes = {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}
    shapes = {s.name: s for s in class_shapes(classes, ImportTable(module).resolve)}
    assert shapes["GlobalNet"].keras and shapes["GlobalNet"].float16
    assert {"meta", "head", "pool", "meta_repr", "outputdim", "call"} <= shapes["GlobalNet"].defines
    assert shapes["Base"].defines == {"outputdim", "__init__"}


def test_a_class_named_like_a_layer_is_not_one_without_a_keras_base():
    """Bases are resolved, not matched by name: ``class Model(Block)`` with a plain ``Block`` is no Keras class."""
    code = NET.replace("class Base(layers.Layer)", "class Base(object)")
    assert _typed(code) == {}


def test_an_unknown_name_and_keras_members_are_neutral_not_evidence():
    reads = {"net": frozenset({"meta", "trainable_variables", "compute_dtype", "nothing_defines_this"})}
    shapes = [ClassShape("GlobalNet", frozenset({"meta", "call", "build"}), True, True)]
    assert typed_parameters(reads, class_index(shapes)) == {"net"}
    only_members = {"net": frozenset({"call", "build", "trainable_variables"})}
    assert typed_parameters(only_members, class_index(shapes)) == frozenset()


@pytest.mark.parametrize("other", [
    ClassShape("Info", frozenset({"meta"}), False, False),  # a plain class defines it too
    ClassShape("Head", frozenset({"meta"}), True, False),  # a Keras class that may return float32 defines them all
])
def test_another_class_defining_the_attribute_withdraws_the_fact(other):
    shapes = [ClassShape("GlobalNet", frozenset({"meta"}), True, True), other]
    assert typed_parameters({"net": frozenset({"meta"})}, class_index(shapes)) == frozenset()


def test_attributes_split_over_two_keras_classes_name_neither():
    shapes = [ClassShape("A", frozenset({"meta"}), True, True), ClassShape("B", frozenset({"vocab"}), True, True)]
    assert typed_parameters({"net": frozenset({"meta", "vocab"})}, class_index(shapes)) == frozenset()


def test_rebinding_the_parameter_drops_its_reads():
    func = _module("""
        def f(net, other, third):
            net = make()
            for other in range(3):
                pass
            with open(third.path) as fh:
                pass
            return net.meta, other.meta, third.meta, net(1), other(2), third(3)
    """).body[0]
    assert parameter_reads(func) == {"third": frozenset({"path", "meta"})}


def test_a_parameter_the_function_never_calls_is_left_out():
    """Only a call's result can be the compute dtype: ``config.meta`` alone types nothing (and seeds no region)."""
    func = _module("""
        def f(net, config):
            return net(config.meta), net.meta
    """).body[0]
    assert parameter_reads(func) == {"net": frozenset({"meta"})}


def test_reads_inside_nested_functions_and_lambdas_are_theirs():
    func = _module("""
        def f(net):
            g = lambda net: net.meta
            def inner(net):
                return net.meta
            return g, inner
    """).body[0]
    assert parameter_reads(func) == {}
