"""Jupyter notebooks: check and fix the code cells of an ``.ipynb`` file.

The code cells are linted together as one module, because a notebook's cells
share one namespace: ``import tensorflow as tf`` in cell 1 is what makes
``tf.function`` in cell 5 TensorFlow's. Each cell is preceded by a marker
statement, so findings map back to ``(cell, line in cell)`` and fixed text
splits back into cells.

IPython syntax (``%time``, ``%%capture``, ``!pip install``, ``x = !ls``,
``obj?``, a ``!cmd \\`` continued on the next line, an indented ``!cmd`` inside an
``if``) is not Python. Which lines are IPython's is decided by IPython's own rules
(``mpfix.ipython_syntax``); each such physical line is masked to a ``pass``
placeholder with the indentation of the construct's first line before parsing,
and restored, byte for byte, afterwards. Cell magics whose body is not Python
(``%%bash``, ``%%writefile``…) skip the cell. A cell that still does not parse is
reported (MP000) and left out; the others are checked.

As IPython does first, a cell whose first non-blank line is indented (`` print(1)``) is
checked with that indent removed from every line that starts with it
(``ipython_syntax.cleanup``). Findings point into the cell as written: their columns on those
lines are shifted back by the indent. A fixed cell is written back with its indent: lines a
fix did not touch keep their text byte for byte, new lines get the indent; if the result
would not clean up to the fixed code, nothing is written.

Notebooks are read with the ``json`` module (nbformat is not needed: pre-commit
hook environments do not have it). They are written back in the JSON layout the
file already has (indent, key order, ASCII escapes; Jupyter's own is one-space
indents with sorted keys), checked first to reproduce the original byte for byte.
Only the ``source`` of changed cells differs; if no layout reproduces the file,
mpfix reports the findings and refuses to rewrite it.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from mpfix import ipython_syntax
from mpfix.findings import Edit, FileError, Finding, Position
from mpfix.source import lines as source_lines

# Cell magics whose body is Python (IPython runs it): only the magic line is masked.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "tensorflow_version"})

_MARKER = "__mpfix_cell_{}__"
_MARKER_LINE = re.compile(r"^__mpfix_cell_(\d+)__\r?\n?$")
_PLACEHOLDER = "pass  # __mpfix_ipython_{}__"
_PLACEHOLDER_LINE = re.compile(r"^[ \t]*pass  # __mpfix_ipython_(\d+)__(\r?\n)?$")
_CELL_MAGIC = re.compile(r"^%%(\w+)")


@dataclass
class _Cell:
    index: int  # 0-based position among all cells of the notebook
    masked: str  # Python text with IPython lines masked, ending in "\n"
    originals: dict[int, str]  # placeholder id → original line (with its newline)
    trailing_newline: bool  # whether the cell's source ended with "\n"
    source: str = ""  # the cell's source as written
    indent: str = ""  # IPython's leading indent, removed from the lines in ``dedented``
    dedented: frozenset[int] = frozenset()  # 0-based lines that lost ``indent`` in ``masked``

    @property
    def number(self) -> int:
        return self.index + 1


def mask(source: str, counter: list[int]) -> tuple[str, dict[int, str]] | None:
    """(masked text, originals) for one cell's source; None when the cell is not Python.

    The text is the cell after IPython's cleanup (``dedent``): line for line, with the leading
    indent removed. ``originals`` hold the lines as they are in that text.
    """
    lines, _, _ = ipython_syntax.dedent(source.splitlines(keepends=True))
    skipped, _, _ = ipython_syntax.cleanup(lines)
    first_line = lines[skipped] if skipped < len(lines) else ""
    cell_magic = _CELL_MAGIC.match(first_line)
    if cell_magic is not None and cell_magic.group(1) not in PYTHON_CELL_MAGICS:
        return None  # %%bash, %%writefile, %%html…: the body is not Python
    originals: dict[int, str] = {}
    out = list(lines)
    masked_lines: dict[int, str] = {}  # physical line -> the indentation of its construct
    if cell_magic is not None:
        masked_lines[skipped] = ""  # %%time, %%capture…: only the magic line is IPython's
        body = ["\n"] + lines[skipped + 1:]  # keeps line numbers; the magic line itself is not Python
    else:
        body = lines[skipped:]  # IPython drops the leading blank lines before its transforms
    for first, last in ((skipped + a, skipped + b) for a, b in ipython_syntax.spans(body)):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip(" \t"))]
        for number in range(first, last + 1):
            masked_lines[number] = indent
    for number in sorted(masked_lines):
        line = lines[number]
        key = counter[0]
        counter[0] += 1
        originals[key] = line
        newline = line[len(line.rstrip("\r\n")):]
        out[number] = masked_lines[number] + _PLACEHOLDER.format(key) + newline
    text = "".join(out)
    if text and not text.endswith("\n"):
        text += "\n"
    return text, originals


def shift(cell: _Cell, dedented: frozenset[int], position: Position) -> Position:
    """A position in the cleaned-up cell, in the cell as written: columns move by the indent."""
    if position.line - 1 in dedented:
        return Position(position.line, position.column + len(cell.indent))
    return position


def reindent(cell: _Cell, fixed: str) -> tuple[str, frozenset[int]] | None:
    """The fixed (cleaned-up) cell text with the cell's indent back, and the lines that carry it.

    Lines the fix did not touch keep their original text; new non-blank lines get the indent.
    None when IPython's cleanup of the result would not give ``fixed`` back.
    """
    if not cell.indent:
        return fixed, frozenset()
    import difflib

    def ended(lines: list[str]) -> list[str]:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        return lines

    original = ended(cell.source.splitlines(keepends=True))
    cleaned = ended(ipython_syntax.dedent(list(original))[0])
    new = ended(fixed.splitlines(keepends=True))
    out: list[str] = []
    indented: set[int] = set()
    matcher = difflib.SequenceMatcher(None, cleaned, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i in range(i1, i2):
                if i in cell.dedented:
                    indented.add(len(out))
                out.append(original[i])
        else:
            for line in new[j1:j2]:
                if line.strip():
                    indented.add(len(out))
                    out.append(cell.indent + line)
                else:
                    out.append(line)
    if ended(ipython_syntax.dedent(list(out))[0]) != new:
        return None
    return "".join(out), frozenset(indented)


def unmask(text: str, originals: dict[int, str]) -> str | None:
    """The text with every placeholder restored; None if a fix lost or copied one."""
    seen: set[int] = set()
    out = []
    for line in text.splitlines(keepends=True):
        match = _PLACEHOLDER_LINE.match(line)
        if match is not None and int(match.group(1)) in originals:
            key = int(match.group(1))
            if key in seen:
                return None
            seen.add(key)
            restored = originals[key]
            if not restored.endswith(("\n", "\r")) and match.group(2):
                restored += match.group(2)
            out.append(restored)
        else:
            out.append(line)
    if seen != set(originals):
        return None
    return "".join(out)


class _Combined:
    """The code cells joined into one module, each after a marker line."""

    def __init__(self, cells: list[_Cell]) -> None:
        self.cells = cells
        self.by_number = {c.number: c for c in cells}
        parts = []
        for cell in cells:
            parts.append(_MARKER.format(cell.number) + "\n")
            parts.append(cell.masked)
        self.text = "".join(parts)

    def marker_lines(self, text: str) -> list[tuple[int, int]] | None:
        """[(line of the marker, cell number)] in ``text``, or None if markers were disturbed."""
        found = []
        for number, line in enumerate(source_lines(text), 1):
            match = _MARKER_LINE.match(line)
            if match is not None:
                found.append((number, int(match.group(1))))
        if [cell for _, cell in found] != [c.number for c in self.cells]:
            return None
        return found

    def locate(self, markers: list[tuple[int, int]], line: int) -> tuple[int, int]:
        """(cell number, line within the cell) of a line of the combined text."""
        cell, start = markers[0][1], markers[0][0]
        for marker_line, number in markers:
            if marker_line < line:
                cell, start = number, marker_line
            else:
                break
        return cell, max(1, line - start)

    def split(self, text: str) -> dict[int, str] | None:
        """Cell number → unmasked cell text; None if the text no longer maps onto the cells."""
        markers = self.marker_lines(text)
        if markers is None:
            return None
        lines = source_lines(text)
        result: dict[int, str] = {}
        bounds = [line for line, _ in markers] + [len(lines) + 1]
        for i, (marker_line, number) in enumerate(markers):
            body = lines[marker_line: bounds[i + 1] - 1]
            if i == 0:
                body = lines[: marker_line - 1] + body  # imports a fix put above the first marker
            restored = unmask("".join(body), self.by_number[number].originals)
            if restored is None:
                return None
            result[number] = restored
        return result

    def readable(self, text: str) -> str:
        """The code cells as a percent-format script (``# %% cell N``), for review diffs."""
        cells = self.split(text)
        if cells is None:
            return text
        return "".join(f"# %% cell {number}\n{body}" for number, body in cells.items())


def _map_position(combined: _Combined, markers, position: Position, dedented=None) -> tuple[int, Position]:
    """(cell, position in the cell as written); ``dedented``: cell → its indented lines (default: as read)."""
    cell, line = combined.locate(markers, position.line)
    known = combined.by_number[cell]
    lines = known.dedented if dedented is None else dedented.get(cell, frozenset())
    return cell, shift(known, lines, Position(line, position.column))


def _map_finding(combined: _Combined, markers, finding: Finding, dedented=None) -> Finding:
    cell, start = _map_position(combined, markers, finding.start, dedented)
    _, end = _map_position(combined, markers, finding.end, dedented)
    edits = []
    for edit in finding.edits:
        _, s = _map_position(combined, markers, edit.start, dedented)
        _, e = _map_position(combined, markers, edit.end, dedented)
        edits.append(Edit(s, e, edit.content))
    return replace(finding, start=start, end=end, cell=cell, edits=edits)


# -- reading and writing --------------------------------------------------------------------
def read_notebook(text: str, path: Path):
    """The notebook's JSON as a dict, or a FileError saying why it cannot be read (never raises:
    invalid or too deeply nested JSON, no list of cells, nbformat < 4, a malformed cell or source).
    ``check``/``apply`` and ``verify``/``repair`` read notebooks with it."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return FileError(str(path), f"not a notebook: invalid JSON ({exc.msg})", exc.lineno, exc.colno)
    except RecursionError:  # json's C scanner recurses once per level
        return FileError(str(path), "not a notebook mpfix can read: its JSON is nested too deeply")
    except ValueError:  # past Python's limit on int digits (sys.get_int_max_str_digits), not a JSONDecodeError
        return FileError(str(path), "not a notebook mpfix can read: its JSON holds a number too long to read")
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return FileError(str(path), "not a notebook: no list of cells (only nbformat 4 notebooks are checked)")
    if not isinstance(raw.get("nbformat"), int) or raw["nbformat"] < 4:
        return FileError(str(path), "not a notebook mpfix can read: only nbformat 4 notebooks are checked")
    for index, cell in enumerate(raw["cells"]):
        if not isinstance(cell, dict) or not isinstance(cell.get("source", ""), (str, list)):
            return FileError(str(path), f"not a notebook mpfix can read: cell {index + 1} is malformed")
        source = cell.get("source", "")
        if isinstance(source, list) and not all(isinstance(line, str) for line in source):
            kind = next(type(line).__name__ for line in source if not isinstance(line, str))
            return FileError(str(path), f"not a notebook mpfix can read: cell {index + 1}'s source holds a value "
                                        f"of type {kind} (nbformat 4 wants a string or a list of strings)")
        if cell.get("cell_type") == "code":
            # JSON may escape half of a UTF-16 pair ("\udce7"): no text holds it, CPython cannot compile
            # it, and encoding the cell for the engine raised (an "internal error").
            lone = _LONE_SURROGATE.search(cell_source(cell))
            if lone is not None:
                return FileError(str(path), f"not a notebook mpfix can read: cell {index + 1} holds a lone "
                                            f"surrogate ({ascii(lone.group())[1:-1]}), half of a UTF-16 pair, "
                                            "which is not text")
    return raw


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _layouts(text: str):
    """JSON layouts to try, most likely first: (indent, sort_keys, ensure_ascii)."""
    second = text.split("\n", 2)[1] if text.count("\n") >= 2 else ""
    indent = len(second) - len(second.lstrip(" "))
    indents = [indent] if indent else [1, 2, 4]
    ascii_options = [False, True] if text.isascii() else [False]
    return [(i, s, a) for i in indents for s in (True, False) for a in ascii_options]


def _dump(raw: dict, layout, newline_at_end: bool) -> str:
    indent, sort_keys, ensure_ascii = layout
    out = json.dumps(raw, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii, separators=(",", ": "))
    return out + "\n" if newline_at_end else out


def _writer(text: str, raw: dict):
    """A function (changed sources → new file text) that reproduces ``text`` exactly, or None."""
    newline_at_end = text.endswith("\n")
    for layout in _layouts(text):
        if _dump(raw, layout, newline_at_end) == text:
            def write_with_layout(sources: dict[int, str], layout=layout) -> str:
                new = copy.deepcopy(raw)
                for index, source in sources.items():
                    cell = new["cells"][index]
                    cell["source"] = source.splitlines(keepends=True) if isinstance(cell["source"], list) else source
                return _dump(new, layout, newline_at_end)
            return write_with_layout
    return None


def is_python_notebook(raw: dict) -> bool:
    """False for a notebook whose kernel names another language (``language_info.name``, else
    ``kernelspec.language``, as Jupyter writes them): its cells are not Python. True when unsaid."""
    metadata = raw.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        language = table.get(field) if isinstance(table, dict) else None
        if isinstance(language, str) and language.strip():
            return language.strip().lower().startswith(("python", "ipython"))
    return True


def cell_source(cell: dict) -> str:
    """A cell's source as one text (nbformat 4 writes a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


_read, _source = read_notebook, cell_source  # the names noqa.py uses


# -- the runner's entry point ---------------------------------------------------------------
def process_notebook(path: Path, source, job, ignored: tuple[str, ...] = (), accept=None, *, engine):
    """Lint (and for diff/apply, fix) one notebook; never raises for bad input."""
    from mpfix.jobs import FileResult, Mode
    from mpfix.writer import write_atomic

    result = FileResult(path=path)
    read = read_notebook(source.text, path)
    if isinstance(read, FileError):
        result.errors.append(read)
        return result
    raw = read
    if not is_python_notebook(raw):
        return result  # R, Julia...: no Python to check (Ruff skips them too)

    counter = [0]
    cells: list[_Cell] = []
    for index, cell in enumerate(raw["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        text = cell_source(cell)
        masked = mask(text, counter)
        if masked is None or not masked[0].strip():
            continue
        try:
            compile(masked[0], f"cell {index + 1}", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                    dont_inherit=True)
        except SyntaxError as exc:
            _, indent, dedented = ipython_syntax.cleanup(text.splitlines(keepends=True))
            line, offset = exc.lineno or 1, exc.offset or 1
            offset += len(indent) if line - 1 in dedented else 0
            result.errors.append(FileError(str(path), f"cell {index + 1}: SyntaxError: {exc.msg}; cell not checked",
                                           line, offset))
            continue
        _, indent, dedented = ipython_syntax.cleanup(text.splitlines(keepends=True))
        cells.append(_Cell(index, masked[0], masked[1], text.endswith("\n"), text, indent, dedented))
    if not cells:
        return result

    combined = _Combined(cells)
    fixing = job.mode is not Mode.CHECK
    review = None
    if accept is not None:
        def review(finding: Finding, before: str, after: str) -> bool:
            markers = combined.marker_lines(before)
            shown = _map_finding(combined, markers, finding) if markers else finding
            return accept(shown, combined.readable(before), combined.readable(after))
    try:
        lint = engine.lint(combined.text, path, fix=fixing, edits=job.want_edits, ignored=ignored, accept=review)
    except Exception as exc:  # a bug in a rule must not stop the run or touch the file
        result.errors.append(FileError(str(path), f"internal error in mpfix ({type(exc).__name__}: {exc}); "
                                                  "nothing was written; please report it"))
        return result
    markers = combined.marker_lines(combined.text)
    result.findings = [_map_finding(combined, markers, f) for f in lint.findings]
    for error in lint.errors:
        cell, line = combined.locate(markers, error.line)
        result.errors.append(replace(error, message=f"cell {cell}: {error.message}", line=line))
    if lint.fixed_text is None or lint.errors:
        return result
    # Findings after fixing are positioned in the fixed text.
    fixed_markers = combined.marker_lines(lint.fixed_text)
    fixed_cells = combined.split(lint.fixed_text)
    if fixed_markers is None or fixed_cells is None:
        result.errors.append(FileError(str(path), "fixes could not be mapped back onto the notebook's cells; "
                                                  "nothing was written"))
        return result
    sources: dict[int, str] = {}
    indented: dict[int, frozenset[int]] = {}
    for cell in cells:
        back = reindent(cell, fixed_cells[cell.number])
        if back is None:
            result.errors.append(FileError(str(path), f"cell {cell.number}: the fixed cell could not be given its "
                                                      "leading indent back; nothing was written"))
            return result
        new, indented[cell.number] = back
        if not cell.trailing_newline and new.endswith("\n"):
            new = new[:-1]
        if new != cell_source(raw["cells"][cell.index]):
            sources[cell.index] = new
    result.findings = [_map_finding(combined, fixed_markers, f, indented) for f in lint.findings]
    if not sources:
        return result
    writer = _writer(source.text, raw)
    if writer is None:
        result.errors.append(FileError(str(path), "the notebook's JSON layout is not one mpfix can reproduce exactly, "
                                                  "so it was not rewritten (open and save it in Jupyter, then rerun)"))
        return result
    new_text = writer(sources)
    result.original = source.text
    result.fixed = new_text
    result.applied = lint.applied
    if job.mode is Mode.APPLY:
        try:
            write_atomic(path, source.encode(new_text), expected=source.encode(source.text))
            result.written = True
        except OSError as exc:
            result.errors.append(FileError(str(path), f"cannot write file: {exc.strerror or exc}; nothing was written"))
    return result
