"""``mpfix check --statistics``: how many findings each rule has (Ruff's layout).

Text: one ``count<TAB>code<TAB>[*] name`` line per rule, most findings first (ties by
code). ``[*]`` marks a rule all of whose findings have a fix that ``mpfix apply`` would
write (safe ones, and unsafe ones with ``--unsafe-fixes``), ``[ ]`` the others; the column
is left out when no rule has such fixes. JSON: a list of ``{"code", "name", "count",
"fixable", "fixable_count"}`` objects in the same order, ``fixable`` meaning what ``[*]`` does.
"""

from __future__ import annotations

import json

from mpfix.output.report import Report


def statistics(report: Report) -> list[dict]:
    from mpfix.codemods import rule_by_code

    counts: dict[str, list[int]] = {}
    for finding in report.findings:
        entry = counts.setdefault(finding.code, [0, 0])
        entry[0] += 1
        entry[1] += finding.fixable(report.unsafe_fixes)
    rows = []
    for code, (count, fixable) in sorted(counts.items(), key=lambda item: (-item[1][0], item[0])):
        rule = rule_by_code(code)
        rows.append({"code": code, "name": rule.name if rule is not None else "", "count": count,
                     "fixable": fixable == count, "fixable_count": fixable})
    return rows


def render(report: Report, fmt: str = "text") -> str:
    rows = statistics(report)
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if not rows:
        return ""
    count_width = max(len(str(r["count"])) for r in rows)
    code_width = max(len(r["code"]) for r in rows)
    any_fixable = any(r["fixable"] for r in rows)
    lines = []
    for r in rows:
        mark = ("[*] " if r["fixable"] else "[ ] ") if any_fixable else ""
        lines.append(f"{r['count']:>{count_width}}\t{r['code']:<{code_width}}\t{mark}{r['name']}")
    return "\n".join(lines)
