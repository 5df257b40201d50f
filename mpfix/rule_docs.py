"""Where a rule's documentation lives, and its text for ``mpfix explain``."""

from __future__ import annotations

DOCS = "https://github.com/mpfix/mpfix/blob/main/docs/rules.md"


def rule_url(code: str) -> str:
    return f"{DOCS}#{code.lower()}"


def fix_summary(rule) -> str:
    """Fix availability and applicability, apart: ``always available; unsafe``, ``sometimes available;
    safe or unsafe``, ``none`` (Ruff states both: a rule may report without a fix where it cannot write a
    right one, and a fix's safety is its own)."""
    availability = rule.availability()
    if availability.value == "none":
        return "none (report only)"
    kinds = " or ".join(str(a) for a in rule.applicabilities())
    return f"{availability.value} available; {kinds}"


def explain(rule) -> str:
    """Ruff-style explanation: header, fix availability and applicability, then the rule's own doc."""
    header = f"# {rule.name} ({rule.code})\n\nFix: {fix_summary(rule)}"
    gens = ", ".join(f"Keras {g}" for g in rule.keras_generations)
    scope = f"Applies to: {gens}" + ("; only where a mixed_float16 policy is in play" if rule.requires_float16 else "")
    return f"{header}\n{scope}\n\n{rule.doc()}\n"


def rules_table_markdown(rules) -> str:
    """The README's rule table (a test keeps the README in step with the rules)."""
    lines = ["| Code | Name | Fix | Message |", "|---|---|---|---|"]
    for r in rules:
        message = r.message.replace("|", "\\|")
        lines.append(f"| {r.code} | {r.name} | {r.fix_safety} | {message} |")
    return "\n".join(lines)
