"""Parent side: ``mpfix verify x.ipynb`` runs the notebook's code cells as one script.

The cells run in order in one namespace, as "Run All" does. IPython lines (``%magic``,
``!shell``, ``x = !cmd``, ``obj?``) are handled as ``mpfix check`` handles them (the same
``mpfix.notebooks.mask``): each becomes a ``pass`` placeholder, so it is not run; a cell
whose cell magic makes its body something other than Python (``%%bash``,
``%%writefile``...) is left out. The script is written to verify's temporary folder and run
with the notebook's folder as working directory and first on ``sys.path``; tracebacks and
layer origins are reported as ``x.ipynb cell N, line M``.
"""

from __future__ import annotations

from pathlib import Path

from mpfix.verify import frames


class NotebookError(Exception):
    """The file is not a notebook verify can run."""


def notebook_script(path: Path, workdir: Path) -> Path:
    """Write the code cells of ``path`` as one script in ``workdir``; register the line map
    (script line -> cell, line) for reports. Raises ``VerifyError`` for an unreadable
    notebook."""
    from mpfix import safe_read
    from mpfix.notebooks import cell_source as _source, mask, read_notebook
    from mpfix.verify.kinds import VerifyError

    try:  # a FIFO or a device is refused, never read
        text = safe_read.read_text(path, follow_outside=True, errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise VerifyError(f"{path.name}: not a notebook verify can run ({exc})") from None
    raw = read_notebook(text, path)  # as `mpfix check` reads it: malformed JSON or cells are a FileError
    if not isinstance(raw, dict):
        reason = raw.message.split(": ", 1)[-1]  # after check's "not a notebook[ mpfix can read]: "
        raise VerifyError(f"{path}:{raw.line}:{raw.column}: not a notebook verify can run: {reason}")
    lines: list[str] = [f"# {path.name}: its code cells, as run by mpfix verify\n"]
    where: list[tuple[int, int] | None] = [None]
    counter = [0]
    code_cells = 0
    for index, cell in enumerate(raw["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number = index + 1
        masked = mask(_source(cell), counter)
        if masked is None:
            lines.append(f"# cell {number}: a cell magic whose body is not Python; not run\n")
            where.append(None)
            continue
        text, _ = masked
        code_cells += 1
        lines.append(f"# %% cell {number}\n")
        where.append(None)
        for line_number, line in enumerate(text.splitlines(keepends=True), start=1):
            lines.append(line)
            where.append((number, line_number))
    if not code_cells:
        raise VerifyError(f"{path.name}: the notebook has no Python code cell to run")
    script = workdir / f"{path.stem}.ipynb.py"
    script.write_text("".join(lines), encoding="utf-8")
    frames.register_notebook(script, path, where)
    return script
