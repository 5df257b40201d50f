"""Which lines of a notebook cell are IPython syntax, by IPython's own rules.

IPython turns four kinds of special syntax into Python before running a cell
(``IPython.core.inputtransformer2``): escaped commands at the start of a logical
line (``!cmd``, ``!!cmd``, ``%magic``, ``?obj``, ``??obj``, and the autocall escapes
``/f a``, ``,f a``, ``;f a``), assignments from them (``x = !ls``, ``x = %time f()``),
and help requests at the end of a logical line (``obj?``, ``obj.attr??``). Escaped
commands and assignments run on through backslash-continued lines (``!python
train.py \\`` then ``  --b=2``); inside an ``if`` they keep their indentation.

Before any of that, IPython cleans the cell up (``leading_empty_lines``, ``leading_indent``):
blank lines at the top are dropped, and the whitespace the first remaining line starts with is
removed from every line that starts with it, so a cell `` print(1)`` runs. ``cleanup(lines)``
says what that removes, without renumbering lines: (number of leading blank lines, the indent,
the 0-based lines that lose it).

``spans(lines)`` returns the physical lines each construct covers. With IPython
importable, IPython's own transformers find them (what Jupyter will run is, by
definition, what they say); otherwise ``_own_spans`` applies the same rules, which
the tests check against IPython on the same cells. Cell magics (``%%bash``) are
handled by the caller: they concern the whole cell.
"""

from __future__ import annotations

import builtins
import io
import keyword
import re
import tokenize

ESCAPES = frozenset({"!", "%", "?", "/", ",", ";"})  # one character; "!!" and "??" begin with them
_LOOP_LIMIT = 500  # IPython's own bound on transformations per cell
_INDENT = re.compile(r"^[ \t]+")
_HELP_TARGET = re.compile(r"(%{0,2}(?!\d)[\w*]+(?:\.(?!\d)[\w*]+|\[-?[0-9]+\])*)(\?\??)$")


def spans(lines: list[str], bound: frozenset[str] | None = None) -> list[tuple[int, int]]:
    """(first, last) 0-based physical line of each IPython construct in ``lines``, in source order.

    ``lines`` keep their line endings (``str.splitlines(keepends=True)``). ``bound``: the names the
    notebook binds (they shadow automagic); None when unknown (see ``automagic``).
    """
    found = _static_spans(lines)
    if not found and automagic(lines, bound):
        first = next(i for i, line in enumerate(lines) if line.strip())
        return [(first, first)]
    return found


# IPython's line magics and its default (posix) aliases, which IPython runs without the `%` when
# automagic is on, the default (``%automagic``): IPython 8/9's InteractiveShell and ipykernel's
# ZMQInteractiveShell. tests/test_automagic.py checks the installed IPython's are all here.
AUTOMAGIC_NAMES = frozenset({
    "alias", "alias_magic", "autoawait", "autocall", "automagic", "autosave", "bookmark", "cat", "cd", "clear",
    "code_wrap", "colors", "conda", "config", "connect_info", "cp", "debug", "dhist", "dirs", "doctest_mode", "ed",
    "edit", "env", "gui", "hist", "history", "killbgscripts", "ldir", "less", "lf", "lk", "ll", "load",
    "load_ext", "loadpy", "logoff", "logon", "logstart", "logstate", "logstop", "ls", "lsmagic", "lx", "macro",
    "magic", "mamba", "man", "matplotlib", "micromamba", "mkdir", "more", "mv", "notebook", "page", "pastebin",
    "pdb", "pdef", "pdoc", "pfile", "pinfo", "pinfo2", "pip", "popd", "pprint", "precision", "prun", "psearch",
    "psource", "pushd", "pwd", "pycat", "pylab", "qtconsole", "quickref", "recall", "rehashx", "reload_ext",
    "rep", "rerun", "reset", "reset_selective", "rm", "rmdir", "run", "save", "sc", "set_env", "sx", "system",
    "tb", "time", "timeit", "unalias", "unload_ext", "uv", "who", "who_ls", "whos", "xdel", "xmode",
})
# IPython's ``split_user_input`` without an escape (a line with one is a static construct above).
_AUTOMAGIC_SPLIT = re.compile(r"^(\s*)([\w.*]*)(.*?$|$)")


def automagic(lines: list[str], bound: frozenset[str] | None = None) -> bool:
    """Whether IPython runs the cell ``lines`` as an unescaped line magic (``pip install x``, ``cd data``).

    IPython's rules (``InteractiveShell.transform_cell``, ``prefilter.AutoMagicChecker``): only a cell
    that is one line; its first word is a line magic or alias (``AUTOMAGIC_NAMES``); not an
    assignment to it (``ls = 1``, ``ls, x = ...``); not shadowed by a keyword, a builtin or a name
    the user's namespace holds. The namespace is the notebook's: ``bound`` when the caller knows it;
    when it does not (None), a line that is valid Python is taken as Python (its name may be bound
    in another cell), so only lines Python cannot parse are automagic.
    """
    text = "".join(lines)
    if len(text.splitlines()) != 1 or not text.strip():
        return False
    line = text.splitlines()[0]
    match = _AUTOMAGIC_SPLIT.match(line)
    if match is None:
        return False
    name, rest = match.group(2), match.group(3).lstrip()
    if name not in AUTOMAGIC_NAMES or (rest and rest[0] in "=,"):
        return False
    if keyword.iskeyword(name) or name in _BUILTINS:
        return False
    if bound is not None:
        return name not in bound
    try:
        compile(line.strip(), "<cell>", "exec")
    except (SyntaxError, ValueError):
        return True
    return False


_BUILTINS = frozenset(dir(builtins))


def _static_spans(lines: list[str]) -> list[tuple[int, int]]:
    if not any(ch in line for line in lines for ch in "!%?/,;"):
        return []
    try:
        from IPython.core import inputtransformer2 as ipython
    except Exception:  # not installed, or broken: the same rules, reimplemented
        return _own_spans(lines)
    try:
        return _ipython_spans(lines, ipython)
    except Exception:  # noqa: BLE001 - IPython's transformers also assert on odd input
        # IPython itself cannot transform the cell (e.g. tokenize's IndentationError on a dedent
        # that matches no outer level): it is not valid IPython, and the parse will say so.
        return _own_spans(lines)


def cleanup(lines: list[str]) -> tuple[int, str, frozenset[int]]:
    """(leading blank lines, indent, dedented lines) that IPython's cleanup transforms remove from ``lines``.

    ``lines`` keep their line endings. The dedented lines are 0-based indices into ``lines``.
    Without IPython, the rules of current IPython (9: ``textwrap.dedent`` of the cell) apply.
    """
    lines = list(lines)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"  # as TransformerManager.transform_cell does before cleaning up
    try:
        from IPython.core import inputtransformer2 as ipython
        rest = ipython.leading_empty_lines(lines)
        after = ipython.leading_indent(rest)
    except Exception:  # not installed, or broken: the same rules, reimplemented
        return _own_cleanup(lines, "common")
    skipped = len(lines) - len(rest)
    if not rest or len(after) != len(rest):
        return skipped, "", frozenset()
    indent = rest[0][: len(rest[0]) - len(after[0])]
    return skipped, indent, frozenset(skipped + i for i, (a, b) in enumerate(zip(rest, after)) if a != b)


def ipython_cleanup_style() -> str | None:
    """How the installed IPython removes a cell's indent, or None without IPython.

    ``"first_line"`` (IPython 8): the first line's indent, from the lines that start with it;
    ``"common"`` (IPython 9): ``textwrap.dedent``, the indent all lines share (whitespace-only lines
    become empty).
    """
    try:
        from IPython.core.inputtransformer2 import leading_indent
    except Exception:
        return None
    return "first_line" if leading_indent(["  a\n", "b\n"])[0] == "a\n" else "common"


_WHITESPACE_ONLY = re.compile(r"^[ \t]+$")


def _own_cleanup(lines: list[str], style: str = "common") -> tuple[int, str, frozenset[int]]:
    skipped = next((i for i, line in enumerate(lines) if line and not line.isspace()), 0)
    rest = lines[skipped:]
    if style == "first_line":
        match = _INDENT.match(rest[0]) if rest else None
        if match is None:
            return skipped, "", frozenset()
        indent = match.group(0)
        return skipped, indent, frozenset(skipped + i for i, line in enumerate(rest) if line.startswith(indent))
    # textwrap.dedent: whitespace-only lines are emptied, then the margin every other line shares goes.
    margins = [_INDENT.match(line) for line in rest if line.strip()]
    indent = ""
    if not margins and rest:  # nothing but blank lines: IPython reports the first one's whitespace
        first = _INDENT.match(rest[0])
        indent = first.group(0) if first else ""
    elif margins and all(margins):
        indent = margins[0].group(0)
        for match in margins[1:]:
            other = match.group(0)
            while not other.startswith(indent):
                indent = indent[:-1]
    changed = frozenset(
        skipped + i for i, line in enumerate(rest)
        if (line.strip() and indent) or _WHITESPACE_ONLY.match(line.rstrip("\r\n")))
    return skipped, indent, changed


def dedent(lines: list[str]) -> tuple[list[str], str, frozenset[int]]:
    """``lines`` as IPython runs them after its cleanup, line for line: (lines, indent, dedented lines).

    Leading blank lines stay (Python ignores them; keeping them keeps the line numbers).
    """
    _, indent, dedented = cleanup(lines)
    return [line[len(indent):] if i in dedented else line for i, line in enumerate(lines)], indent, dedented


def _track(lines: list[str], find_and_replace) -> list[tuple[int, int]]:
    """Apply ``find_and_replace`` until it finds nothing, mapping each replacement back to original lines.

    ``find_and_replace(lines)`` returns (start line, new lines) or None. A replacement turns
    one construct into a single Python line, so the original range it covered follows from
    how many lines it removed.
    """
    lines = list(lines)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    first = list(range(len(lines)))
    last = list(range(len(lines)))
    found: list[tuple[int, int]] = []
    for _ in range(_LOOP_LIMIT):
        step = find_and_replace(lines)
        if step is None:
            break
        start, new = step
        covered = len(lines) - len(new) + 1
        span = (first[start], last[start + covered - 1])
        found.append(span)
        first[start: start + covered] = [span[0]]
        last[start: start + covered] = [span[1]]
        lines = new
    return sorted(found)


def _ipython_spans(lines: list[str], ipython) -> list[tuple[int, int]]:
    manager = ipython.TransformerManager()

    def step(current: list[str]):
        tokens = ipython.make_tokens_by_line(current)
        candidates = [t for t in (cls.find(tokens) for cls in manager.token_transformers) if t]
        for transformer in sorted(candidates, key=ipython.TokenTransformBase.sortby):
            try:
                return transformer.start_line, transformer.transform(current)
            except SyntaxError:
                continue
        return None

    return _track(lines, step)


# -- the same rules without IPython --------------------------------------------------------------

def _logical_lines(lines: list[str]) -> list[list[tokenize.TokenInfo]]:
    """Tokens grouped by logical line: a line ends at NEWLINE, or at NL outside brackets."""
    grouped: list[list[tokenize.TokenInfo]] = [[]]
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            grouped[-1].append(token)
            if token.type == tokenize.NEWLINE or (token.type == tokenize.NL and depth <= 0):
                grouped.append([])
            elif token.string in "([{" and token.type == tokenize.OP:
                depth += 1
            elif token.string in ")]}" and token.type == tokenize.OP and depth > 0:
                depth -= 1
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # what was read so far is what IPython works with too
    if not grouped[-1]:
        grouped.pop()
    return grouped


def _first_code_token(line: list[tokenize.TokenInfo]) -> int:
    index = 0
    while index < len(line) and line[index].type in (tokenize.INDENT, tokenize.DEDENT):
        index += 1
    return index


def _top_level_assign(line: list[tokenize.TokenInfo]) -> int | None:
    depth = 0
    for index, token in enumerate(line):
        if token.string == "=" and depth == 0:
            return index
        if token.string in ("(", "[", "{"):
            depth += 1
        elif token.string in (")", "]", "}") and depth > 0:
            depth -= 1
    return None


def _continued_end(lines: list[str], start: int) -> int:
    """The last physical line of a backslash-continued line that starts at ``start``."""
    end = start
    while end < len(lines) - 1 and lines[end].endswith("\\\n"):
        end += 1
    return end


def _find(tokens: list[list[tokenize.TokenInfo]]) -> list[tuple[tuple[int, int, int], str, tuple]]:
    """Every rule's first match: ((line, column, priority), kind, extra); lines 0-based."""
    found = []
    for line in tokens:  # x = %magic
        index = _top_level_assign(line)
        if index is not None and len(line) >= index + 2 and line[index + 1].string == "%" \
                and len(line) > index + 2 and line[index + 2].type == tokenize.NAME:
            row, col = line[index + 1].start
            found.append(((row - 1, col, 10), "assign", ()))
            break
    for line in tokens:  # x = !cmd
        index = _top_level_assign(line)
        if index is None or line[index].line.strip().startswith("=") or len(line) < index + 2 \
                or line[index + 1].type != tokenize.ERRORTOKEN:
            continue
        hit = None
        for token in line[index + 1:]:
            if token.type != tokenize.ERRORTOKEN:
                break
            if token.string == "!":
                hit = token
                break
            if not token.string.isspace():
                break
        if hit is not None:
            found.append(((hit.start[0] - 1, hit.start[1], 10), "assign", ()))
            break
    for line in tokens:  # !cmd, %magic, ?obj, /f a …
        if not line:
            continue
        index = _first_code_token(line)
        if index < len(line) and line[index].string in ESCAPES:
            row, col = line[index].start
            found.append(((row - 1, col, 10), "escape", ()))
            break
    for line in tokens:  # obj?
        if len(line) > 2 and line[-2].string == "?":
            index = _first_code_token(line)
            row, col = line[index].start
            found.append(((row - 1, col, 5), "help", (line[-2].start[0] - 1,)))
            break
    return found


def _own_step(lines: list[str]):
    for (start, col, _), kind, extra in sorted(_find(_logical_lines(lines))):
        if kind == "help":
            (question_line,) = extra
            piece = "".join(lines[start: question_line + 1])
            if _HELP_TARGET.search(piece[col:]) is None:
                continue  # IPython raises SyntaxError here and tries the next candidate
            end = question_line
        else:
            end = _continued_end(lines, start)
        # One neutral Python line in place of the construct, as IPython leaves one call.
        replacement = lines[start][:col] + "None\n"
        return start, lines[:start] + [replacement] + lines[end + 1:]
    return None


def _own_spans(lines: list[str]) -> list[tuple[int, int]]:
    return _track(lines, _own_step)
