"""Lint and fix one source text: prefilter → parse → all rules in one pass → findings/fixes.

The engine owns parsing; rules never re-read or re-parse. Fixes are applied
pass by pass (non-overlapping fixes together) until nothing changes; every
intermediate text must parse and compile, or nothing is returned as fixed.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper

from mpfix.codemods import Rule, RuleContext
from mpfix.codemods.base import Need
from mpfix.codemods._walk import visit_batched
from mpfix.codemods.names import ImportTable
from mpfix import fix_edits, fix_validation, prechecks
from mpfix import policy as policies
from mpfix import suppression
from mpfix.findings import FileError, Finding, Fix, Position
from mpfix.parsing import TooComplex, check_depth, parse_module
from mpfix.cst_replace import Replace, chosen
from mpfix.import_edits import add_imports  # re-exported: tests and callers import it from here
from mpfix.positions import positions_of
from mpfix.source import lines as source_lines
from mpfix.text_diff import text_edits  # re-exported: the server and tests import it from here
from mpfix.project.facts import file_facts
from mpfix.project.fixture_regions import float16_regions
from mpfix import target as targets

MAX_FIX_PASSES = 10
# Skip the parse of a file where no selected rule's ``Rule.needs`` can hold (``mpfix.gate``); False (or
# MPFIX_GATE=0) parses every triggered file, as the equivalence test and benchmarks compare.
GATE = os.environ.get("MPFIX_GATE", "1") != "0"

_PY2_HINTS = (
    re.compile(r"^\s*print\s+[^\s(=.,)\]]"),
    re.compile(r"^\s*exec\s+['\"]"),
    re.compile(r"^\s*except\s+[\w.]+\s*,\s*\w+\s*:"),
    re.compile(r"^\s*raise\s+\w+\s*,"),
)


Accept = Callable[[Finding, str, str], bool]


class FixError(Exception):
    """A fix produced code that does not parse or compile, or fixes did not converge."""


@dataclass(frozen=True)
class Options:
    """What the engine needs to know besides the rules."""

    keras: str = "auto"
    policy: str | None = None  # configured policy (forces float16 reachability)
    unsafe_fixes: bool = False
    project_policy: bool = True  # look at the rest of the project for a mixed policy
    loss_scale: float | None = None  # write fixed-scale LossScaleOptimizer fixes (--loss-scale)
    display_only_fixes: bool = False  # also write display-only fixes (only `repair`, which runs them)


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    fixed_text: str | None = None  # set when fixing changed the text
    applied: int = 0  # how many fixes were applied
    # A float16 rule's trigger occurs but no mixed policy reaches the file (``mpfix.unchecked``),
    # decided with the rule selection, so the prefilter and the reach are not run twice.
    float16_unchecked: bool = False


def _syntax_error(path: str, text: str, exc: cst.ParserSyntaxError) -> FileError:
    # LibCST's native parser reports the position after the error (`print "hello"` on line 1 came
    # out as 2:14): CPython's own compiler gives the position and message, LibCST's the fallback.
    line, column, message = exc.raw_line, exc.raw_column + 1, f"SyntaxError: {exc.message}"
    try:
        compile(text, path, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as error:
        if error.lineno:
            line, column = error.lineno, max(1, error.offset or 1)
            message = f"{type(error).__name__}: {error.msg}"
    except (ValueError, MemoryError, RecursionError):
        pass
    lines = source_lines(text)
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    if any(p.search(source_line) for p in _PY2_HINTS):
        message += " (this looks like Python 2; mpfix checks Python 3 code)"
    return FileError(filename=path, message=message, line=line, column=column)


class Engine:
    """Runs a fixed set of rules over source texts."""

    def __init__(self, rules: tuple[type[Rule], ...], options: Options) -> None:
        self.rules = rules
        self.options = options

    # -- rule selection for one file -------------------------------------------------
    def reach(self, text: str, path: Path):
        """The policy ``path`` runs under and why (``reachability.Reach``; see ``mpfix.policy.reach_for``)."""
        return policies.reach_for(path, text, configured=self.options.policy, project=self.options.project_policy)

    def _candidates(self, text: str, path: Path, ignored: tuple[str, ...]) -> list[type[Rule]]:
        """The rules worth parsing for: triggered, not ignored, and float16 ones only under float16."""
        return self._select(text, path, ignored)[0]

    def _select(self, text: str, path: Path, ignored: tuple[str, ...]) -> tuple[list[type[Rule]], bool]:
        """``_candidates``, and whether a float16 rule was triggered but no mixed policy reaches the
        file (``mpfix.unchecked.skipped``'s question, answered from the same test)."""
        rules = [
            r for r in self.rules
            if not (ignored and r.code.startswith(ignored)) and r.may_match(text)
        ]
        unchecked = False
        if any(r.requires_float16 for r in rules):
            policy = self.reach(text, path).policy
            if policy is not policies.Policy.FLOAT16:
                rules = [r for r in rules if not r.requires_float16]
                unchecked = self.options.policy is None and policy is policies.Policy.NONE
        return rules, unchecked

    def _gated(self, text: str, path: Path, rules: list[type[Rule]], fix: bool = False) -> tuple[list[type[Rule]], bool]:
        """The selected rules whose ``Rule.needs`` may all hold in ``text`` (``mpfix.prechecks``: the others
        cannot report there), and whether the depth pre-check ran (it raises ``TooComplex`` as the parse would).

        The text and path decide first; the ``ast`` is asked only where every rule left declares needs, so that
        the file may go unparsed (elsewhere the LibCST parse comes anyway, and an ``ast`` parse would only add
        to it). A text CPython rejects keeps every rule (the parse reports it). ``fix`` keeps every rule unless
        none is left: a fix changes the text, and a need may hold in the fixed text."""
        needs = frozenset().union(*(r.needs for r in rules))
        if not GATE or not needs or (fix and not all(r.needs for r in rules)):
            return rules, False
        # Only a float16 region's seeds read the project (other files' calls): a file the early helpers check
        # before the project pass ends must not ask for its facts (a5b8ceb did: +2.5 s CPU on tf-models, pooled).
        cross_calls = file_facts(path, consult_project=self.options.policy is None and self.options.project_policy
                                 ).cross_calls if Need.FLOAT16_REGION in needs else ()
        possible = prechecks.spelled(text, path, needs, cross_calls)
        kept = [r for r in rules if r.needs <= possible]
        if kept and not all(r.needs for r in kept):
            return (rules if fix else kept), False
        held = prechecks.held(text, path, frozenset().union(*(r.needs for r in kept)), cross_calls)
        if held is None:
            return rules, True
        kept = [r for r in kept if r.needs <= held]
        return (rules if fix and kept else kept), True

    def _idle(self, text: str, path: Path, rules: list[type[Rule]]) -> bool | None:
        """True: no selected rule runs for the Keras generation the parse would give ``text`` (``_visit``
        drops a rule of the other generation: MP106 is Keras 3's, MP103/MP107 Keras 2's), so the parse
        would find nothing; False: none runs either, but CPython rejects the text (the parse reports it;
        the depth pre-check ran); None: some rule runs, or the text does not decide the generation.

        ``_run`` decides the generation from the parsed imports (``ImportTable.imports_module("tf_keras")``)
        or their text (``targets.imports_tf_keras``); no import can name ``tf_keras`` where the text does
        not spell it, so either the text's test holds or the word is absent, and the text decides alike.
        """
        if all(2 in r.keras_generations and 3 in r.keras_generations for r in rules):
            return None
        if targets.imports_tf_keras(text):
            tf_keras = True
        elif "tf_keras" not in text:
            tf_keras = False
        else:
            return None
        keras = targets.decide(self.options.keras, text, path, tf_keras).keras or targets.DEFAULT
        if any(keras in r.keras_generations for r in rules):
            return None
        return check_depth(text)  # raises TooComplex as the parse would; False: CPython rejects it

    # -- one pass ----------------------------------------------------------------------
    def _run(self, text: str, path: Path, rules: list[type[Rule]], module: cst.Module | None = None,
             depth_checked: bool = False, visit: list[type[Rule]] | None = None) -> tuple[cst.Module, RuleContext]:
        """Parse ``text`` (unless ``module`` is its parse already) and run ``rules`` over it in one pass
        (only ``visit`` of them where given: the reach and project facts still follow all ``rules``)."""
        if module is None:
            module = parse_module(text, depth_checked=depth_checked)
        imports = ImportTable(module)
        target = targets.decide(self.options.keras, text, path,
                                imports.imports_module("tf_keras") or targets.imports_tf_keras(text))
        keras = target.keras or targets.DEFAULT
        module_policy = policies.policy_in_text(text)
        reach = self.reach(text, path) if any(r.requires_float16 for r in rules) else None
        policy = reach.policy if reach is not None else module_policy
        # The same record the cache keys this file on (mpfix.cache.Keyer.key): rules read only that.
        project = file_facts(path, consult_project=self.options.policy is None and self.options.project_policy,
                             float16_rules=reach is not None)
        context = RuleContext(module=module, path=path, keras=keras, policy=policy,
                              module_policy=module_policy, imports=imports, loss_scale=self.options.loss_scale,
                              keras_known=target.known, tf_max=project.tf_max, project=project)
        if reach is not None and reach.partial and policy is policies.Policy.FLOAT16:
            # A test module where only some tests run under the policy: float16 findings count there only.
            context.cache[_REGIONS] = float16_regions(text, reach.fixtures)
        self._visit(module, context, rules if visit is None else visit)
        fixers = {rule.code for rule, report in context.reports if report.fix is not None}
        if not target.known and fixers:
            # Unknown target: the findings are the default generation's; a fix is kept only
            # where the other generation writes the very same one (mpfix.target). Only fixes are
            # compared, so only the rules that wrote one run again (none: no second pass).
            other = RuleContext(module=module, path=path, keras=targets.KERAS2, policy=policy,
                                module_policy=module_policy, imports=imports, loss_scale=self.options.loss_scale,
                                keras_known=False, tf_max=context.tf_max, project=project)
            self._visit(module, other, [r for r in rules if r.code in fixers])
            context.reports = _agreed_fixes(context.reports, other.reports)
        return module, context

    def _visit(self, module: cst.Module, context: RuleContext, rules: list[type[Rule]]) -> None:
        active = [
            r for r in rules
            if context.keras in r.keras_generations and (not r.requires_float16 or context.float16)
        ]
        if active:
            # LibCST's own traversal rebuilds every node it passes (2/3 of a cold check);
            # codemods._walk reads the fields in the same order with the same visit/leave calls.
            visit_batched(MetadataWrapper(module, unsafe_skip_copy=True), [r(context) for r in active])

    def _findings(self, text: str, path: Path, context: RuleContext) -> list[Finding]:
        if not context.reports:
            return []
        positions = positions_of(context.module, [report.node for _, report in context.reports])
        suppressions = suppression.parse(text)
        findings = []
        for rule, report in context.reports:
            span = positions.get(report.node)
            start = Position(span.start.line, span.start.column + 1) if span else Position(1, 1)
            end = Position(span.end.line, span.end.column + 1) if span else start
            if suppressions.suppresses(rule.code, start.line, end.line):
                continue
            if rule.requires_float16 and not _in_regions(context.cache.get(_REGIONS), start.line):
                continue
            findings.append(Finding(code=rule.code, message=report.message, filename=str(path),
                                    start=start, end=end, fix=report.fix, node=report.node, fields=report.fields,
                                    template=report.ref))
        findings.sort(key=lambda f: (f.start.line, f.start.column, f.code))
        return findings

    # -- public ------------------------------------------------------------------------
    def lint(self, text: str, path: Path, *, fix: bool = False, edits: bool = False,
             ignored: tuple[str, ...] = (), accept: Accept | None = None) -> LintResult:
        """Findings for ``text``; with ``fix``, also the fixed text (fixes applied until stable).

        ``accept(finding, before, after)`` is asked about each fix in turn (``apply
        --interactive``); fixes it declines are left out and not asked again.
        """
        name = str(path)
        rules, unchecked = self._select(text, path, ignored)
        if not rules:
            return LintResult(float16_unchecked=unchecked)
        try:
            visit, checked = self._gated(text, path, rules, fix)  # raises TooComplex as the parse would
            idle = self._idle(text, path, visit) if visit and GATE and not fix else None  # other generation only
            if not visit or idle:
                return LintResult(float16_unchecked=unchecked)
            module, context = self._run(text, path, rules, depth_checked=checked or idle is False, visit=visit)
        except cst.ParserSyntaxError as exc:
            return LintResult(errors=[_syntax_error(name, text, exc)], float16_unchecked=unchecked)
        except TooComplex as exc:  # refused before LibCST's native parser could crash on it
            return LintResult(errors=[FileError(name, exc.message, exc.line, exc.column)], float16_unchecked=unchecked)
        except RecursionError:
            return LintResult(errors=[FileError(name, "file is nested too deeply for the parser")],
                              float16_unchecked=unchecked)
        findings = self._findings(text, path, context)
        validator = fix_validation.Validator(text, name, module, context.keras)
        if edits:
            # All fixes applied and validated together, bisected only on failure (fix_edits).
            fixable = [f for f in findings if f.fix is not None and f.fix.changes]
            outcomes = fix_edits.per_fix([f.fix for f in fixable], _applier(text, module, validator,
                                                                            [f.fix for f in fixable]))
            for finding, outcome in zip(fixable, outcomes):
                if isinstance(outcome, str):
                    _withhold(finding, outcome)
                else:
                    finding.edits = outcome
        result = LintResult(findings=findings)
        if fix:
            try:
                result = self._fix_until_stable(text, path, rules, findings, module, accept, validator)
            except FixError as exc:
                result.errors.append(FileError(name, f"internal error: {exc}; nothing was written"))
        result.float16_unchecked = unchecked
        for finding in result.findings:
            finding.node = None
            if finding.fix is not None:
                finding.fix = Fix(changes={}, safety=finding.fix.safety,
                                  description=finding.fix.description, imports=finding.fix.imports)
        _release(context)
        return result

    def _fix_until_stable(self, text, path, rules, findings, module, accept=None, validator=None) -> LintResult:
        error = _compile_error(text, str(path))
        if error is not None:
            return LintResult(findings=findings, errors=[_not_compiled(str(path), error)])
        if validator is None:
            validator = fix_validation.Validator(text, str(path), module)
        applied = 0
        current = text
        # Declined fixes are remembered by code, message and the text of their line,
        # which survives the line shifts that accepted fixes cause. So are fixes that failed
        # validation (fix_validation), with the reason: they are reported without a fix.
        declined: set[tuple[str, str, str]] = set()
        rejected: dict[tuple[str, str, str], str] = {}

        def done() -> LintResult:
            lines = source_lines(current)
            for f in findings:
                reason = rejected.get(_fix_key(f, lines))
                if reason is not None and f.fix is not None:
                    _withhold(f, reason)
            return LintResult(findings=findings, fixed_text=current if current != text else None, applied=applied)

        for _ in range(MAX_FIX_PASSES):
            fixes, chosen = [], []
            lines = source_lines(current)
            for f in findings:
                key = _fix_key(f, lines)
                if not f.fixable(self.options.unsafe_fixes, self.options.display_only_fixes) \
                        or key in declined or key in rejected:
                    continue
                if accept is not None:
                    after, _ = apply_fixes(module, [f.fix])
                    reason = _problem(validator, after)
                    if reason is not None:
                        rejected[key] = reason  # never offered
                        continue
                    if not accept(f, current, after):
                        declined.add(key)
                        continue
                fixes.append(f.fix)
                chosen.append((f, key))
            if not fixes:
                return done()
            new_text, count = apply_fixes(module, fixes)
            if new_text == current:
                return done()
            parsed = _validate(new_text, str(path), True)
            reason = validator.problem(new_text, parsed)
            if reason is not None:
                # Find the fixes to blame by bisection (log n validations per culprit, not n).
                def problem_of(group, module=module):
                    return _problem(validator, apply_fixes(module, [chosen[i][0].fix for i in group])[0])

                blamed = fix_edits.blame(list(range(len(chosen))), problem_of, reason)
                rejected.update({chosen[i][1]: why for i, why in blamed.items()})
                continue  # this pass again, without them
            applied += count
            current = new_text
            module, context = self._run(current, path, rules, parsed)
            findings = self._findings(current, path, context)
            _release(context)
        raise FixError(f"fixes did not converge after {MAX_FIX_PASSES} passes")


_REGIONS = "mpfix.engine.float16_regions"


def _release(context: RuleContext) -> None:
    """Break the reference cycles that tie a file's syntax tree to its rule run.

    The analyses in ``context.cache`` hold ``context.resolve`` (so the context), and each report
    holds its rule, which holds the context: every tree was cyclic garbage, kept until the cyclic
    collector found it (millions of nodes on tf-models, scanned again by each collection they
    survived). Emptied, the tree is freed the moment the file is done.
    """
    context.cache.clear()
    context.reports = []


def _in_regions(regions: list[tuple[int, int]] | None, line: int) -> bool:
    return regions is None or any(first <= line <= last for first, last in regions)


def _fix_key(finding: Finding, lines: list[str]) -> tuple[str, str, str]:
    return (finding.code, finding.message,
            lines[finding.line - 1].strip() if finding.line <= len(lines) else "")


def _problem(validator: fix_validation.Validator, fixed: str) -> str | None:
    """Why the fixed text ``fixed`` must not be written (the dtype check parses it only if needed)."""
    module = None
    if fix_validation.changes_dtypes(validator.original, fixed):
        try:
            module = parse_module(fixed)
        except (cst.ParserSyntaxError, RecursionError):
            return None  # the engine's own parse and compile checks report it
    return validator.problem(fixed, module)


def _withhold(finding: Finding, reason: str) -> None:
    """Report ``finding`` without its fix, saying why."""
    finding.fix = None
    finding.edits = []
    finding.message = f"{finding.message} (no fix offered: {reason})"


def _same_replacement(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, cst.CSTNode) and isinstance(b, cst.CSTNode):
        return a.deep_equals(b)
    if isinstance(a, cst.FlattenSentinel) and isinstance(b, cst.FlattenSentinel):
        return len(a.nodes) == len(b.nodes) and all(_same_replacement(x, y) for x, y in zip(a.nodes, b.nodes))
    return type(a) is type(b) and a == b


def _same_fix(a: Fix | None, b: Fix | None) -> bool:
    if a is None or b is None:
        return a is b
    if a.safety != b.safety or tuple(a.imports) != tuple(b.imports) or len(a.changes) != len(b.changes):
        return False
    others = {id(node): replacement for node, replacement in b.changes.items()}
    return all(id(node) in others and _same_replacement(replacement, others[id(node)])
               for node, replacement in a.changes.items())


def _agreed_fixes(reports: list, other: list) -> list:
    """``reports`` with each fix the ``other`` generation does not write identically withheld."""
    from mpfix.codemods.base import Report

    theirs: dict[tuple[str, int], list] = {}
    for rule, report in other:
        theirs.setdefault((rule.code, id(report.node)), []).append(report.fix)
    kept = []
    for rule, report in reports:
        if report.fix is not None and not any(_same_fix(report.fix, fix)
                                              for fix in theirs.get((rule.code, id(report.node)), ())):
            report = Report(report.node, report.message + targets.UNKNOWN_HINT, None, report.fields, report.template,
                            replace(report.ref, keras_unknown=True))
        kept.append((rule, report))
    return kept


def _compile_error(text: str, filename: str) -> SyntaxError | ValueError | None:
    """Why CPython does not compile ``text`` (None: it does)."""
    import warnings

    try:
        with warnings.catch_warnings():
            # The user's own code (``x is 1``) warns when compiled: not mpfix's to show, and as an
            # error (``-W error``) it would make a good fix look like one that does not compile.
            warnings.simplefilter("ignore")
            compile(text, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return exc
    return None


def _compiles(text: str, filename: str) -> bool:
    return _compile_error(text, filename) is None


def _not_compiled(path: str, error: SyntaxError | ValueError) -> FileError:
    """A file CPython does not compile (``return`` outside a function, a duplicate parameter): apply
    and diff write nothing into it, as Ruff fixes no file with a syntax error."""
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}"  # newer syntax: another Python may
    if isinstance(error, SyntaxError):
        return FileError(path, f"{type(error).__name__}: {error.msg} ({python} does not compile this file; "
                               "no fix was applied)", error.lineno or 1, max(1, error.offset or 1))
    return FileError(path, f"{python} does not compile this file ({error}); no fix was applied")


def _validate(text: str, filename: str, must_compile: bool) -> cst.Module:
    """The fixed text parsed (reused for the next pass); FixError if it does not parse or compile."""
    try:
        module = parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise FixError(f"a fix produced code that does not parse ({exc.message} at line {exc.raw_line})") from exc
    if must_compile and not _compiles(text, filename):
        raise FixError("a fix produced code that does not compile")
    return module


def _applier(text: str, module: cst.Module, validator, fixes: list[Fix]) -> fix_edits.Applier:
    known = positions_of(module, [node for fix in fixes for node in fix.changes])  # one codegen for all
    last: dict = {}  # the last set of fixes applied, and its module before imports: body() reuses full()'s

    def transformed(fixes) -> cst.Module:
        key = tuple(id(fix) for fix in fixes)
        if last.get("key") != key:
            changes: dict = {}
            for fix in fixes:
                changes.update(fix.changes)
            last.update(key=key, module=module.visit(Replace(changes, module)))
        return last["module"]

    def body(fixes):
        return transformed(fixes).code

    def full(fixes):
        if len(fixes) != len(chosen(module, fixes, known)):
            return apply_fixes(module, list(fixes), known)[0]
        imports: list[str] = []
        for fix in fixes:
            imports.extend(i for i in fix.imports if i not in imports)
        new_module = transformed(fixes)
        return (add_imports(new_module, imports) if imports else new_module).code

    def spans(fixes):
        out = []
        for fix in fixes:
            ranges = [known.get(node) for node in fix.changes]
            out.append(None if not ranges or None in ranges else
                       (min(r.start.line for r in ranges), max(r.end.line for r in ranges)))
        return out

    def overlapping(fixes):
        return set(range(len(fixes))) - set(chosen(module, fixes, known))

    return fix_edits.Applier(
        text=text, body=body, full=full,
        imports_only=lambda imports: add_imports(module, list(imports)).code, spans=spans,
        overlapping=overlapping, problem=lambda fixed: _problem(validator, fixed), diff=text_edits)


def apply_fixes(module: cst.Module, fixes: list[Fix], positions: dict | None = None) -> tuple[str, int]:
    """Apply the fixes whose nodes do not overlap an earlier fix's; return (code, count).

    ``positions``: the fixes' node positions when the caller has them already."""
    changes: dict = {}
    imports: list[str] = []
    count = 0
    for index in chosen(module, fixes, positions):
        fix = fixes[index]
        changes.update(fix.changes)
        imports.extend(i for i in fix.imports if i not in imports)
        count += 1
    new_module = module.visit(Replace(changes, module))
    if imports:
        new_module = add_imports(new_module, imports)
    return new_module.code, count
