"""Parent side: runtime findings as SARIF 2.1.0 (GitHub code scanning), like static findings.

A finding whose code is a static rule's (MP204 on an ``Exp`` that overflowed) points at
that rule's documentation; the runtime codes (MP901-MP903, ``evidence.RUNTIME_CODES``) are
described here. Each result says it was measured at run time (``properties.runtime``), with
the op, the step and the peak.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mpfix.output.sarif_log import location, log, region
from mpfix.verify.evidence import RUNTIME_CODES


def _rule(code: str) -> dict:
    if code in RUNTIME_CODES:
        text = RUNTIME_CODES[code]
        return {"id": code, "name": "runtime-" + code.lower(), "shortDescription": {"text": text},
                "fullDescription": {"text": text + " (measured by `mpfix verify`/`mpfix repair` at run time)"},
                "defaultConfiguration": {"level": "error"}}
    from mpfix.rule_docs import rule_url

    return {"id": code, "shortDescription": {"text": f"static rule {code}, confirmed at run time"},
            "helpUri": rule_url(code), "defaultConfiguration": {"level": "error"}}


def render(findings) -> str:
    codes = sorted({f.code for f in findings})
    index = {code: i for i, code in enumerate(codes)}
    results = []
    for f in findings:
        results.append({
            "ruleId": f.code, "ruleIndex": index[f.code], "level": "error", "message": {"text": f.message},
            "locations": [location(f.file, region(f.line, f.column, f.line, f.end_column or f.column))],
            "properties": {"runtime": True, "kind": str(f.kind), "op": f.op, "step": f.step,
                           "peak": f.peak if f.peak is not None and math.isfinite(f.peak) else None,
                           **({"cell": f.extra["cell"]} if f.extra.get("cell") else {})},
        })
    return json.dumps(log([_rule(c) for c in codes], results), indent=2)


def write(findings, path) -> None:
    Path(path).write_text(render(findings) + "\n", encoding="utf-8")
