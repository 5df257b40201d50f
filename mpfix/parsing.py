"""Parse source with LibCST, without re-checking what its parser already guarantees.

Every LibCST node runs ``_validate()`` from ``__post_init__``. That check is for
trees built by hand (a rule's replacement nodes); a tree the parser built from
source is valid by construction, yet re-checking it costs about a fifth of a
parse on real code (``benchmarks/bench_check.py`` measures it). ``parse_module``
switches the check off for the parse only: nodes built anywhere else, fixes
included, are still validated. Fixed text is re-parsed here and also compiled
by CPython before it is written, so nothing relies on the skipped check.
"""

from __future__ import annotations

import ast
import os
import signal
import symtable
import sys
import threading
import time
import warnings

import libcst as cst

from mpfix.lifeline import die_with_parent

# The hook is LibCST's internal detail: a version without it gets the plain parse.
_VALIDATING_INIT = cst.CSTNode.__dict__.get("__post_init__")

_LOCK = threading.Lock()


def _skip_validation(self: object) -> None:
    return None


# Expressions nested or chained deeper than this are refused before LibCST sees them. LibCST's
# native parser segfaults on ~3,000 nested parentheses or an 8,000-long ``a.b.b...``/``1 + 1 + ...``
# chain (killing the run or the editor server), and its time grows with the square of the depth:
# ``f()()...`` 1,000 calls long takes 1.7 s, 3,000 over two minutes. CPython refuses 200 nested
# parentheses and about 3,000 levels of syntax tree; no hand-written code comes near 1,000.
MAX_DEPTH = 1000

# A file CPython rejects is parsed by LibCST only to report it, and LibCST's error recovery can
# take minutes on a long call chain in the wrong place (``a()()...(`` 8,000 calls inside a ``def``'s
# parameters: 30 s+; the time grows ~4.5x per doubling). Its parse of such a file is tried in a
# forked child first and given this long; past it the file is an MP000 with CPython's message.
PARSE_PROBE_SECONDS = 10.0


class TooComplex(RecursionError):
    """Source nested too deeply to parse safely (a RecursionError: callers already report those)."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def check_depth(text: str) -> None:
    """Raise TooComplex when ``text`` nests deeper than CPython or ``MAX_DEPTH`` allow.

    CPython's own compiler measures it, at C speed: its symbol-table pass (``symtable``) walks the
    parsed tree and stops at three times the recursion limit left, so the limit is lowered for this
    one call. That pass builds no Python objects per node: it costs about 60% of
    ``compile(PyCF_ONLY_AST)``, whose tree conversion stops at the same depth (give or take three
    levels at ~1,027), and a twelfth of a LibCST parse. It also rejects some code the parser accepts
    (``nonlocal`` at module level, a duplicate parameter): such a file is measured again with
    ``PyCF_ONLY_AST``, as before. Other syntax errors are left to the engine, which reports them
    with CPython's message and place, once LibCST's parse of the file is seen to end
    (``PARSE_PROBE_SECONDS``).
    """
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    previous = sys.getrecursionlimit()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning/DeprecationWarning: not the user's concern here
            sys.setrecursionlimit(depth + MAX_DEPTH // 3 + 10)
            try:
                try:
                    symtable.symtable(text, "<mpfix>", "exec")
                except SyntaxError:  # a parse error, or a scoping error the parser alone accepts
                    compile(text, "<mpfix>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                            dont_inherit=True)
            finally:
                sys.setrecursionlimit(previous)
    except SyntaxError as exc:
        if exc.msg.startswith(("too many nested parentheses", "too many levels of indentation")):
            raise TooComplex(f"SyntaxError: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
        if not _libcst_ends(text, PARSE_PROBE_SECONDS):
            raise TooComplex(f"{type(exc).__name__}: {exc.msg} (mpfix's parser did not finish on this file "
                             f"within {PARSE_PROBE_SECONDS:g} s)", exc.lineno or 1, max(1, exc.offset or 1)) from None
    except (RecursionError, MemoryError):
        raise TooComplex(f"an expression is nested or chained more than about {MAX_DEPTH} levels deep; "
                         "mpfix's parser would crash or take minutes on it, so the file is not checked") from None
    except ValueError:  # NUL bytes: LibCST reports the file as it always did
        pass


def _libcst_ends(text: str, seconds: float) -> bool:
    """Whether LibCST's parser ends on ``text`` within ``seconds``, tried in a forked child (True where
    forking is unsafe: not Linux, or threads running, as in the editor server)."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return True
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            die_with_parent(parent, signal.SIGKILL)
            cst.parse_module(text)
        except BaseException:
            pass
        os._exit(0)
    deadline = time.monotonic() + seconds
    delay = 0.001
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def parse_module(text: str) -> cst.Module:
    """``libcst.parse_module(text)``, minus the node re-validation; same tree, same errors.

    ``check_depth`` runs first: a file LibCST's native parser could crash on raises TooComplex.
    """
    check_depth(text)
    if _VALIDATING_INIT is None:  # pragma: no cover
        return cst.parse_module(text)
    # The hook is class-wide: a lock keeps two parsing threads from restoring it early.
    with _LOCK:
        cst.CSTNode.__post_init__ = _skip_validation
        try:
            return cst.parse_module(text)
        finally:
            cst.CSTNode.__post_init__ = _VALIDATING_INIT


def validation_active() -> bool:
    """True when LibCST validates new nodes (always, outside ``parse_module``)."""
    return cst.CSTNode.__dict__.get("__post_init__") is _VALIDATING_INIT
