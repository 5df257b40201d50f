"""SARIF 2.1.0, for GitHub code scanning and other SARIF consumers."""

from __future__ import annotations

import json

from mpfix.codemods import all_rules
from mpfix.findings import Position
from mpfix.output.report import Report
from mpfix.output.notebook_lines import Placer
from mpfix.output.run_notes import declaration_metadata
from mpfix.output.sarif_log import location, log, region, uri
from mpfix.output.sarif_messages import Messages, message_strings
from mpfix.rule_docs import FILE_ERROR_CODE, FILE_ERROR_NAME, FILE_ERROR_SUMMARY, rule_url


def _rule_descriptor(rule) -> dict:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.message.replace("{", "").replace("}", "")},
        "fullDescription": {"text": rule.doc() or rule.message},
        "help": {"text": rule.doc() or rule.message, "markdown": rule.doc() or rule.message},
        "helpUri": rule_url(rule.code),
        "messageStrings": message_strings(rule),
        "defaultConfiguration": {"level": "error"},
        "properties": {"fix": str(rule.fix_safety)},
    }


def _cell_properties(cell: int, line: int, column: int) -> dict:
    return {"cell": cell, "cellLine": line, "cellColumn": column, "cellLocation": f"cell {cell}:{line}:{column}"}


def render(report: Report) -> str:
    rules = list(all_rules())
    index = {r.code: i for i, r in enumerate(rules)}
    descriptors = [_rule_descriptor(r) for r in rules]
    descriptors.append({
        "id": FILE_ERROR_CODE, "name": FILE_ERROR_NAME,
        "shortDescription": {"text": FILE_ERROR_SUMMARY},
        "fullDescription": {"text": "mpfix could not read, decode or parse this file, so it was not checked."},
        "helpUri": rule_url(FILE_ERROR_CODE),
        "defaultConfiguration": {"level": "error"},
    })
    index["MP000"] = len(descriptors) - 1
    results = []
    placer = Placer()
    messages = Messages()
    by_code = {r.code: r for r in rules}
    for e in report.errors:
        start, _ = placer.span(e.filename, e.cell, Position(e.line, e.column), Position(e.line, e.column))
        result = {
            "ruleId": e.code, "ruleIndex": index[e.code], "level": "error",
            "message": {"text": e.message},
            "locations": [location(e.filename, region(start.line, start.column, start.line, start.column))],
        }
        if e.cell is not None:
            result["properties"] = _cell_properties(e.cell, e.line, e.column)
        results.append(result)
    for f in report.findings:
        # A notebook's region is in the .ipynb file (where code scanning marks it); the cell and the
        # line within it, as the text format shows them, go to the result's properties.
        start, end = placer.span(f.filename, f.cell, f.start, f.end)
        result = {
            "ruleId": f.code, "ruleIndex": index[f.code], "level": "error",
            "message": messages.message(by_code[f.code], f),
            "locations": [location(f.filename, region(start.line, start.column, end.line, end.column))],
        }
        if f.cell is not None:
            result["properties"] = _cell_properties(f.cell, f.start.line, f.start.column)
        results.append(result)
    for code, added in messages.added.items():  # ids of a template with notes or the unknown-target hint
        descriptors[index[code]]["messageStrings"].update(added)
    properties = {}
    if report.targets:
        # The Keras generation each file was checked for, and why (mpfix.target.decide).
        properties["kerasTargets"] = [{"uri": uri(name), "keras": keras, "reason": reason}
                                      for name, (keras, reason) in sorted(report.targets.items())]
    if report.unchecked is not None:
        properties["float16Unchecked"] = report.unchecked.metadata(uri)
    if report.declared_unreadable:
        # Declared dependencies that could not be read: the Keras generation was left unknown (mpfix.declared).
        properties["declaredUnreadable"] = declaration_metadata(report.declared_unreadable, uri)
    return json.dumps(log(descriptors, results, properties), indent=2)
