"""Parse source with LibCST, without re-checking what its parser already guarantees.

Every LibCST node runs ``_validate()`` from ``__post_init__``. That check is for
trees built by hand (a rule's replacement nodes); a tree the parser built from
source is valid by construction, yet re-checking it costs about a fifth of a
parse on real code (``benchmarks/bench_check.py`` measures it). ``parse_module``
switches the check off for the parse only, and in the parsing thread only: nodes
built anywhere else, fixes included (in another thread too), are still validated.
Fixed text is re-parsed here and also compiled by CPython before it is written.
``benchmarks/parse_equality.py`` compares the trees with LibCST's own on whole corpora.

Importing this module also gives LibCST's node classes (ABCs) the plain MRO
check for ``isinstance`` (``_MroChecks``): the same answers, without a
Python-level ``ABCMeta.__instancecheck__`` call per negative check.
"""

from __future__ import annotations

import abc
import ast
import hashlib
import symtable
import sys
import threading
import warnings

import libcst as cst

from mpfix import parse_probe

# The hook is LibCST's internal detail: a version without it gets the plain parse.
_VALIDATING_INIT = cst.CSTNode.__dict__.get("__post_init__")

_LOCK = threading.Lock()
_PARSING: int | None = None  # the thread inside ``parse_module``'s LibCST parse, while it runs


def _skip_validation(self: cst.CSTNode, _ident=threading.get_ident) -> None:
    # The hook is class-wide, and the parse gives other threads the interpreter between nodes: a node
    # one of them builds meanwhile (the editor server's fix) is validated as ever.
    if _ident() != _PARSING:
        _VALIDATING_INIT(self)


class _MroChecks(abc.ABCMeta):
    """``ABCMeta`` whose ``isinstance``/``issubclass`` are ``type``'s own check of the class's MRO.

    LibCST's node classes are all ABCs, so every ``isinstance(node, cst.Attribute)`` that is False (and
    every one against a base such as ``cst.BaseExpression``) runs ``ABCMeta.__instancecheck__``, a
    Python-level call: 3.1M of them in a check of tf-models (rules and analyses, ``<frozen abc>`` in
    the profile). Without a virtual subclass (``register``) or a ``__subclasshook__`` — LibCST has
    neither — ABCMeta answers exactly as the MRO does. ``register`` hands the class, and the classes
    above it, back to ``ABCMeta`` first, so a virtual subclass is still seen."""

    __instancecheck__ = type.__instancecheck__
    __subclasscheck__ = type.__subclasscheck__

    def register(cls, subclass):
        for above in cls.__mro__:
            if type(above) is _MroChecks:
                above.__class__ = abc.ABCMeta
        return abc.ABCMeta.register(cls, subclass)


def _plain_abcs() -> list[type]:
    """LibCST's node classes, when ``ABCMeta``'s checks of every one are the MRO's: no registered
    virtual subclass and no ``__subclasshook__`` anywhere among them (else none: nothing changes)."""
    dump = getattr(abc, "_get_dump", None)  # CPython's C ``_abc``: (registry, cache, negative cache, version)
    found, seen, stack = [], set(), [cst.CSTNode]
    while stack:
        node_class = stack.pop()
        if node_class in seen:
            continue
        seen.add(node_class)
        stack.extend(node_class.__subclasses__())
        if dump is None or dump(node_class)[0] or any("__subclasshook__" in vars(c) for c in node_class.__mro__
                                                          if c is not object):
            return []
        if type(node_class) is abc.ABCMeta and node_class.__module__.startswith("libcst."):
            found.append(node_class)
    return found


for _node_class in _plain_abcs():
    _node_class.__class__ = _MroChecks


# Expressions nested or chained deeper than this are refused before LibCST sees them. LibCST's
# native parser segfaults on ~3,000 nested parentheses or an 8,000-long ``a.b.b...``/``1 + 1 + ...``
# chain (killing the run or the editor server), and its time grows with the square of the depth:
# ``f()()...`` 1,000 calls long takes 1.7 s, 3,000 over two minutes. CPython refuses 200 nested
# parentheses and about 3,000 levels of syntax tree; no hand-written code comes near 1,000.
MAX_DEPTH = 1000

# A file CPython rejects is parsed by LibCST only to report it, and LibCST's error recovery can
# take minutes on a long call chain in the wrong place (``a()()...(`` 8,000 calls inside a ``def``'s
# parameters: 30 s+; the time grows ~4.5x per doubling). Its parse of such a file is tried outside this
# process first (``mpfix.parse_probe``: a forked child, or where threads run a reused helper process)
# and given this much CPU time (the parsing process's, so a loaded machine does not change the answer);
# past it the file is an MP000 with CPython's message.
PARSE_PROBE_SECONDS = 10.0


# CPython's messages for a literal its parser reads but cannot turn into a value (any Python version):
# LibCST keeps such a literal as text, and an analysis evaluating it raises.
LITERAL_ERRORS = ("Exceeds the limit", "(unicode error)", "(value error)", "bytes can only contain ASCII")


class TooComplex(RecursionError):
    """Source nested too deeply to parse safely (a RecursionError: callers already report those)."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def check_depth(text: str) -> bool:
    """Raise TooComplex when ``text`` nests deeper than CPython or ``MAX_DEPTH`` allow; else whether
    CPython's parser accepted it (False: a syntax error the engine's parse reports, or NUL bytes).

    CPython's own compiler measures it, at C speed: its symbol-table pass (``symtable``) walks the
    parsed tree and stops at three times the recursion limit left, so the limit is lowered for this
    one call. That pass builds no Python objects per node: it costs about 60% of
    ``compile(PyCF_ONLY_AST)``, whose tree conversion stops at the same depth (give or take three
    levels at ~1,027), and a twelfth of a LibCST parse. It also rejects some code the parser accepts
    (``nonlocal`` at module level, a duplicate parameter): such a file is measured again with
    ``PyCF_ONLY_AST``, as before. Other syntax errors are left to the engine, which reports them
    with CPython's message and place, once LibCST's parse of the file is seen to end
    (``PARSE_PROBE_SECONDS``). Where other threads run (the editor server) the recursion limit, one
    per process, is left alone: ``_measure_by_ast``.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning/DeprecationWarning: not the user's concern here
            if threading.active_count() > 1:
                _measure_by_ast(text)
            else:
                _measure_by_symtable(text)
        return True
    except SyntaxError as exc:
        if exc.msg.startswith(("too many nested parentheses", "too many levels of indentation")):
            raise TooComplex(f"SyntaxError: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
        seen = _probe(text)
        if seen is _DID_NOT_END or seen is _CRASHED:
            why = (f"did not finish on this file within {PARSE_PROBE_SECONDS:g} s" if seen is _DID_NOT_END
                   else "crashed on this file")
            raise TooComplex(f"{type(exc).__name__}: {exc.msg} (mpfix's parser {why})",
                             exc.lineno or 1, max(1, exc.offset or 1)) from None
        if seen is None and exc.msg.startswith(LITERAL_ERRORS):
            # LibCST accepts a literal CPython cannot build (an int over 4,300 digits, ``"\\N{NOPE}"``):
            # reported as CPython says, and no rule runs on it (one did: literal_eval of that literal
            # raised inside an analysis, "internal error"). Other texts only LibCST parses are newer
            # Python (``type X = int`` under 3.11): linted as before; apply writes nothing into them.
            raise cst.ParserSyntaxError(exc.msg, lines=text.split("\n"), raw_line=exc.lineno or 1,
                                        raw_column=max(0, (exc.offset or 1) - 1)) from None
        return False
    except (RecursionError, MemoryError):
        raise TooComplex(f"an expression is nested or chained more than about {MAX_DEPTH} levels deep; "
                         "mpfix's parser would crash or take minutes on it, so the file is not checked") from None
    except ValueError:  # NUL bytes: LibCST reports the file as it always did
        return False


def _measure_by_symtable(text: str) -> None:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + MAX_DEPTH // 3 + 10)
    try:
        try:
            symtable.symtable(text, "<mpfix>", "exec")
        except SyntaxError:  # a parse error, or a scoping error the parser alone accepts
            compile(text, "<mpfix>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                    dont_inherit=True)
    finally:
        sys.setrecursionlimit(previous)


def _measure_by_ast(text: str) -> None:
    """The same limit where other threads run, without touching the recursion limit: it is one per
    process, and lowering it made another thread's deep call fail (a TensorFlow import beside a
    linting thread in the test suite raised RecursionError, 2026-12-02). The tree's depth is
    counted without recursion; it matches symtable's stop within a few levels."""
    tree = compile(text, "<mpfix>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                   dont_inherit=True)
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RecursionError("nested too deeply")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


# What is known of LibCST's parse of a text CPython rejects, by the text's digest: it did not end in
# time, it ended (None: parsed, or not known), or LibCST's syntax error (message, line, column), seen by
# the probe or by ``parse_module`` itself (when the probe knew nothing). The verify side parses one user's text up to four
# times (instrument, two island edits, the write validation) and the server on every request; fuzz
# input mutated-5 (a 66-line file whose error recovery takes LibCST ~8 s) cost a probe plus a parse each
# time, 48 s in all. A known error is raised again without parsing. Threads share the table: ``_TABLE``.
_DID_NOT_END = parse_probe.DID_NOT_END
_CRASHED = parse_probe.CRASHED
_PROBED: dict[bytes, object] = {}
_PROBED_MAX = 64
_TABLE = threading.Lock()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _remember(key: bytes, seen: object) -> None:
    with _TABLE:
        if key not in _PROBED and len(_PROBED) >= _PROBED_MAX:
            _PROBED.pop(next(iter(_PROBED)))
        _PROBED[key] = seen


def _probe(text: str) -> object:
    key = _digest(text)
    with _TABLE:
        if key in _PROBED:
            return _PROBED[key]
    seen = _libcst_probe(text, PARSE_PROBE_SECONDS)  # outside the lock: it may take PARSE_PROBE_SECONDS
    _remember(key, seen)
    return seen


def _known_error(text: str) -> cst.ParserSyntaxError | None:
    """LibCST's syntax error for ``text`` when a probe or an earlier parse already saw it."""
    if not _PROBED:
        return None
    key = _digest(text)
    with _TABLE:
        seen = _PROBED.get(key)
    if not isinstance(seen, tuple):
        return None
    message, line, column = seen
    return cst.ParserSyntaxError(message, lines=[line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")], raw_line=line, raw_column=column)


def _libcst_probe(text: str, seconds: float) -> object:
    """Whether LibCST's parser ends on ``text`` within ``seconds``, tried outside this process (a forked
    child; where threads run, the reused helper process): ``_DID_NOT_END``, ``_CRASHED``, its syntax
    error as (message, line, column), or None (it parsed, or nothing is known)."""
    return parse_probe.probe(text, seconds)


def parse_module(text: str, depth_checked: bool = False) -> cst.Module:
    """``libcst.parse_module(text)``, minus the node re-validation; same tree, same errors.

    ``check_depth`` runs first: a file LibCST's native parser could crash on raises TooComplex
    (``depth_checked``: the caller ran it on this very text already, ``mpfix.gate``).
    """
    module = _parse_module(text, depth_checked)
    if text.endswith("\r") and not module.has_trailing_newline:
        # LibCST prints a text ending in a lone "\r" back without it (``parse_module("x = 1\r").code ==
        # "x = 1"``): every fix of a CR-only file dropped its last newline (turn 14 fuzz).
        module = module.with_changes(has_trailing_newline=True)
    return module


def _parse_module(text: str, depth_checked: bool) -> cst.Module:
    if not depth_checked:
        check_depth(text)
    known = _known_error(text)
    if known is not None:
        raise known
    try:
        if _VALIDATING_INIT is None:  # pragma: no cover
            return cst.parse_module(text)
        # The hook is class-wide: a lock keeps two parsing threads from restoring it early.
        global _PARSING
        with _LOCK:
            _PARSING = threading.get_ident()
            cst.CSTNode.__post_init__ = _skip_validation
            try:
                return cst.parse_module(text)
            finally:
                cst.CSTNode.__post_init__ = _VALIDATING_INIT
                _PARSING = None
    except cst.ParserSyntaxError as exc:  # the next parse of this text raises it again without parsing
        _remember(_digest(text), (exc.message, exc.raw_line, exc.raw_column))
        raise


def validation_active() -> bool:
    """True when LibCST validates new nodes (always, outside ``parse_module``)."""
    return cst.CSTNode.__dict__.get("__post_init__") is _VALIDATING_INIT
