"""``mpfix server``: the Language Server for editors (the implementation is ``mpfix.lsp``).

This module imports no LSP library, so ``mpfix --help`` works without the ``lsp`` extra.
"""

from __future__ import annotations

import sys

import click

from mpfix.cli import EXIT_ERROR


@click.command()
@click.option("--stdio", is_flag=True, help="Speak LSP over stdin/stdout (the default and only transport; "
                                             "accepted because editors often pass it).")
def server(stdio):
    """Run the mpfix Language Server over stdin/stdout (diagnostics, fixes, hovers for editors)."""
    try:
        from mpfix.lsp import serve
    except ImportError as exc:
        click.echo(f"mpfix server: error: it needs pygls 2 and lsprotocol ({exc}); "
                   "install the editor extra: pip install 'mpfix[lsp]'", err=True)
        sys.exit(EXIT_ERROR)
    serve()
