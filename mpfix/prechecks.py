"""Before the LibCST parse, per rule: can this rule report in this file at all?  (``Rule.needs``)

Each ``Need`` is a fact every report of a rule that declares it rests on; here each is answered on CPython's
``ast`` (a tenth of a LibCST parse) with a *looser* condition than the rule's, never a tighter one. A rule one
of whose needs fails is not run; a file where no selected rule is left is not parsed (``Engine._gated``).
``tests/test_speed_twotier.py`` runs every declaring rule over real code and fails when a finding lies where
its need fails; ``benchmarks/twotier_soundness.py`` does so over every corpus.

Each question reads what the rule itself reads, from the same tables:
  * ``FLOAT16_REGION``: ``mpfix.gate`` (a seed of a float16 region);
  * ``OUTPUT_HEAD`` (MP205): the rule returns at once in test code (``project.files.is_test_code``, the same
    function), and reports only a call whose callee ``resolve`` makes ``keras.layers.<X>`` with ``X`` in
    ``keras_layers.OUTPUT_LAYERS`` and that has no ``dtype=`` keyword. ``resolve`` keeps the last name of what a
    file spells (an attribute ``layers.Dense``; an import ``from keras.layers import Dense as D``; a module
    alias ``D = layers.Dense``), so such a call's callee is an attribute or a name in that table, or a name that
    an import of such a name or an assignment mentioning one binds (anywhere: looser than module level);
  * ``SCALE_CALL`` (MP110): a gradient is *scaled* only by a call ``<owner>.scale_loss(...)`` or
    ``<owner>.get_scaled_loss(...)`` (``gradient_records.SCALE_METHODS``; ``gradient_builder`` records no other
    scale), and both generations' reports need a scaled gradient;
  * ``GRADIENT_UPDATE`` (MP101, MP102, MP109, MP110, MP111): each report is on a flow or a cross flow of
    ``gradient_builder``, and each flow is built from an update ``<owner>.apply_gradients(...)`` or
    ``<owner>.apply(...)`` (``gradient_records.APPLY_METHODS``) of this file: none without such a call;
  * ``MIXED_PRECISION_API`` (MP301): every report is an import or a resolved name under
    ``_api_table.MIXED_PRECISION`` (its experimental module, ``Policy``); ``resolve`` and ``canonical`` only fold
    prefixes, so the file spells that module's last name (``mixed_precision``) in an import or an attribute.
"""

from __future__ import annotations

import ast

from mpfix import gate
from mpfix.codemods._api_table import MIXED_PRECISION
from mpfix.codemods.analysis.gradient_records import APPLY_METHODS, SCALE_METHODS
from mpfix.codemods.base import Need
from mpfix.codemods.facts.keras_layers import OUTPUT_LAYERS
from mpfix.parsing import check_depth
from mpfix.project.files import is_test_code

_MP_MODULE = MIXED_PRECISION.rpartition(".")[2]
_SCALE_METHODS = frozenset(SCALE_METHODS)
_APPLY_METHODS = frozenset(APPLY_METHODS)
# Words a need's names contain: where the text spells none of them, the need fails without a parse.
_SPELLED = {Need.SCALE_CALL: SCALE_METHODS, Need.GRADIENT_UPDATE: APPLY_METHODS, Need.MIXED_PRECISION_API: (_MP_MODULE,),
            Need.OUTPUT_HEAD: tuple(OUTPUT_LAYERS)}
_ANSWERED = frozenset({Need.FLOAT16_REGION, Need.OUTPUT_HEAD, Need.SCALE_CALL, Need.GRADIENT_UPDATE,
                       Need.MIXED_PRECISION_API})


class _Summary:
    """One walk of a module's ``ast``: what the cheap needs read."""

    def __init__(self, tree: ast.Module) -> None:
        self.attribute_calls: set[str] = set()
        self.spelled: set[str] = set()  # every name and attribute, and each part of an imported module's name
        self.head_callees: set[str] = set()  # last names of callees of calls without a dtype= keyword
        self.head_aliases: set[str] = set()  # names an import or assignment of an output layer binds
        for node in ast.walk(tree):
            kind = type(node)
            if kind is ast.Name:
                self.spelled.add(node.id)
            elif kind is ast.Attribute:
                self.spelled.add(node.attr)
            elif kind is ast.Call:
                func = node.func
                last = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else None
                if type(func) is ast.Attribute:
                    self.attribute_calls.add(func.attr)
                if last is not None and not any(k.arg == "dtype" for k in node.keywords):
                    self.head_callees.add(last)
            elif kind is ast.Import or kind is ast.ImportFrom:
                if kind is ast.ImportFrom and node.module:
                    self.spelled.update(node.module.split("."))
                for alias in node.names:
                    parts = alias.name.split(".")
                    self.spelled.update(parts)
                    if alias.asname:
                        self.spelled.add(alias.asname)
                    if parts[-1] in OUTPUT_LAYERS:
                        self.head_aliases.add(alias.asname or parts[0])
            elif kind is ast.Assign or kind is ast.AnnAssign:
                value = node.value
                if value is not None and any(
                        type(n) is ast.Attribute and n.attr in OUTPUT_LAYERS or type(n) is ast.Name and n.id in OUTPUT_LAYERS
                        for n in ast.walk(value)):
                    targets = node.targets if kind is ast.Assign else [node.target]
                    self.head_aliases.update(n.id for t in targets for n in ast.walk(t) if type(n) is ast.Name)


def _output_head(summary: _Summary) -> bool:
    return not summary.head_callees.isdisjoint(OUTPUT_LAYERS) or not summary.head_callees.isdisjoint(summary.head_aliases)


def _by_text(need: Need, text: str, path, cross_calls: tuple) -> bool | None:
    """Whether ``need`` holds as far as the text and path decide it (None: only the ``ast`` can tell)."""
    if need is Need.OUTPUT_HEAD and is_test_code(path):
        return False  # MP205 leaves test code alone before anything else
    if not any(word in text for word in _SPELLED.get(need, ("",))):
        return False  # the text never spells what the need reads: no name in the code does either
    if need is Need.FLOAT16_REGION:
        return gate.decided_by_text(text, cross_calls)
    return None if need in _ANSWERED else True  # a need this module cannot answer: assumed to hold


def spelled(text: str, path, needs: frozenset[Need] | set[Need], cross_calls: tuple = ()) -> frozenset[Need]:
    """The needs the text and path leave possible (a cheap first pass: no parse, no depth check)."""
    return frozenset(n for n in needs if _by_text(n, text, path, cross_calls) is not False)


def held(text: str, path, needs: frozenset[Need] | set[Need], cross_calls: tuple = ()) -> frozenset[Need] | None:
    """Which of ``needs`` may hold in ``text`` (a need left out certainly fails); None where CPython rejects the
    text (the engine's parse reports it, so nothing is skipped).

    ``parsing.check_depth`` runs first, as before the LibCST parse, and raises ``TooComplex`` the same way."""
    if not check_depth(text):
        return None
    tree: ast.Module | None = None
    summary: _Summary | None = None
    found = set()
    for need in needs:
        decided = _by_text(need, text, path, cross_calls)
        if decided is not None:
            if decided:
                found.add(need)
            continue
        if tree is None:
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None
        if need is Need.FLOAT16_REGION:
            holds = gate.may_have_region(tree, text, cross_calls)
        else:
            if summary is None:
                summary = _Summary(tree)
            if need is Need.OUTPUT_HEAD:
                holds = _output_head(summary)
            elif need is Need.SCALE_CALL:
                holds = not summary.attribute_calls.isdisjoint(_SCALE_METHODS)
            elif need is Need.GRADIENT_UPDATE:
                holds = not summary.attribute_calls.isdisjoint(_APPLY_METHODS)
            else:
                holds = _MP_MODULE in summary.spelled
        if holds:
            found.add(need)
    return frozenset(found)
