"""Whether LibCST's parser ends on a text within a time limit, tried outside this process.

``mpfix.parsing`` asks this only for a text CPython rejects: LibCST parses it just to report the
error, and its error recovery can run for minutes (a long call chain in the wrong place). The
answer is ``DID_NOT_END``, ``CRASHED`` (the parser killed its process), LibCST's syntax error as
``(message, raw line, raw column)``, or None (it parsed, or nothing is known).

Two ways, one answer:
- a process with no other thread forks a child per text (a fork costs milliseconds);
- where other threads run (the editor server) forking is unsafe, so one helper process, started with
  ``subprocess`` (fork+exec is safe under threads) and reused across texts, parses each text; it is
  killed and started again only when a parse overruns or the helper dies. Starting it costs an
  interpreter and LibCST's import (~0.3-0.5 s) once, not per text; ``warm`` starts it ahead of need.

The limit counts the CPU time of the parsing process (Linux: ``/proc/PID/stat``), not wall time: on a
loaded machine a parse that needs 20 ms could wait seconds for a core, and the same file would read
"did not finish" on one run and give LibCST's error on the next. A parse starved of CPU still ends at a
wall-clock backstop (``_BACKSTOP``); where the CPU time cannot be read, the limit is wall time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from mpfix.lifeline import die_with_parent

DID_NOT_END = "did not end"
CRASHED = "crashed"
_REPLY_MAX = 65_536
_START_S = 120.0  # an interpreter and LibCST's import, on a loaded machine; the parse's own limit starts after
_BACKSTOP = (12.0, 60.0)  # wall-clock end of a CPU-time limit of s seconds: max(12 * s, 60 s)
_POLL_S = 0.05
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def probe(text: str, seconds: float) -> object:
    """What LibCST's parse of ``text`` does within ``seconds`` (see the module docstring)."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return _forked(text, seconds)
    return _HELPER.probe(text, seconds)


def warm() -> None:
    """Start the helper now, so that the first text that needs it does not wait for its start."""
    with _HELPER.lock:
        _HELPER.start()


def helper_pid() -> int | None:
    """The helper's process id while it runs (None before it is needed, or after it was stopped)."""
    process = _HELPER.process
    return process.pid if process is not None and process.poll() is None else None


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from ``/proc``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
        fields = data[data.rindex(b")") + 2:].split()  # the command name, in parentheses, may hold spaces
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime and stime, fields 14 and 15
    except (OSError, ValueError, IndexError):
        return None


class Limit:
    """``seconds`` of CPU time of process ``pid`` from now (wall time where that cannot be read)."""

    def __init__(self, pid: int, seconds: float) -> None:
        self.pid, self.seconds = pid, seconds
        self.start = cpu_seconds(pid)
        factor, least = _BACKSTOP
        self.wall_end = time.monotonic() + (seconds if self.start is None else max(factor * seconds, least))

    def passed(self) -> bool:
        if time.monotonic() >= self.wall_end:
            return True
        now = cpu_seconds(self.pid) if self.start is not None else None
        return now is not None and now - self.start >= self.seconds


class _Wall:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.end


def _forked(text: str, seconds: float) -> object:
    parent = os.getpid()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            die_with_parent(parent, signal.SIGKILL)
            os.write(write_end, _answer(text))
        except BaseException:
            pass
        os._exit(0)
    os.close(write_end)
    try:
        limit = Limit(pid, seconds)
        delay = 0.001
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return CRASHED if os.WIFSIGNALED(status) else error_from(os.read(read_end, _REPLY_MAX))
            if limit.passed():
                break
            time.sleep(delay)
            delay = min(delay * 2, _POLL_S)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return DID_NOT_END
    finally:
        os.close(read_end)


def _answer(text: str) -> bytes:
    """LibCST's verdict on ``text`` as one JSON line: null (parsed) or [message, line, column]."""
    import libcst as cst

    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return json.dumps([exc.message[:20_000], exc.raw_line, exc.raw_column]).encode() + b"\n"
    except Exception:  # noqa: BLE001 - anything else LibCST raises: nothing is known
        pass
    return b"null\n"


def error_from(data: bytes) -> tuple[str, int, int] | None:
    try:
        message, line, column = json.loads(data) if data.strip() else (None, 0, 0)
    except (ValueError, TypeError):
        return None
    ok = isinstance(message, str) and isinstance(line, int) and isinstance(column, int)
    return (message, line, column) if ok else None


class _Helper:
    """One helper process, one text at a time (``lock``); replaced when a parse overruns or it dies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.ready = False

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        # -P: no working folder on sys.path (a project's own ``libcst.py`` is never imported);
        # the folder holding mpfix goes first on PYTHONPATH so the helper finds this same mpfix.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", "from mpfix.parse_probe import serve; serve()", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path}, close_fds=True)
        self.ready = False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            for stream in (process.stdin, process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def probe(self, text: str, seconds: float) -> object:
        if os.name != "posix":  # pragma: no cover - select() on pipes: POSIX only
            return None
        data = text.encode("utf-8", "surrogatepass")
        with self.lock:
            died = None
            for _ in range(2):  # a helper that died (killed, or on this text) is replaced once
                self.start()
                if not self.ready:
                    self.ready = self._read_line(_Wall(_START_S)) == b"ready\n"
                    if not self.ready:
                        self.stop()
                        return None
                try:
                    self.process.stdin.write(len(data).to_bytes(8, "big") + data)
                    self.process.stdin.flush()
                except OSError:
                    self.stop()
                    continue
                reply = self._read_line(Limit(self.process.pid, seconds))
                if reply is None:  # overran: the parse is abandoned with its process
                    self.stop()
                    return DID_NOT_END
                if reply:
                    return error_from(reply)
                died = self.process.wait() < 0  # twice on the same text: the parser crashes on it
                self.stop()
            return CRASHED if died else None

    def _read_line(self, limit: Limit | _Wall) -> bytes | None:
        """One reply line; b"" at end of file; None when ``limit`` passes first."""
        fd = self.process.stdout.fileno()
        chunks = []
        while True:
            if not select.select([fd], [], [], _POLL_S)[0]:
                if limit.passed():
                    return None
                continue
            chunk = os.read(fd, _REPLY_MAX)
            if not chunk:
                return b""
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)


_HELPER = _Helper()


def serve() -> None:  # pragma: no cover - runs in the helper process
    """The helper: read length-prefixed UTF-8 texts from stdin, answer one line each on stdout."""
    die_with_parent(int(sys.argv[1]), signal.SIGKILL)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything else printed goes to stderr (discarded), never into a reply
    import libcst  # noqa: F401 - before "ready": the parent's time limit is for the parse alone

    out.write(b"ready\n")
    source = sys.stdin.buffer
    while True:
        header = source.read(8)
        if len(header) < 8:
            return
        data = source.read(int.from_bytes(header, "big"))
        out.write(_answer(data.decode("utf-8", "surrogatepass")))
