"""``mpfix instrument``: put NaN/Inf guards and a loss-scale print into the user's own
GradientTape training step, for users who want the check in their code.

Importing this module imports click only; LibCST is loaded when the command runs.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from mpfix.source import lines as lines_of

EXIT_ERROR = 2


@click.command("instrument", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--diff", "mode", flag_value="diff", default=True, help="Print a unified diff (default).")
@click.option("--write", "mode", flag_value="write", help="Write SCRIPT's copy as <name>_instrumented.py beside it.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the instrumented copy here.")
@click.option(
    "--keras",
    type=click.Choice(["2", "3"]),
    default="3",
    show_default=True,
    help="Loss-scale attribute to print (loss_scale on 2, dynamic_scale on 3); a file importing tf_keras is always 2.",
)
def instrument(script: Path, mode: str, output: Path | None, keras: str) -> None:
    """Insert tf.debugging.check_numerics on the loss before and after scaling, and a
    per-step tf.print of the loss scale, into SCRIPT's GradientTape training step. The
    original file is never modified."""
    import libcst

    from mpfix import safe_read
    from mpfix.display import printable
    from mpfix.parsing import TooComplex
    from mpfix.source import SourceError, decode
    from mpfix.verify.instrument_transform import instrument_source

    shown = printable(str(script))  # as given, control characters escaped (mpfix.display)
    try:  # a FIFO or a device named as SCRIPT is refused, never read (it could block forever)
        data = safe_read.read_bytes(script, follow_outside=True)
    except OSError as exc:
        click.echo(f"mpfix instrument: error: {shown}: cannot read: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    try:  # as Python reads it: a PEP 263 coding line, a UTF-8 BOM (the copy keeps both)
        decoded = decode(data)
    except SourceError as exc:
        click.echo(f"{shown}:{exc.line}:{exc.column}: error: cannot read: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    source = decoded.text
    try:
        new, changed = instrument_source(source, keras=int(keras))
    except TooComplex as exc:  # LibCST's native parser could crash on it (mpfix.parsing)
        click.echo(f"{shown}:{exc.line}:{exc.column}: error: cannot instrument: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    except libcst.ParserSyntaxError as exc:
        click.echo(f"{shown}:{exc.editor_line}:{exc.editor_column}: error: cannot parse: {exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    except SyntaxError as exc:
        click.echo(f"{shown}:{exc.lineno or 1}:{exc.offset or 1}: error: cannot parse: {exc.msg}", err=True)
        sys.exit(EXIT_ERROR)
    except (RecursionError, MemoryError):
        click.echo(f"{shown}:1:1: error: cannot instrument: an expression is nested too deeply", err=True)
        sys.exit(EXIT_ERROR)
    if not changed:
        click.echo(f"mpfix instrument: {shown}: no GradientTape training step found (or already instrumented)", err=True)
    if output is None and mode == "write":
        output = script.with_name(script.stem + "_instrumented.py")
    if output is not None:
        try:  # the script's encoding, BOM and newlines
            _write_copy(output, decoded.encode(new), script)
        except OSError as exc:
            click.echo(f"mpfix instrument: error: {output}: cannot write: {exc}", err=True)
            sys.exit(EXIT_ERROR)
        click.echo(f"wrote {printable(str(output))} ({changed} training step(s) instrumented)")
        return
    diff = difflib.unified_diff(
        lines_of(source),  # rows as Python counts them (a form feed is inside a line)
        lines_of(new),
        fromfile=shown,
        tofile=f"{shown} (instrumented)",
    )
    sys.stdout.writelines(diff)


def _write_copy(output: Path, data: bytes, script: Path) -> None:
    """Write the copy to ``output`` with ``script``'s mode, through a temporary file and a rename.

    What is already there must be a regular file (a previous copy): a FIFO would block the write
    forever, and a symbolic link (``train_instrumented.py -> ~/.bashrc`` in a cloned repository) would
    be written through; both are refused, never opened.
    """
    import os
    import stat
    import tempfile

    from mpfix import safe_read

    if output.is_symlink():
        raise OSError(f"it is a symbolic link (to {os.readlink(output)}); not followed, choose another -o")
    if output.exists() and os.path.samefile(output, script):
        raise OSError("it is SCRIPT itself, which instrument never modifies; choose another -o")
    kind = safe_read.special_kind(output)
    if kind is not None:
        raise OSError(f"it is {kind}, not a regular file")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".mpfix-tmp", dir=output.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, stat.S_IMODE(os.stat(script).st_mode))
        os.replace(tmp, output)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


if __name__ == "__main__":
    instrument()
