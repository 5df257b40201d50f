"""What a run could not do, for the summary and the machine formats' run metadata.

``Unchecked``: files a float16 rule triggers in but that no mixed_float16 policy reaches, so
the float16 rules skipped them (computed by ``mpfix.unchecked``). Never a finding and never an
exit code: a note that says how to check them. ``Declaration``: a declared dependency mpfix
could not read (``mpfix.declared.Unreadable``), so the Keras generation was left unknown.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Declaration:
    """A dependency declaration that could not be read (from ``mpfix.declared.Unreadable``)."""

    file: str  # the declaring file (absolute)
    where: str  # the same, relative to its project's root, as ``-v`` names it
    requirement: str  # the expression as written (``f"tensorflow>={MIN_TF}"``)


def declaration_metadata(items, name=str) -> list[dict]:
    """Run metadata for JSON and SARIF (``declaredUnreadable``); ``name`` writes the file."""
    return [{"uri": name(item.file), "where": item.where, "requirement": item.requirement} for item in items]


CHECK_HOW = '`policy = "mixed_float16"` in [tool.mpfix] or `--policy mixed_float16`'


@dataclass(frozen=True)
class Unchecked:
    """Files the float16 rules skipped in one run (the summary's hint and the run metadata)."""

    files: tuple[str, ...]
    # The float16 findings they would have had; None: not counted. A count needs the float16 analysis
    # the run skipped (a parse per file): on tfm, 8 of the 134 such files have any in stress mode.
    findings: int | None = None
    library: bool = False  # no file of their projects sets mixed_float16 (a library: its users may)

    def hint(self) -> str:
        """The one summary line."""
        n = len(self.files)
        them = "them" if n != 1 else "it"
        whose = ("nothing in the project sets mixed_float16, but a library's users may" if self.library
                 else f"no mixed_float16 policy reaches {them}")
        found = (f"{'their' if n != 1 else 'its'} float16 findings, if any, were not counted" if self.findings is None
                 else f"{self.findings} float16 finding{'s' if self.findings != 1 else ''} there")
        return (f"{n} file{'s were' if n != 1 else ' was'} not checked for float16 ({whose}; {found}). "
                f"Check {them} with {CHECK_HOW}.")

    def metadata(self, name=str) -> dict:
        """Run metadata for JSON and SARIF (``float16Unchecked``); ``name`` writes each path."""
        return {"files": len(self.files), "findings": self.findings, "library": self.library,
                "paths": [name(f) for f in self.files], "message": self.hint(),
                "checkWith": ['policy = "mixed_float16" in [tool.mpfix]', "--policy mixed_float16"]}
