"""The op repair works at when the run's per-op evidence has none: an eager training step.

Per-op evidence (``evidence.py``) measures the ops of traced steps (``tf.function``, Keras'
``fit``); an eager custom loop traces nothing, so a non-finite run names no op and repair had
nothing to try. ``--locate``'s re-run (check_numerics, eagerly) finds the first op that gave
NaN/Inf and the user's line that created it; this turns that into the runtime finding the
candidates start from, with the op's column found on the line.
"""

from __future__ import annotations

from pathlib import Path

from mpfix.verify.evidence import Kind, RuntimeFinding, op_column
from mpfix.verify.locate import locate_from_run


def located(run, script: Path, text_of) -> list[RuntimeFinding]:
    """The first op of a ``--locate`` re-run ``run`` as a finding (empty: none located);
    ``text_of(path)`` gives the text of a file that ran."""
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
    return [RuntimeFinding(location.rule or "MP901", message, frame["file"], line, columns[0], Kind.NONFINITE,
                           location.op, end_column=columns[1])]
