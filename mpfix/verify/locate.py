"""Parent side of ``--locate``: turn the check_numerics failure of the re-run into the
user's file:line, the op, and a static rule code when mpfix's rules flag that line.

The child re-runs the mixed run eagerly with ``tf.debugging.enable_check_numerics()``,
paused while a dynamic loss scaler computes and applies gradients (its overflows are the
ones it exists to absorb), so the first op reported is a genuine one.
"""

from __future__ import annotations

import re
from pathlib import Path

from mpfix.verify.frames import describe, is_user_file, last_user_frame
from mpfix.verify.records import RunResult

_OP = re.compile(r'op "([^"]+)"')
# Graph-mode check_numerics messages carry the op's creation stack as text.
_STACK_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def frames_from_message(message: str) -> list[dict]:
    return [
        {"file": m.group(1), "line": int(m.group(2)), "function": m.group(3), "code": ""}
        for m in _STACK_LINE.finditer(message)
    ]


def locate_from_run(run: RunResult, script: Path):
    from mpfix.verify.kinds import Location

    if run.numerics is None:
        why = "the eager re-run did not reproduce a NaN/Inf"
        if run.crash is not None:
            why = f"the re-run crashed first ({run.crash.get('type')})"
        return Location(op=None, frame=None, where=why)
    message = run.numerics.get("message", "")
    op = _OP.search(message)
    frames = list(run.numerics.get("frames", []))
    user = [f for f in frames if is_user_file(f.get("file", ""), script)]
    if not user:
        frames = frames_from_message(message) + frames
    frame = last_user_frame(frames, script)
    location = Location(
        op=op.group(1) if op else None,
        frame=frame,
        where=describe(frame, script),
        detail="\n".join(message.splitlines()[:8]),
    )
    if frame and frame.get("file") and frame.get("line"):
        location.rule, location.rule_message = matching_rule(Path(frame["file"]), int(frame["line"]))
    return location


def matching_rule(path: Path, line: int) -> tuple[str | None, str | None]:
    """The first static finding of mpfix on ``path:line``, if mpfix.api is available."""
    try:
        from mpfix.api import check_paths
    except ImportError:
        return None, None
    try:
        findings = check_paths([path])
    except Exception:  # a static-analysis failure must not hide the runtime finding
        return None, None
    for finding in findings:
        start = getattr(finding, "start", None)
        found = getattr(finding, "line", None) or getattr(start, "line", None)
        if found == line:
            return finding.code, getattr(finding, "message", None)
    return None, None


def locate_from_evidence(report):
    """The first op that produced NaN/Inf from the per-op evidence of the traced step
    (``evidence.py``), without a re-run: None when the evidence does not name one (an eager
    script traces nothing; then the eager check_numerics re-run is needed). An op a
    library layer built is placed at the line that built the layer, not at ``model.fit``."""
    from mpfix.verify.evidence import Kind, first_nonfinite, for_report
    from mpfix.verify.frames import describe
    from mpfix.verify.kinds import Location

    found = for_report(report)
    first = first_nonfinite(found) or next((f for f in found if f.kind is Kind.CONSTANT), None)
    if first is None:
        return None
    frame = {"file": first.file, "line": first.line, "code": first.source.strip(), "function": None}
    location = Location(op=first.op, frame=frame, where=describe(frame, report.script), detail=first.message)
    if not first.code.startswith("MP9"):
        location.rule, location.rule_message = matching_rule(Path(first.file), first.line)
        location.rule = location.rule or first.code
    return location
