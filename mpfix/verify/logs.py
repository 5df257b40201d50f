"""Parent side: reading what a failed child left as text (no TensorFlow).

Its stderr (TensorFlow's own log lines left out), and the message of an exception raised
inside a ``tf.function``: the user's frames TensorFlow writes into it as text, the line that
says what went wrong behind its headers, and its root errors when there are several
("2 root error(s) found.", then "(0) INVALID_ARGUMENT: ..." and "(1) ...": the message's
last line is then "0 derived errors ignored.", which says nothing).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from mpfix.verify.frames import describe, is_user_file, last_user_frame
from mpfix.verify.records import RunResult

# TensorFlow/absl log lines in stderr that say nothing about the script's failure.
_NOISE = re.compile(r"^(?:[IWE]\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before absl|To enable the following instructions)")


def stderr_lines(text: str, count: int = 8) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not _NOISE.match(line)]
    return lines[-count:]


# The message of an error raised inside a tf.function: "in user code:" then the user's
# frames as text, then the error itself; or "Graph execution error:" then the op's
# creation stack and the error, ending in "[[{{node ...}}]] [Op:...]".
_TF_HEADERS = ("in user code:", "Graph execution error:")
_STACK_TEXT = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def message_frames(message: str) -> list[dict]:
    frames, lines = [], message.splitlines()
    for i, line in enumerate(lines):
        m = _STACK_TEXT.match(line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _STACK_TEXT.match(lines[i + 1]) else ""
            frames.append({"file": m.group(1), "line": int(m.group(2)), "function": m.group(3), "code": code})
    return frames


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning)): (.*)$")


# "  (0) INVALID_ARGUMENT:  assertion failed: ..." after "N root error(s) found."
_ROOT_COUNT = re.compile(r"^(\d+) root error\(s\) found\.?$")
_ROOT_ERROR = re.compile(r"^\((\d+)\) ([A-Z_]+):\s+(.*)$")


def root_errors(message: str) -> list[str]:
    """``"KIND: message"`` of each root error of a TensorFlow error that lists several (in
    their order), [] when the message lists none."""
    lines = [_ANSI.sub("", line).strip() for line in message.splitlines()]
    if not any(_ROOT_COUNT.match(line) for line in lines):
        return []
    out = []
    for line in lines:
        match = _ROOT_ERROR.match(line)
        if match:
            out.append(f"{match.group(2)}: {match.group(3).strip()}")
    return out


def crash_head(message: str, kind: str | None = None) -> str:
    """The line of an exception message that says what went wrong: the first, unless it is
    one of TensorFlow's headers ("in user code:", "Graph execution error:"), then the error
    line in its text; Keras' "Exception encountered when calling X.call()." is followed by
    the line that says why."""
    lines = [_ANSI.sub("", line).strip() for line in message.strip().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return ""
    head, index = lines[0], 0
    roots = root_errors(message)
    if head in _TF_HEADERS and roots:
        first = roots[0]
        more = len(roots) - 1
        if more:
            same = all(r == first for r in roots[1:])
            first += f" ({len(roots)} root errors, {'all the same' if same else 'the others: ' + '; '.join(roots[1:3])})"
        return first
    if head in _TF_HEADERS:
        errors = [i for i, line in enumerate(lines) if _ERROR_LINE.match(line)]
        plain = [
            i
            for i, line in enumerate(lines[1:], start=1)
            if not _STACK_TEXT.match(line)
            and not line.startswith(("[[", "Detected at node", "Stack trace", "Op:", "[Op:"))
            and not line.endswith("(most recent call last):")
        ]
        if errors:
            index = errors[-1]
            match = _ERROR_LINE.match(lines[index])
            head = match.group(2) if kind and match.group(1).split(".")[-1] == kind else lines[index]
        elif plain:
            index = plain[-1]
            head = lines[index]
    if head.startswith("Exception encountered when calling") and index + 1 < len(lines):
        reason = lines[index + 1]
        if reason.endswith("Error encountered:") and index + 2 < len(lines):
            # Keras 3 while building: "Could not automatically infer the output shape / dtype
            # of ... Error encountered:", then the error itself.
            reason = lines[index + 2]
        head = f"{head} {reason}"
    return head


def crash_report(run: RunResult, script: Path, steps: str) -> tuple[str, dict]:
    """Summary and evidence of a run that crashed, exited non-zero, or died without
    reporting; ``steps`` says how many steps it made ('3 steps')."""
    stderr = stderr_lines(run.stderr_tail)
    if run.crash is not None:
        message = run.crash.get("message", "")
        frames = list(run.crash.get("frames", []))
        # Inside a tf.function the Python traceback ends in TensorFlow; the message holds
        # the user's frames as text.
        text_frames = message_frames(message)
        frame = None
        for candidate in reversed(text_frames):
            if is_user_file(candidate.get("file", ""), script):
                frame = candidate
                break
        if frame is None:
            frame = last_user_frame(frames, script)
        where = describe(frame, script)
        head = crash_head(message, run.crash.get("type"))
        return (
            f"{run.crash.get('type')}: {head} (at {where})",
            {
                "type": run.crash.get("type"),
                "message": message,
                "frame": frame,
                "at": where,
                "exit_status": run.returncode,
                "steps": run.step_count,
                "stderr_tail": stderr,
            },
        )
    end = run.end or {}
    if end.get("status") == "exit":
        code = end.get("code")
        frame = last_user_frame(end.get("frames", []), script)
        where = describe(frame, script) if frame else "unknown location"
        why = f": {end['message']}" if end.get("message") else ""
        how = "os._exit" if end.get("abrupt") else "sys.exit"
        when = f"after {steps}" if run.steps else "before a single optimizer step"
        summary = f"the script exited with status {code} ({how}{why}) {when}"
        if frame:
            summary += f" (at {where})"
        if stderr:
            summary += f"; its last stderr line: {stderr[-1]}"
        return summary, {
            "exit_status": code,
            "frame": frame,
            "at": where if frame else None,
            "stderr_tail": stderr,
            "steps": run.step_count,
        }
    summary = f"the child process died without reporting (exit status {run.returncode}"
    if run.returncode is not None and run.returncode < 0:
        try:
            summary += f", killed by {signal.Signals(-run.returncode).name}"
        except ValueError:
            pass
    summary += f") after {steps}"
    if stderr:
        summary += f"; its last stderr line: {stderr[-1]}"
    return summary, {
        "exit_status": run.returncode,
        "returncode": run.returncode,
        "stderr_tail": stderr,
        "steps": run.step_count,
    }
