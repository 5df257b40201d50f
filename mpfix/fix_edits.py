"""Each fix's own text edits from one combined application, and validation that blames by bisection.

Applying each fix alone and validating the whole file after each made ``--format json``, ``full``
and the editor server quadratic in the number of fixes (168 fixes: 33.5 s against 1.3 s in text
format; issue 21). Here all fixes are applied together and the result is validated once; only when
that fails are the fixes bisected to find the ones to blame (``blame``). A fix's edits are the
changed regions of the combined text that fall on its own lines, plus the edit of the imports it
adds; a fix that shares a changed region with another (two fixes on one line) or overlaps one is
computed alone, the old way, so the edits are the same ones a lone application gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mpfix.findings import Edit, Fix


@dataclass(frozen=True)
class Applier:
    """What the engine lends this module: how to apply fixes, diff texts and judge a result."""

    text: str
    body: Callable[[Sequence[Fix]], str]  # the text with the fixes' node changes, no added imports
    full: Callable[[Sequence[Fix]], str]  # the text with the fixes applied, imports included
    imports_only: Callable[[tuple[str, ...]], str]  # the text with only these imports added
    spans: Callable[[Sequence[Fix]], list[tuple[int, int] | None]]  # each fix's first/last line; None: unknown
    overlapping: Callable[[Sequence[Fix]], set[int]]  # fixes a combined application leaves out
    problem: Callable[[str], str | None]  # why a fixed text must not be written (None: fine)
    diff: Callable[..., list[Edit]]  # (old, new, by_line=False): engine.text_edits


def blame(items: list[int], problem_of: Callable[[list[int]], str | None], reason: str) -> dict[int, str]:
    """The items to blame for ``reason``, the failure of their combination: a half that fails alone
    is searched further; when no half fails alone, their combination does, and all are blamed."""
    if len(items) == 1:
        return {items[0]: reason}
    middle = len(items) // 2
    found: dict[int, str] = {}
    for half in (items[:middle], items[middle:]):
        half_reason = problem_of(half)
        if half_reason is not None:
            found.update(blame(half, problem_of, half_reason))
    return found or {i: reason for i in items}


def per_fix(fixes: list[Fix], applier: Applier) -> list[list[Edit] | str]:
    """For each fix: its text edits, or the reason it is withheld (the combined result failed with it)."""
    out: list[list[Edit] | str | None] = [None] * len(fixes)
    alone = applier.overlapping(fixes)
    live = [i for i in range(len(fixes)) if i not in alone]
    while live:
        reason = applier.problem(applier.full([fixes[i] for i in live]))
        if reason is None:
            break
        blamed = blame(live, lambda group: applier.problem(applier.full([fixes[i] for i in group])), reason)
        for i, why in blamed.items():
            out[i] = why
        live = [i for i in live if i not in blamed]
    if live:
        alone |= _attribute(fixes, live, applier, out)
    for i in sorted(alone):
        if out[i] is None:
            after = applier.full([fixes[i]])
            why = applier.problem(after)
            out[i] = why if why is not None else applier.diff(applier.text, after)
    return out  # type: ignore[return-value]


def _attribute(fixes: list[Fix], live: list[int], applier: Applier, out: list) -> set[int]:
    """Fill ``out`` from one combined diff; the fixes whose regions cannot be told apart are returned."""
    spans = applier.spans([fixes[i] for i in live])
    by_line: dict[int, list[int]] = {}
    unsure: set[int] = set()
    for i, span in zip(live, spans):
        if span is None:
            unsure.add(i)
            continue
        for line in range(span[0], span[1] + 1):
            by_line.setdefault(line, []).append(i)
    edits: dict[int, list[Edit]] = {i: [] for i in live}
    hunks = applier.diff(applier.text, applier.body([fixes[i] for i in live if i not in unsure]), True)
    for hunk in hunks:
        last = hunk.end.line - 1 if hunk.end.column == 1 and hunk.end.line > hunk.start.line else hunk.end.line
        owners = {i for line in range(hunk.start.line, last + 1) for i in by_line.get(line, ())}
        if len(owners) == 1:
            edits[owners.pop()].append(hunk)
        elif not owners:
            return set(live)  # a change no fix's lines explain: every fix is computed alone
        else:
            unsure |= owners
    imports: dict[tuple[str, ...], list[Edit]] = {}
    for i in live:
        if i in unsure:
            continue
        key = tuple(fixes[i].imports)
        if key and key not in imports:
            imports[key] = applier.diff(applier.text, applier.imports_only(key))
        out[i] = sorted(edits[i] + imports.get(key, []), key=lambda e: (e.start.line, e.start.column))
    return unsure
