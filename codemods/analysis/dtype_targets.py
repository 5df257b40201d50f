"""The targets a Keras 3 model's loss hook sees, and a hook that promotes its float16 predictions to them.

Keras 3's ``fit(x, y)`` on arrays or tensors casts every float array to ``floatx()`` (float32 under
``mixed_float16``: keras/src/trainers/data_adapters/array_slicing.py, "Normalize floats to floatx"); a
``tf.data`` pipeline, a generator or a ``PyDataset`` keeps its own dtype (and ``fit`` refuses a separate ``y``
with them). So ``y`` in ``compute_loss`` is float32 for certain only when every training call of the file is a
``fit`` given a separate ``y`` (``keras_layers.FIT_CASTS_TO_FLOATX``), ``floatx`` is not changed, and the hook is
called by Keras itself or by the model's own ``train_step`` with the data's targets.

``keras.ops`` promote a float16 and a float32 operand to float32 (run: ``ops.subtract``, ``ops.add``,
``ops.multiply`` of float16 and float32 are float32). A hook that reads its predictions only as such an operand,
next to those targets (``ops.subtract(y, y_pred)``), computes the loss in float32: the float16 head's output is
promoted first, as if it were cast (MP205's cast-first test, wave 7's checkpoint_resume_k3_ok.py:17).
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.cast_consumers import _reads
from mpfix.codemods.analysis.dtype_lattice import Dtype, argument, spelled_dtype
from mpfix.codemods.facts import keras_layers
from mpfix.codemods.facts import ops as op_table

_HOOK = "compute_loss"


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)


def _params(function: cst.FunctionDef) -> list[str]:
    p = function.params
    return [q.name.value for q in (*p.posonly_params, *p.params, *p.kwonly_params)]


def _assigned(function: cst.FunctionDef) -> dict[str, list[cst.CSTNode]]:
    """Every name a statement of ``function`` binds (targets of assignments, tuple targets too), with the value."""
    found: dict[str, list[cst.CSTNode]] = {}
    for node in walk(function.body):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else \
            [node.target] if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)) else []
        for target in targets:
            names = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            for name in names:
                if isinstance(name, cst.Name):
                    found.setdefault(name.value, []).append(node)
    return found


def _is_targets(node: cst.BaseExpression, targets: str) -> bool:
    """``y`` or ``y[...]`` (a slice of the targets is the targets' dtype)."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return isinstance(node, cst.Name) and node.value == targets


def _promoted_next_to_targets(context, hook: cst.FunctionDef, predictions: str, targets: str) -> bool:
    """Every read of ``predictions`` in ``hook`` is an operand of a promoting op (keras.ops) whose other operand is
    the targets; neither name is rebound in the hook."""
    bound = _assigned(hook)
    if predictions in bound or targets in bound:
        return False
    seen = False
    for stmt in hook.body.body if isinstance(hook.body, cst.IndentedBlock) else ():
        for read, parent, call in _reads(stmt, predictions):
            if read is None or not isinstance(parent, cst.Arg) or parent.keyword is not None or parent.star or \
                    not isinstance(call, cst.Call):
                return False
            resolved = context.resolve(call.func)
            spec = op_table.lookup(resolved)
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if spec is None or not spec.same_dtype or op_table.refuses_mixed(resolved) or \
                    op_table.namespace(resolved) is not op_table.Namespace.KERAS_OPS or len(positional) != 2 or \
                    parent not in positional:
                return False
            other = positional[1 - positional.index(parent)].value
            if not _is_targets(other, targets):
                return False
            seen = True
    return seen


def _cast_first(context, hook: cst.FunctionDef, predictions: str) -> bool:
    """Every read of ``predictions`` in ``hook`` is the tensor of a cast to float32 (``ops.cast(y_pred, "float32")``,
    ``tf.cast(y_pred, tf.float32)``: the ops table's casts) and the name is not rebound: MP205's cast-first case,
    written in the loss hook. The targets' dtype does not matter then."""
    if predictions in _assigned(hook):
        return False
    seen = False
    for stmt in hook.body.body if isinstance(hook.body, cst.IndentedBlock) else ():
        for read, parent, call in _reads(stmt, predictions):
            if read is None or not isinstance(parent, cst.Arg) or parent.keyword is not None or parent.star or \
                    not isinstance(call, cst.Call) or not call.args or call.args[0] is not parent:
                return False
            spec = op_table.lookup(context.resolve(call.func))
            dtype = argument(call, "dtype", 1)
            if spec is None or spec.result is not op_table.Result.CAST or dtype is None or \
                    spelled_dtype(dtype.value, context.resolve) is not Dtype.FLOAT32:
                return False
            seen = True
    return seen


def _own_step_passes_data(cls: cst.ClassDef, targets: str, predictions: str) -> bool:
    """No ``train_step`` override, or one that calls ``self.compute_loss`` with the targets unpacked from its data
    argument and the predictions bound to ``self(...)``, and reads those predictions nowhere else."""
    step = _method(cls, "train_step")
    if step is None:
        return True
    params = _params(step)
    if len(params) < 2:
        return False
    data, bound = params[1], _assigned(step)
    calls = [n for n in walk(step.body) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and
             isinstance(n.func.value, cst.Name) and n.func.value.value == "self" and n.func.attr.value == _HOOK]
    if len(calls) != 1:
        return False
    keywords = {a.keyword.value: a.value for a in calls[0].args if a.keyword is not None}
    given_targets, given_predictions = keywords.get(targets), keywords.get(predictions)
    if not isinstance(given_targets, cst.Name) or not isinstance(given_predictions, cst.Name):
        return False
    unpacked = bound.get(given_targets.value, [])
    if len(unpacked) != 1 or not isinstance(unpacked[0], cst.Assign) or \
            not (isinstance(unpacked[0].value, cst.Name) and unpacked[0].value.value == data):
        return False
    made = bound.get(given_predictions.value, [])
    if len(made) != 1 or not isinstance(made[0], cst.Assign) or not isinstance(made[0].value, cst.Call) or \
            not (isinstance(made[0].value.func, cst.Name) and made[0].value.func.value == "self"):
        return False
    reads = [r for stmt in step.body.body for r, _, _ in _reads(stmt, given_predictions.value)]
    return len(reads) == 1 and reads[0] is given_predictions


def _fit_casts_targets(context, keras: int) -> bool:
    """Every training call of the file is a ``fit`` given a separate ``y`` (cast to floatx by Keras), there is
    one, nothing changes ``floatx``, and no other code calls the loss hook."""
    casting = keras_layers.FIT_CASTS_TO_FLOATX.get(keras)
    if casting is None:
        return False
    fits = 0
    for call in walk(context.module):
        if not isinstance(call, cst.Call):
            continue
        resolved = context.resolve(call.func) or ""
        if resolved.rpartition(".")[2] == "set_floatx":
            return False
        if not isinstance(call.func, cst.Attribute):
            continue
        method = call.func.attr.value
        if method == _HOOK and not (isinstance(call.func.value, cst.Name) and call.func.value.value == "self"):
            return False  # a loop that computes the loss itself: its targets are whatever it passes
        if method in keras_layers.TRAINING_CALLS:
            if method not in casting:
                return False
            positional = [a for a in call.args if a.keyword is None and not a.star]
            y = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "y"),
                     positional[1].value if len(positional) > 1 else None)
            if y is None or any(a.star for a in call.args) or (isinstance(y, cst.Name) and y.value == "None"):
                return False
            fits += 1
    return fits > 0


def loss_promotes_predictions(context, cls: cst.ClassDef, keras: int) -> bool:
    """The model class's own ``compute_loss`` promotes its float16 predictions to the float32 targets before any
    other use of them (see the module docstring): no loss of the file sees the predictions in float16."""
    hook = _method(cls, _HOOK)
    predictions = keras_layers.MODEL_PREDICTIONS.get(_HOOK)
    targets = keras_layers.MODEL_TARGETS.get(_HOOK)
    if hook is None or predictions is None or targets is None or \
            not {predictions, targets} <= set(_params(hook)):
        return False
    promoted = _cast_first(context, hook, predictions) or (
        _promoted_next_to_targets(context, hook, predictions, targets) and _fit_casts_targets(context, keras))
    return promoted and _own_step_passes_data(cls, targets, predictions)
