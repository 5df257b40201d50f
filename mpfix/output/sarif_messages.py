"""SARIF's message convention for findings: ``message.id`` + ``message.arguments`` (SARIF 2.1.0 §3.11).

A rule's templates (``codemods.base``: ``message``, ``messages`` by name, ``notes``) become the
rule descriptor's ``messageStrings``, with positional placeholders (``{0}``, ``{1}``, in the order
the fields first appear; ``{{``/``}}`` stay literal braces, as in SARIF). A result names the message
string it was rendered from and gives the finding's fields (``Finding.fields``) as arguments; each
message string lists its field names (``properties.fields``), so a tool reads the values by name.
``message.text`` stays: it is what most consumers show.

A finding records its fields but not which template rendered it, so the id is the template (plus
the notes a report appended, and the hint the engine appends when the Keras target is unknown)
whose rendering with the finding's own fields is exactly the finding's text; none: text only.
"""

from __future__ import annotations

import functools
import itertools
import string

from mpfix.target import UNKNOWN_HINT

MAIN = "default"  # the id of a rule's main template (``Rule.message``)
UNKNOWN_KERAS = "kerasUnknown"  # the suffix of an id whose text ends with the engine's unknown-target hint
_MAX_NOTES = 2  # a report appends at most two notes (tests/test_message_templates.py)


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

    def message(self, rule, text: str, fields: dict[str, str]) -> dict:
        """The result's ``message``: ``text``, plus ``id`` and ``arguments`` when a template renders it."""
        message: dict = {"text": text}
        found = self._template_of(rule, text, fields)
        if found is None:
            return message
        ident, template = found
        _, names = positional(template)
        message["id"] = ident
        if names:
            message["arguments"] = [fields[name] for name in names]
        if ident not in (MAIN, *rule.messages):
            self.added.setdefault(rule.code, {})[ident] = _entry(template)
        return message

    def _template_of(self, rule, text: str, fields: dict[str, str]) -> tuple[str, str] | None:
        hinted = text.endswith(UNKNOWN_HINT)
        if hinted:
            text = text[: -len(UNKNOWN_HINT)]
        notes = rule.all_notes()
        named = [(MAIN, rule.message), *rule.messages.items()]
        for count in range(_MAX_NOTES + 1):
            for (name, template), chosen in itertools.product(named, itertools.permutations(notes, count)):
                full = template + "".join(f" ({notes[note]})" for note in chosen)
                if not _renders(full, fields, text):
                    continue
                ident = "+".join([name, *(f"note:{note}" for note in chosen)])
                if hinted:
                    return f"{ident}+{UNKNOWN_KERAS}", full + UNKNOWN_HINT.replace("{", "{{").replace("}", "}}")
                return ident, full
        return None


def _renders(template: str, fields: dict[str, str], text: str) -> bool:
    return _names(template) == set(fields) and template.format_map(fields) == text


@functools.lru_cache(maxsize=4096)
def _names(template: str) -> frozenset[str] | None:
    try:
        return frozenset(name for _, name, _, _ in string.Formatter().parse(template) if name is not None)
    except ValueError:
        return None
