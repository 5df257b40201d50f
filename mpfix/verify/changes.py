"""The edits ``mpfix repair`` tries, as records that can be re-applied to any version of a file.

A ``Change`` is anchored on the text of its line, not its number: other kept changes may
move lines, and minimising the diff re-applies subsets of the changes, in order, to the
original files. ``Change.apply(text)`` returns the new text, or None when the change no
longer applies there.

Kinds, in the order ``candidates.py`` offers them for one op:

* ``STATIC``: the static rules' fixes (safe and unsafe), all of a file (the first stage)
  or one rule's fix on the op's line;
* ``ISLAND``: a float32 island around the op's expression (``islands.float32_island``); or, for a Keras 3 crash
  on a float16 layer loss, an activity regulariser's returned value computed and returned in float32
  (``layer_losses.float32_return``, ``extra["returned"]``);
* ``LAYER``: ``dtype="float32"`` on the layer that built the op (``islands.layer_float32``);
* ``LOSS_SCALING``: the loss-scaling rules' (MP1xx) fixes, for underflow and stall verdicts,
  with the dtype policy the run used forced on the static analysis (a policy set in an
  imported module is then seen);
* ``FIXED_SCALE``: the same with a fixed loss scale (``--loss-scale``), the last resort;
* ``CAST``: for a run that crashed on a float16/float32 mix, one cast at the expression that
  mixed them (``mix_crash.cast_at``);
* ``DATA_CAST``: for a run whose input pipeline casts data to float16 itself, that cast made a
  cast to float32 (``data_casts.to_float32``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from mpfix.verify import data_casts, islands, layer_losses, mix_crash


class ChangeKind(str, enum.Enum):
    STATIC = "static fix"
    ISLAND = "float32 island"
    LAYER = "float32 layer"
    LOSS_SCALING = "loss scaling"
    FIXED_SCALE = "fixed loss scale"
    CAST = "cast at a dtype mix"
    DATA_CAST = "float32 data"

    def __str__(self) -> str:
        return self.value


@dataclass
class Change:
    kind: ChangeKind
    path: Path  # the user's file (not the working copy's)
    description: str
    evidence: str  # what justified trying it (a runtime finding, the verdict)
    anchor: str = ""  # the stripped text of the line it applies to ("" = the whole file)
    line: int = 0  # that line's number when the change was made (to pick among equal lines)
    column: int = 0  # island: 1-based column of the op's expression, relative to the indent
    op: str = ""
    class_name: str | None = None
    codes: tuple[str, ...] = ()  # static: rule codes (prefixes) whose fixes are taken
    policy: str | None = None
    keras: str = "auto"  # the generation the run used: static fixes are written for it
    loss_scale: float | None = None
    verdict: str = ""  # the verdict once it was kept
    extra: dict = field(default_factory=dict)

    def apply(self, text: str) -> str | None:
        if Path(self.path).suffix == ".ipynb":
            from mpfix.verify import repair_notebooks

            if self.kind not in (ChangeKind.ISLAND, ChangeKind.LAYER):
                return None
            return repair_notebooks.apply(text, self._apply_python)
        return self._apply_python(text)

    def _apply_python(self, text: str) -> str | None:
        if self.kind in (ChangeKind.STATIC, ChangeKind.LOSS_SCALING, ChangeKind.FIXED_SCALE):
            # Display-only fixes (right only if the code does what the rule could not see) are tried
            # one finding or one rule family at a time, never in the first stage's all-fixes bundle.
            targeted = self.kind is ChangeKind.LOSS_SCALING or (self.kind is ChangeKind.STATIC and bool(self.anchor))
            return static_fixed(text, self.path, self.codes, self.anchor or None, self.policy, self.loss_scale,
                                self.keras, display_only=targeted)
        line = find_line(text, self.anchor, self.line)
        if line is None:
            return None
        if self.kind is ChangeKind.ISLAND and self.extra.get("returned"):
            return layer_losses.float32_return(text, line)
        if self.kind is ChangeKind.ISLAND:
            source = text.splitlines()[line - 1]
            indent = len(source) - len(source.lstrip())
            return islands.float32_island(text, line, indent + self.column, self.op, bool(self.extra.get("output")),
                                          bool(self.extra.get("grow")))
        if self.kind is ChangeKind.LAYER:
            cell = self.extra.get("cell")
            if cell:
                # The cell first, at its line in this text (a keyword added inside a call's parentheses adds no line).
                at = find_line(text, cell["anchor"], cell["line"])
                text = None if at is None else islands.layer_float32(text, at, cell["class"])
                if text is None:
                    return None
            return islands.layer_float32(text, line, self.class_name)
        if self.kind is ChangeKind.CAST:
            mix = mix_crash.Mix(self.op, self.extra["float16_input"], tuple(self.extra.get("elements", ())))
            return mix_crash.cast_at(text, line, mix, self.extra["site"], self.extra["upcast"])
        if self.kind is ChangeKind.DATA_CAST:
            return data_casts.to_float32(text, line, self.extra["site"])
        return None

    def to_json(self) -> dict:
        return {
            "kind": str(self.kind),
            "path": str(self.path),
            "line": self.line or None,
            "description": self.description,
            "evidence": self.evidence,
            "verdict": self.verdict,
        }


def find_line(text: str, anchor: str, hint: int) -> int | None:
    """The 1-based line whose stripped text is ``anchor``, the nearest to ``hint``."""
    if not anchor:
        return None
    found = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == anchor]
    if not found:
        return None
    return min(found, key=lambda n: abs(n - hint))


def static_fixed(text: str, path: Path, codes: tuple[str, ...], anchor: str | None = None,
                 policy: str | None = None, loss_scale: float | None = None, keras: str = "auto",
                 display_only: bool = False) -> str | None:
    """``text`` with the fixes (safe and unsafe; display-only too with ``display_only``) of the static
    findings whose code starts with one of ``codes`` (and whose line is ``anchor``, when given); None
    when none applies. The engine's fix loop and its validation decide, as in ``mpfix apply --unsafe-fixes``."""
    from mpfix import selection
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, engine_for

    try:
        rules = selection.select(("ALL",), ())
    except Exception:  # the static side unusable: no static fix, the runtime candidates still run
        return None
    job = Job(rule_codes=tuple(r.code for r in rules), mode=Mode.APPLY,
              options=Options(keras=keras, policy=policy, unsafe_fixes=True, loss_scale=loss_scale,
                              display_only_fixes=display_only))

    def accept(finding, before: str, after: str) -> bool:
        if not finding.code.startswith(codes):
            return False
        if anchor is None:
            return True
        lines = before.splitlines()
        return 0 < finding.line <= len(lines) and lines[finding.line - 1].strip() == anchor

    try:
        result = engine_for(job).lint(text, path, fix=True, accept=accept)
    except Exception:  # a rule failing on this text: no fix from it
        return None
    if result.errors:
        return None
    return result.fixed_text


def static_findings(text: str, path: Path, policy: str | None = None, keras: str = "auto") -> list:
    """The static findings of ``text`` (as the file ``path``), fixes included."""
    from mpfix import selection
    from mpfix.engine import Options
    from mpfix.runner import Job, Mode, engine_for

    try:
        rules = selection.select(("ALL",), ())
        job = Job(rule_codes=tuple(r.code for r in rules), mode=Mode.CHECK,
                  options=Options(keras=keras, policy=policy, unsafe_fixes=True))
        return list(engine_for(job).lint(text, path).findings)
    except Exception:
        return []
