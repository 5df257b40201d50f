"""Before the LibCST parse: can a file hold a float16 region at all?  (``Need.FLOAT16_REGION``)

A rule that declares ``Need.FLOAT16_REGION`` reports only on nodes of a function the dtype inference
analyses as float16 compute (a *region* other than the module's own code: ``dtype_regions.RegionFinder``).
Every such region grows from a *seed*: a function ``_seed_kind`` names (a ``tf.function``, a method
``call``/``__call__``/a Keras layer hook, a training step or loss by its name, a ``y_pred`` parameter), a
function another file calls from float16 code or hands a Keras instance (the project's cross-file calls),
a function a tf.data pipeline traces (``ds.map(standardize)``: ``ops.DATASET_FUNCTIONS``), a function a Keras
layer's ``__init__`` hands on, one whose parameters only a project Keras class fits
(``param_types.structural_layer_params``), or one a ``with tf.GradientTape()`` block calls; helpers and
closures are reached from those. No seed, no region.

``may_have_region`` answers on CPython's ``ast`` (a tenth of a LibCST parse) with a superset of those
seeds: every condition below is looser than the finder's, never tighter, so a file it says "no" to has
no region and no finding of such a rule (``tests/test_speed_gate.py`` checks both on real code).
"""

from __future__ import annotations

import ast
import re

from mpfix.codemods.facts import heuristics, keras_layers, ops
from mpfix.parsing import check_depth

_STEP_NAMES = frozenset({"train_step", "test_step", "predict_step", "compute_loss"})
_METHOD_SEEDS = frozenset({"call", "__call__"}) | keras_layers.LAYER_HOOKS
# Text a def, a decorator, a class need (in strings and comments too: a superset). A name ends at
# whitespace, ``(`` or a line continuation, so every character of a real name is in it.
_DEF = re.compile(r"\bdef[\s\\]+([^\s(\[\\]+)")
_DECORATOR = re.compile(r"^[ \t\f]*@", re.MULTILINE)
_CLASS = re.compile(r"\bclass\b")
# A call of a tf.data method that traces a function (`.map(`, `.filter(`): text a dataset seed needs.
_DATASET_CALL = re.compile(r"\.(?:" + "|".join(map(re.escape, sorted(ops.DATASET_FUNCTIONS))) + r")\s*\(")


def _parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = func.args
    return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]


def _may_be_tf_function(decorator: ast.expr, bound: set[str]) -> bool:
    """Whether ``resolve`` could make this decorator ``tensorflow.function``: a dotted name resolves to its
    import's path plus the same attributes, so only one ending in ``.function``, or a bare name an import or
    assignment binds (``from tensorflow import function as tff``); anything else (a call's result) counts too."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "function" or not _dotted(target.value)
    if isinstance(target, ast.Name):
        return target.id == "function" or target.id in bound
    return True


def _dotted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _seed_name(name: str) -> bool:
    """A name ``RegionFinder._seed_kind`` may seed whatever the rest (a method ``call``, a step, a loss)."""
    return name in _METHOD_SEEDS or name in _STEP_NAMES or heuristics.STEP_NAME.search(name) is not None \
        or "loss" in name.lower()


def _seeded_by_name(func: ast.FunctionDef | ast.AsyncFunctionDef, bound: set[str]) -> bool:
    """``RegionFinder._seed_kind`` without its exclusions (metric classes, optimizers, keras.ops operations)
    and without asking whether the function is a method: every kind it can return is allowed here."""
    if any(_may_be_tf_function(d, bound) for d in func.decorator_list):
        return True
    return _seed_name(func.name) or "y_pred" in _parameters(func)


def decided_by_text(text: str, cross_calls: tuple) -> bool | None:
    """``may_have_region`` where the text alone decides it (None: it does not): most files a float16 rule
    triggers in either define a layer's ``call`` (a seed by name) or hold no decorator and no class."""
    if cross_calls or "GradientTape" in text or "y_pred" in text:
        return True
    names = _DEF.findall(text)
    if not names:
        return False  # no def: no function to be a region
    if any(_seed_name(name) for name in names):
        return True
    if _DECORATOR.search(text) is None and _CLASS.search(text) is None and _DATASET_CALL.search(text) is None:
        return False  # no tf.function decorator, no class to hand functions on or to type parameters, no tf.data map
    return None


def may_have_region(tree: ast.Module, text: str, cross_calls: tuple = ()) -> bool:
    """False only where the dtype inference of this module can find no region but the module's own code."""
    if cross_calls:
        return True  # another file calls one of its functions from float16 code or hands it a Keras instance
    if "GradientTape" in text:
        return True  # a tape block's calls are losses whatever their names (``taped_functions``)
    functions, inits, name_calls, bound = [], [], set(), set()
    has_class = False
    function_types, store = (ast.FunctionDef, ast.AsyncFunctionDef), ast.Store
    for node in ast.walk(tree):  # one walk: every def, class, binding and call by a bare name
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is store:
                bound.add(node.id)
        elif kind is ast.Call:
            if type(node.func) is ast.Name:
                name_calls.add(node.func.id)
        elif kind in function_types:
            functions.append(node)
            if node.name == "__init__":
                inits.append(node)
        elif kind is ast.ClassDef:
            has_class = True
        elif kind is ast.Import or kind is ast.ImportFrom:
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    if not functions:
        return False
    # Only a name an import or an assignment binds can resolve to ``tf.function`` as a bare decorator
    # (``ImportTable.resolve`` reads imports and module-level aliases).
    if any(_seeded_by_name(f, bound) for f in functions):
        return True
    if _maps_a_function(tree, {f.name for f in functions}):
        return True
    if not has_class:
        return False
    names = {f.name for f in functions}
    # A layer's __init__ handing a function on (``functools.partial(_probability_fn, ...)``).
    for init in inits:
        for call in (n for n in ast.walk(init) if type(n) is ast.Call):
            values = [*call.args, *(k.value for k in call.keywords)]
            if any(type(v) is ast.Name and v.id in names or type(v) is ast.Starred and type(v.value) is ast.Name
                   and v.value.id in names for v in values):
                return True
    # Structural typing: a function calling one of its own parameters by name, with a class in the file.
    return any(not name_calls.isdisjoint(_parameters(f)) for f in functions)


def _maps_a_function(tree: ast.Module, names: set[str]) -> bool:
    """A tf.data method call (``ds.map(fn)``, ``map_func=fn``) given a function this file defines: a seed
    (``RegionFinder._dataset_functions``; that one also wants a ``tf.data`` call in the file)."""
    for node in ast.walk(tree):
        if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in ops.DATASET_FUNCTIONS:
            position, keyword = ops.DATASET_FUNCTIONS[node.func.attr]
            values = [*node.args[position:position + 1], *(k.value for k in node.keywords if k.arg == keyword)]
            if any(type(v) is ast.Name and v.id in names for v in values):
                return True
    return False


def no_region(text: str, cross_calls: tuple = ()) -> bool:
    """True when ``text`` certainly holds no float16 region (the text decides, else ``may_have_region`` on
    its ``ast``).

    ``parsing.check_depth`` runs first, as before the LibCST parse, and raises ``TooComplex`` the same way;
    a text CPython rejects is never skipped: the engine's parse reports it as before."""
    if not check_depth(text):
        return False  # CPython rejects it: the parse reports the syntax error
    decided = decided_by_text(text, cross_calls)
    if decided is not None:
        return not decided
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return not may_have_region(tree, text, cross_calls)
