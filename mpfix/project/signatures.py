"""Parameters a ``tf.function``'s ``input_signature`` makes float32, as the cross-file scan reads them (``ast``).

research DELF's export_local_model.py (issue 18, N22): a ``tf.Module`` method

    @tf.function(input_signature=[..., tf.TensorSpec(shape=(), dtype=tf.float32, name='input_abs_thres')])
    def ExtractFeatures(self, input_image, input_scales, input_max_feature_num, input_abs_thres):
        extracted_features = export_model_utils.ExtractLocalFeatures(..., input_abs_thres, ...)

hands another file's function a float32 tensor: a function traced with an ``input_signature`` gets each argument
converted to its ``TensorSpec`` (a float16 tensor passed there raises), so inside it the parameter IS float32
whatever the policy. ``TensorSpec``'s ``dtype`` defaults to ``tf.float32``. The per-file dtype inference reads
the same signature (``dtype_env.NameDtypes._signature``); this is the scan's reading, for ``ArgKind.FLOAT32``.

A parameter the function rebinds (an assignment, a loop target, a nested function's or lambda's parameter of the
same name) is left out: the name may hold something else where it is passed on.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

_FLOAT32 = ("tensorflow.float32", "tensorflow.dtypes.float32", "numpy.float32")
_COMPAT = re.compile(r"^tensorflow\.compat\.v[12]\.")


def _resolver(resolve: Callable[[ast.expr], str | None]) -> Callable[[ast.expr], str]:
    """``resolve`` with ``tf.compat.v1.``/``v2.`` spellings read as ``tf.``."""
    return lambda node: _COMPAT.sub("tensorflow.", resolve(node) or "")


def _spec_float32(spec: ast.expr, resolve: Callable[[ast.expr], str | None]) -> bool:
    """``tf.TensorSpec(shape)``, ``tf.TensorSpec(shape, tf.float32)``, ``tf.TensorSpec(shape, dtype="float32")``."""
    if not isinstance(spec, ast.Call) or resolve(spec.func) not in ("tensorflow.TensorSpec",):
        return False
    dtype = spec.args[1] if len(spec.args) > 1 else next((k.value for k in spec.keywords if k.arg == "dtype"), None)
    if dtype is None:
        return not any(isinstance(a, ast.Starred) for a in spec.args) and all(k.arg for k in spec.keywords)
    if isinstance(dtype, ast.Constant):
        return dtype.value == "float32"
    return resolve(dtype) in _FLOAT32


def signature_float32(func: ast.FunctionDef | ast.AsyncFunctionDef, resolve: Callable[[ast.expr], str | None],
                      method: bool = False) -> frozenset[str]:
    """The parameters of ``func`` its ``@tf.function(input_signature=[...])`` makes float32 and it never rebinds;
    ``method``: ``func`` is defined directly in a class body, so unless it is a ``staticmethod`` its first parameter
    is the instance (or class), whatever its name, and the signature starts at the second."""
    signature, resolve = None, _resolver(resolve)
    for decorator in func.decorator_list:
        if isinstance(decorator, ast.Name) and decorator.id == "staticmethod":
            method = False
        elif isinstance(decorator, ast.Call) and resolve(decorator.func) == "tensorflow.function":
            given = [k.value for k in decorator.keywords if k.arg == "input_signature"]
            signature = given[0] if given else decorator.args[1] if len(decorator.args) > 1 else None
    if not isinstance(signature, (ast.List, ast.Tuple)):
        return frozenset()
    args = func.args
    if args.vararg is not None or any(isinstance(e, ast.Starred) for e in signature.elts):
        return frozenset()
    params = [a.arg for a in [*args.posonlyargs, *args.args]][1 if method else 0:]
    found = {name for name, spec in zip(params, signature.elts) if _spec_float32(spec, resolve)}
    if not found:
        return frozenset()
    own = {id(a) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) or \
                isinstance(node, ast.arg) and id(node) not in own:
            found.discard(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.difference_update(node.names)
    return frozenset(found)
