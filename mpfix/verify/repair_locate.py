"""The op repair works at when the run's per-op evidence has none: an eager training step.

Per-op evidence (``evidence.py``) measures the ops of traced steps (``tf.function``, Keras'
``fit``); an eager custom loop traces nothing, so a non-finite run names no op and repair had
nothing to try. ``--locate``'s re-run (check_numerics, eagerly) finds the first op that gave
NaN/Inf and the user's line that created it; this turns that into the runtime finding the
candidates start from, with the op's column found on the line. An op inside a project layer's method
(a ``tf.while_loop`` body nested in ``call``: the per-op walk does not reach a control-flow body's ops either)
is that layer's: ``owner`` is the layer of that class the run built, so ``dtype="float32"`` on it is a
candidate beside the island at the op.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mpfix.verify.evidence import Kind, RuntimeFinding, op_column
from mpfix.verify.locate import locate_from_run


def located(run, script: Path, text_of, layers=None) -> list[RuntimeFinding]:
    """The first op of a ``--locate`` re-run ``run`` as a finding (empty: none located);
    ``text_of(path)`` gives the text of a file that ran; ``layers`` the layer records of the run that failed
    (index -> record; the re-run's own are used too), for the owner of an op inside a layer's method."""
    if run is None:
        return []
    location = locate_from_run(run, script)
    frame = location.frame or {}
    if not location.op or not frame.get("file") or not frame.get("line"):
        return []
    line = int(frame["line"])
    text = text_of(Path(frame["file"]))
    lines = text.splitlines() if text else []
    if not 0 < line <= len(lines):
        return []
    columns = op_column(lines[line - 1], location.op)
    if columns is None:
        return []
    message = f"float16 `{location.op}` gave inf/NaN (first NaN/Inf of an eager re-run with check_numerics)"
    owner = owner_layer(text, line, [*((layers or {}).values()), *(run.layers or {}).values()])
    return [RuntimeFinding(location.rule or "MP901", message, frame["file"], line, columns[0], Kind.NONFINITE,
                           location.op, end_column=columns[1], owner=owner)]


def enclosing_class(text: str, line: int) -> str | None:
    """The innermost class whose body holds ``line`` (through methods and the functions nested in them)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    found, span = None, None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if span is None or node.end_lineno - node.lineno < span:
                found, span = node.name, node.end_lineno - node.lineno
    return found


def owner_layer(text: str, line: int, layers: list[dict]) -> dict | None:
    """The first layer the run built of the class whose method holds ``line`` (None: the line is in no class,
    or the run built no layer of it where the user's code can be edited)."""
    name = enclosing_class(text, line)
    if name is None:
        return None
    return next((layer for layer in layers
                 if layer.get("class") == name and layer.get("file") and layer.get("line") and not layer.get("model")),
                None)
