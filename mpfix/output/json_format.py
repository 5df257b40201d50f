"""A JSON list with Ruff's keys, so tools that read ``ruff --output-format json`` read mpfix.

Ruff's JSON is a bare list of findings, with no room for anything about the run. ``--format
json-run`` wraps the same list as ``{"findings": [...], "run": {...}}`` (as Pylint's ``json2``
wraps its messages): the run metadata, such as the files the float16 rules skipped.
"""

from __future__ import annotations

import json

from mpfix.findings import Edit, FileError, Finding
from mpfix.output.report import Report, absolute
from mpfix.output.run_notes import declaration_metadata
from mpfix.rule_docs import rule_url


def _loc(line: int, column: int) -> dict[str, int]:
    return {"row": line, "column": column}


def _edit(edit: Edit) -> dict:
    return {"content": edit.content, "location": _loc(edit.start.line, edit.start.column),
            "end_location": _loc(edit.end.line, edit.end.column)}


def finding_dict(finding: Finding) -> dict:
    fix = None
    if finding.fix is not None:
        fix = {
            "applicability": str(finding.fix.safety),
            "message": finding.fix.description,
            "edits": [_edit(e) for e in finding.edits],
        }
    return {
        "cell": finding.cell,
        "code": finding.code,
        "end_location": _loc(finding.end.line, finding.end.column),
        "filename": absolute(finding.filename),
        "fix": fix,
        "location": _loc(finding.start.line, finding.start.column),
        "message": finding.message,
        "noqa_row": finding.start.line,
        "url": rule_url(finding.code),
    }


def error_dict(error: FileError) -> dict:
    return {
        "cell": error.cell,
        "code": error.code,
        "end_location": _loc(error.line, error.column),
        "filename": absolute(error.filename),
        "fix": None,
        "location": _loc(error.line, error.column),
        "message": error.message,
        "noqa_row": None,
        "url": rule_url(error.code),
    }


def run_metadata(report: Report) -> dict:
    """What the run did not check (``run`` of ``--format json-run``); keys are camelCase, as SARIF's."""
    from mpfix import __version__

    return {"tool": "mpfix", "version": __version__, "filesChecked": report.files_checked,
            "float16Unchecked": report.unchecked.metadata(absolute) if report.unchecked is not None else None,
            "declaredUnreadable": declaration_metadata(report.declared_unreadable, absolute)}


def render(report: Report, envelope: bool = False) -> str:
    items = [error_dict(e) for e in report.errors] + [finding_dict(f) for f in report.findings]
    if envelope:
        return json.dumps({"findings": items, "run": run_metadata(report)}, indent=2)
    return json.dumps(items, indent=2)
