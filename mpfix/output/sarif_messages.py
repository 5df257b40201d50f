"""SARIF's message convention for findings: ``message.id`` + ``message.arguments`` (SARIF 2.1.0 §3.11).

A rule's templates (``codemods.base``: ``message``, ``messages`` by name, ``notes``) become the
rule descriptor's ``messageStrings``, with positional placeholders (``{0}``, ``{1}``, in the order
the fields first appear; ``{{``/``}}`` stay literal braces, as in SARIF). A result names the message
string it was rendered from and gives the finding's fields (``Finding.fields``) as arguments; each
message string lists its field names (``properties.fields``), so a tool reads the values by name.
``message.text`` stays: it is what most consumers show.

The id comes from the finding itself (``Finding.template``, a ``MessageRef``): the template the rule
reported with, the notes it appended (``+note:name``), and ``+kerasUnknown`` when the engine appended
its unknown-target hint. The text is never read back. A finding without one (not from a rule's
report) gets text only.
"""

from __future__ import annotations

import string

from mpfix.target import UNKNOWN_HINT

MAIN = "default"  # the id of a rule's main template (``Rule.message``)
UNKNOWN_KERAS = "kerasUnknown"  # the suffix of an id whose text ends with the engine's unknown-target hint


def positional(template: str) -> tuple[str, tuple[str, ...]]:
    """``template`` with named fields as SARIF placeholders, and the field names in placeholder order."""
    names: list[str] = []
    parts: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        parts.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            if name not in names:
                names.append(name)
            parts.append(f"{{{names.index(name)}}}")
    return "".join(parts), tuple(names)


def _entry(template: str) -> dict:
    text, names = positional(template)
    entry: dict = {"text": text}
    if names:
        entry["properties"] = {"fields": list(names)}
    return entry


def message_strings(rule) -> dict:
    """The rule descriptor's ``messageStrings``: its main template and its named ones."""
    strings = {MAIN: _entry(rule.message)}
    strings.update({name: _entry(template) for name, template in rule.messages.items()})
    return strings


class Messages:
    """Resolves findings to message ids for one log; remembers the ids with notes it had to add."""

    def __init__(self) -> None:
        self.added: dict[str, dict[str, dict]] = {}  # rule code -> id -> message string (notes, hint)

    def message(self, rule, finding) -> dict:
        """The result's ``message``: the finding's text, plus ``id`` and ``arguments`` from its template."""
        message: dict = {"text": finding.message}
        ref = finding.template
        if ref is None:
            return message
        try:
            template = rule.message_template(ref.name)
            notes = rule.all_notes()
            template += "".join(f" ({notes[note]})" for note in ref.notes)
        except (KeyError, ValueError):  # a name the rule does not declare (TemplateError is a ValueError)
            return message
        ident = "+".join([ref.name or MAIN, *(f"note:{note}" for note in ref.notes)])
        if ref.keras_unknown:
            ident += f"+{UNKNOWN_KERAS}"
            template += UNKNOWN_HINT.replace("{", "{{").replace("}", "}}")
        _, names = positional(template)
        if set(names) != set(finding.fields):
            return message
        message["id"] = ident
        if names:
            message["arguments"] = [finding.fields[name] for name in names]
        if ident not in (MAIN, *rule.messages):
            self.added.setdefault(rule.code, {})[ident] = _entry(template)
        return message
