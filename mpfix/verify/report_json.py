"""Parent side: the ``--json`` report: every step of every run, and the verdict."""

from __future__ import annotations

import json
import math
from pathlib import Path

SCHEMA_VERSION = 1


def report_dict(report) -> dict:
    from mpfix.verify.report_evidence import metadata

    return {
        "version": SCHEMA_VERSION,
        **metadata(),
        "script": str(report.script),
        "args": report.args,
        "options": {
            "steps": report.options.steps,
            "seed": report.options.seed,
            "policy": report.options.policy,
            "device": report.options.device,
            "baseline": report.options.baseline,
            "locate": report.options.locate,
            "timeout": report.options.timeout,
        },
        "keras": report.keras,
        "verdict": report.verdict.to_json(),
        "location": report.location.to_json() if report.location else None,
        "escalation": report.escalation,
        "findings": [f.to_json() for f in _runtime(report)],
        "runs": {
            "mixed": report.mixed.to_json(),
            "float32": report.baseline.to_json() if report.baseline else None,
        },
    }


def _runtime(report) -> list:
    from mpfix.verify.metric_judge import findings
    from mpfix.verify.report_text import runtime_findings

    return runtime_findings(report) + findings(report)


def clean(value):
    """JSON without NaN/Inf (strict parsers reject them): encode them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def write(report_or_pair, path: Path) -> None:
    if hasattr(report_or_pair, "before"):
        from mpfix.verify.report_evidence import metadata

        data = {
            "version": SCHEMA_VERSION,
            **metadata(),
            "before": report_dict(report_or_pair.before),
            "after": report_dict(report_or_pair.after),
            "exit_code": report_or_pair.exit_code,
        }
    else:
        data = report_dict(report_or_pair)
    Path(path).write_text(json.dumps(clean(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
