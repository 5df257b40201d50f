"""The ``mpfix`` command line: check, diff, apply, rules, explain, verify.

Subcommands are imported only when called, so ``mpfix check`` costs little more
than ``import libcst`` and never imports TensorFlow.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys

import click

from mpfix import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class LazyGroup(click.Group):
    """A group whose commands live in modules imported on first use (click's documented pattern)."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module_name, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # click would print "Aborted!" and exit 1, which reads as "findings".
            click.echo("mpfix: interrupted", err=True)
            sys.exit(130)


LAZY_COMMANDS = {
    "check": "mpfix.commands:check",
    "diff": "mpfix.commands:diff",
    "apply": "mpfix.commands:apply",
    "rules": "mpfix.commands:rules",
    "explain": "mpfix.commands:explain",
    "server": "mpfix.server:server",
    "verify": "mpfix.verify.cli:verify",
    "repair": "mpfix.verify.repair_cli:repair",
    "instrument": "mpfix.verify.instrument:instrument",
}


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mpfix")
def cli() -> None:
    """Find, fix and verify TensorFlow/Keras mixed-precision bugs.

    \b
    mpfix check PATHS    report findings (exit 1 when there are any)
    mpfix diff PATHS     show the fixes as a unified diff; writes nothing
    mpfix apply PATHS    write the fixes (--unsafe-fixes for behaviour-changing ones)
    mpfix verify SCRIPT  run a training script briefly and judge its loss
    mpfix repair SCRIPT  fix what verify finds, keeping only changes it proves
    mpfix rules          list the rules; mpfix explain CODE for one
    mpfix server         the Language Server for editors (pip install 'mpfix[lsp]')
    """
    try:
        os.getcwd()
    except OSError as exc:  # the folder mpfix was started in was removed: every relative path is unknown
        click.echo(f"mpfix: error: the working directory cannot be read ({exc.strerror}); "
                   "run mpfix from an existing folder", err=True)
        sys.exit(2)


# The console script's target is the click group itself, so tools that drive click
# commands (CliRunner, documentation generators) can use the entry point directly.
main = cli


def unified_diff(path: str, old: str, new: str) -> str:
    """A patch ``git apply`` and ``patch`` take: lines as Python ends them (``str.splitlines`` also
    splits at a form feed: a hunk of half lines), and a last line without its newline marked as
    diff marks it (else the next line of the patch is glued to it)."""
    from mpfix.source import lines

    return "".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n"
                   for line in difflib.unified_diff(lines(old), lines(new), fromfile=f"a/{path}", tofile=f"b/{path}"))
