"""Where a rule's documentation lives, and its text for ``mpfix explain``."""

from __future__ import annotations

DOCS = "https://github.com/mpfix/mpfix/blob/main/docs/rules.md"


# MP000 is no rule: it is how a file that was not checked is reported (Ruff's E902/syntax errors).
# Its JSON ``url``, SARIF descriptor, ``mpfix explain MP000`` and docs/rules.md read this one text.
FILE_ERROR_CODE = "MP000"
FILE_ERROR_NAME = "file-not-checked"
FILE_ERROR_SUMMARY = "File could not be read or parsed"
FILE_ERROR_DOC = """\
### What it means
mpfix could not read, decode or parse this file, so no rule ran on it and nothing was written
to it. The message says why: a syntax error at CPython's line and column, code this Python does
not compile, bytes that do not decode in the file's encoding, a binary file, a broken or looping
symbolic link, a FIFO or other non-regular file, a file over `max-file-size`, code nested too
deeply for the parser, or a notebook that is not valid JSON.

### What to do
Fix the cause the message names; for a file that is not yours to change, exclude it
(`exclude` in `[tool.mpfix]`). Any MP000 makes the run exit with 2, as Ruff does for a
file it cannot check; the other files are checked as usual.
"""


def explain_file_error() -> str:
    """``mpfix explain MP000``."""
    return f"# {FILE_ERROR_NAME} ({FILE_ERROR_CODE})\n\nNot a rule: reported for a file that was not checked.\n\n{FILE_ERROR_DOC}"


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
