"""``mpfix apply --interactive``: show each fix as a coloured diff and ask before applying it.

The engine calls the reviewer once per fix with the whole file text before and
after that fix (for notebooks: the code cells as ``# %% cell N`` sections).
Answers, as ``fixit fix`` asks them: ``y`` apply, ``n`` skip, ``a`` apply this
and every remaining fix without asking, ``q`` skip this and every remaining fix.
End of input (Ctrl-D, a closed pipe) counts as ``q``: nothing unasked is applied.
"""

from __future__ import annotations

import difflib

import click

from mpfix.findings import Finding
from mpfix.display import printable
from mpfix.output import display_path, location_label

_ANSWERS = {"y": "yes", "n": "no", "a": "all", "q": "quit"}


def _styled(line: str) -> str:
    if line.startswith(("+++", "---")):
        return click.style(line, bold=True)
    if line.startswith("@@"):
        return click.style(line, fg="cyan")
    if line.startswith("+"):
        return click.style(line, fg="green")
    if line.startswith("-"):
        return click.style(line, fg="red")
    return line


def coloured_diff(path: str, before: str, after: str, context: int = 3) -> str:
    """A unified diff of one fix, coloured like ``git diff`` (colour dropped when not a terminal)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=context)
    out = []
    for line in lines:
        text = line.rstrip("\r\n")
        out.append(_styled(text))
        if not line.endswith(("\n", "\r")):
            out.append("\\ No newline at end of file")
    return "\n".join(out)


class Reviewer:
    """A callable ``reviewer(finding, before_text, after_text) -> bool`` that asks the user."""

    def __init__(self) -> None:
        self.decided: bool | None = None  # set by "a" (True) or "q" (False) for every later fix
        self.accepted = 0
        self.declined = 0

    def __call__(self, finding: Finding, before: str, after: str) -> bool:
        answer = self.decided if self.decided is not None else self._ask(finding, before, after)
        if answer:
            self.accepted += 1
        else:
            self.declined += 1
        return answer

    def _ask(self, finding: Finding, before: str, after: str) -> bool:
        label = location_label(finding.filename, finding.line, finding.column, finding.cell)
        click.echo(f"{click.style(label, bold=True)}: {click.style(finding.code, fg='red', bold=True)} {printable(finding.message)}")
        if finding.fix is not None:
            click.echo(f"fix ({finding.fix.safety}): {finding.fix.description}")
        click.echo(coloured_diff(display_path(finding.filename), before, after))
        try:
            reply = click.prompt("Apply this fix? [y]es, [n]o, [a]ll remaining, [q]uit",
                                 type=click.Choice(list(_ANSWERS), case_sensitive=False), show_choices=False)
        except click.Abort:  # end of input: decline this and every later fix
            click.echo()
            reply = "q"
        reply = reply.lower()
        click.echo()
        if reply == "a":
            self.decided = True
        elif reply == "q":
            self.decided = False
        return reply in ("y", "a")
