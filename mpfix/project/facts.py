"""Project facts: what the rest of the project decides about one file, computed once per project.

LibCST's ``gen_cache`` shape: the parent computes the cross-file facts before the per-file run
(``runner`` scans each project before forking its workers; workers inherit the result), and each
file gets them as one typed record, ``ProjectFileFacts``. The engine hands the record to the rules
(``RuleContext.project``) and the cache keys each file on ``ProjectFileFacts.key()``: a rule can
only read what is in the key, so a change elsewhere in the project that changes a finding
changes the key (review finding F1).

The facts: float16 reach (``mpfix.policy.project_reach``: entry points, imports, fixtures), the
callers index (``mpfix.project.callers``: MP205's test helpers), the cross-file calls of the
file's functions from float16 code or with Keras instances (``mpfix.project.crosscalls``: the dtype
inference seeds those functions as regions), the declared Keras target and the newest TensorFlow
the project allows (``mpfix.declared``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mpfix.project import project_root
from mpfix.project.crosscall_records import CrossCall
from mpfix.project.files import path_forms
from mpfix.project.kinds import Policy
from mpfix.project.reach import project_reach

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

    from mpfix.project.reachability import ProjectReach, Reach


@dataclass(frozen=True)
class ProjectFileFacts:
    """The project's facts about one file, as the per-file run sees them."""

    # The float16 reach the project's entry points give this file (``reachability.Reach``);
    # None where it was not consulted: a configured policy, --no-project-policy, or no rule that
    # needs float16 is triggered in the file.
    reach: Reach | None = None
    # Functions this file defines that only test code calls (MP205 leaves their models alone).
    test_helpers: frozenset[str] = frozenset()
    # What the project declares: the Keras target and its reason (``declared.cache_key``).
    declared: str = ""
    # The newest TensorFlow (major, minor) the project allows; None: open or not declared.
    tf_max: tuple[int, int] | None = None
    # Calls of this file's module functions from other files' float16 code (a Keras layer's call, a
    # model's train step) and calls anywhere that hand them a Keras layer/model instance, sorted.
    cross_calls: tuple[CrossCall, ...] = ()
    # The project Keras classes of other files this file constructs whose outputs are the compute dtype, by the
    # dotted names its imports give them (``mpfix.project.held_models``), sorted.
    held_models: tuple[str, ...] = ()

    def key(self) -> str:
        """Everything above as a string: the part of the file's cache key the project decides."""
        reach = "" if self.reach is None else self.reach.key()
        calls = [c.to_json() for c in self.cross_calls]
        return repr((reach, sorted(self.test_helpers), self.declared, self.tf_max, calls, list(self.held_models)))


NO_FACTS = ProjectFileFacts()


@dataclass(frozen=True)
class ProjectFacts:
    """One project's facts, computed once per process (and stored between runs with the cache)."""

    root: Path
    reach: ProjectReach
    helpers: dict[str, frozenset[str]] | None = field(default=None, repr=False)  # None: not computed
    calls: dict[str, frozenset[CrossCall]] | None = field(default=None, repr=False)  # None: not computed
    held: dict[str, frozenset[str]] | None = field(default=None, repr=False)  # ``held_models``; None: not computed

    def test_helpers_of(self, path: Path | str) -> frozenset[str]:
        helpers = self.helpers or {}
        return next((helpers[form] for form in path_forms(path) if form in helpers), frozenset())

    def cross_calls_of(self, path: Path | str) -> tuple[CrossCall, ...]:
        calls = self.calls or {}
        return tuple(sorted(next((calls[form] for form in path_forms(path) if form in calls), frozenset())))

    def held_models_of(self, path: Path | str) -> tuple[str, ...]:
        held = self.held or {}
        return tuple(sorted(next((held[form] for form in path_forms(path) if form in held), frozenset())))


def project_facts(root: Path, *, callers: bool, reached_only: bool = True) -> ProjectFacts:
    """The facts of the project under ``root``; the callers index and cross-file calls only when
    ``callers`` asks for them (``reached_only``: scan the files float16 reaches, else every file)."""
    return ProjectFacts(root=root, reach=project_reach(root), helpers=_helpers(root) if callers else None,
                        calls=_cross_calls(root, reached_only) if callers else None,
                        held=_scan(root, reached_only)[1] if callers else None)


# Computed facts per (kind, root[, reached_only]), oldest dropped past _MEMO_SIZE (the editor server sees
# many projects); ``forget`` clears them.
_MEMO: dict[tuple, dict] = {}
_MEMO_SIZE = 64


def _memo(key: tuple, compute: Callable[[], dict]) -> dict:
    if key not in _MEMO:
        value = compute()
        while len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = value
    return _MEMO[key]


def _helpers(root: Path, pending: Future | None = None) -> dict[str, frozenset[str]]:
    """The callers index (``pending``: the same computed in a helper process, ``prepare``)."""
    return _memo(("callers", root), lambda: _compute_helpers(root, pending))


def _compute_helpers(root: Path, pending: Future | None) -> dict[str, frozenset[str]]:
    from mpfix.project import store
    from mpfix.project.callers import test_helpers
    from mpfix.project.files import listed

    files = listed(root)
    stamp = store.fingerprint(root, files) if store.folder() is not None else ""
    if stamp:
        data = store.load("callers", root, stamp)
        if data is not None and all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in data.values()):
            return {path: frozenset(names) for path, names in data.items()}
    found = _result(pending)
    if found is None:
        from mpfix.project import file_records
        from mpfix.project.reach_records import ReachRecords

        # After an edit only the edited files are read for the index (their rows kept per file: turn 18, 0.17 s of
        # the 0.78 s a one-file check costs after an edit on tf-models).
        rows = ReachRecords(root, "callerfiles") if file_records.folder() is not None else None
        found = test_helpers(files, rows.callers if rows is not None else None)
        if rows is not None:
            rows.save()
    if stamp:
        store.save("callers", root, stamp, {path: sorted(names) for path, names in found.items()})
    return found


def _result(pending: Future | None):
    """A helper process's answer; None where there is none (not asked, the process died, it raised):
    the caller computes the same here (every task is a function of its arguments)."""
    if pending is None:
        return None
    try:
        return pending.result()
    except Exception:  # BrokenProcessPool, a RecursionError pickling a deep tree, ...
        return None


def _cross_calls(root: Path, reached_only: bool, pool: Executor | None = None,
                 then: Callable[[], None] | None = None) -> dict[str, frozenset[CrossCall]]:
    """The cross-file calls of the project: from the files float16 reaches (``reached_only``: the
    entry points decide), or from every file (a configured policy reaches them all). ``pool``: helper
    processes for the scan's per-file summaries; ``then``: called once they are queued there."""
    return _scan(root, reached_only, pool, then)[0]


def _scan(root: Path, reached_only: bool, pool: Executor | None = None, then: Callable[[], None] | None = None):
    """The cross-file scan's two answers (``_compute_cross_calls``), computed once."""
    return _memo(("crosscalls", root, reached_only), lambda: _compute_cross_calls(root, reached_only, pool, then))


def _compute_cross_calls(root: Path, reached_only: bool, pool: Executor | None,
                         then: Callable[[], None] | None):
    """(cross-file calls, held models) per file: one scan's two answers, stored together."""
    from mpfix.project import store
    from mpfix.project.crosscalls import scan_project
    from mpfix.project.held_models import held_classes
    from mpfix.project.files import listed
    from mpfix.project.structural_scan import structural_calls

    files = everything = listed(root)
    if reached_only:
        reached = project_reach(root)
        files = tuple(f for f in files if reached.reach_for(f).policy is Policy.FLOAT16)
    kind = "crosscalls-reached" if reached_only else "crosscalls-all"
    stamp = store.fingerprint(root, everything) if store.folder() is not None else ""
    if stamp:
        data = store.load(kind, root, stamp)
        try:
            if data is not None:
                calls, held = data["calls"], data["held"]
                return ({path: frozenset(CrossCall.from_json(c) for c in found) for path, found in calls.items()},
                        {path: frozenset(str(n) for n in names) for path, names in held.items()})
        except (TypeError, ValueError, KeyError, AttributeError):
            pass  # damaged (or of the shape before held models): scan again
    found, scan = scan_project(root, files, pool=pool, then=then)
    # Structural typing (c33): functions whose parameters only a project Keras class's attributes fit.
    for path, calls in structural_calls(scan, files, everything).items():
        found[path] = found.get(path, frozenset()) | calls
    held = held_classes(scan, files)
    if stamp:
        store.save(kind, root, stamp, {
            "calls": {path: [c.to_json() for c in sorted(calls)] for path, calls in found.items()},
            "held": {path: sorted(names) for path, names in held.items()}})
    return found, held


def file_facts(path: Path, *, consult_project: bool = True, float16_rules: bool = True) -> ProjectFileFacts:
    """The record for ``path``: the one function the engine and the cache key both call.

    ``consult_project``: the project's entry points decide the policy (no configured policy, and
    the project is not switched off); ``float16_rules``: a rule that runs only under float16 is
    triggered in the file (else nothing float16-related the project decides can change a finding).
    """
    path = Path(path)
    if not path.name or str(path).startswith("<"):
        return NO_FACTS  # a snippet (stdin, an example): no project around it
    from mpfix import declared

    bound = declared.tf_max_for(path)
    base = ProjectFileFacts(declared=declared.cache_key(path), tf_max=bound)
    if not float16_rules:
        return base
    root = project_root(path)
    reach = None
    if consult_project:
        scan = project_reach(root)
        reach = scan.reach_for(path)
        if scan.policy is not Policy.FLOAT16:
            # No file of the project runs under float16: no float16 rule runs on this one either
            # (its own text may still set a policy, but then the disk scan saw it too).
            return ProjectFileFacts(reach=reach, declared=base.declared, tf_max=bound)
    facts = project_facts(root, callers=True, reached_only=consult_project)
    return ProjectFileFacts(reach=reach, test_helpers=facts.test_helpers_of(path), declared=base.declared,
                            tf_max=bound, cross_calls=facts.cross_calls_of(path),
                            held_models=facts.held_models_of(path))


def prepare(root: Path, *, consult_project: bool, pool: Executor | None = None) -> None:
    """Compute a project's facts before the per-file run (the runner does, before forking its
    workers, so that each inherits them): the reach, and the callers index where float16 can
    reach the project (or no scan decides: a configured policy).

    ``pool`` (the runner's short-lived helper processes): the cross-file scan's per-file summaries
    are made there, and the callers index is queued behind them, so that it runs while this process
    finishes the scan; every such task is a function of its arguments, so the facts are the same."""
    if not consult_project or project_reach(root).policy is Policy.FLOAT16:
        queued: list[Future] = []

        def queue_helpers() -> None:
            if pool is not None and ("callers", root) not in _MEMO:
                from mpfix.project.callers import test_helpers
                from mpfix.project.files import listed

                try:
                    queued.append(pool.submit(test_helpers, listed(root)))
                except Exception:  # a broken pool: computed here
                    pass

        _cross_calls(root, consult_project, pool, queue_helpers)
        _helpers(root, queued[0] if queued else None)


def forget() -> None:
    """Forget every project's callers index and cross-file calls (files were created or saved)."""
    from mpfix.project.files import forget_listings

    _MEMO.clear()
    forget_listings()
