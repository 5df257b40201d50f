"""Where a rule's documentation lives, and its text for ``mpfix explain``."""

from __future__ import annotations

DOCS = "https://github.com/mpfix/mpfix/blob/main/docs/rules.md"


def rule_url(code: str) -> str:
    return f"{DOCS}#{code.lower()}"


def explain(rule) -> str:
    """Ruff-style explanation: header, fix safety, then the rule's own doc."""
    header = f"# {rule.name} ({rule.code})\n\nFix: {rule.fix_safety}"
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
