"""Whether float16 compute can reach a file: the dtype policy it runs under, and why.

A mixed policy is global state, so it is often set in one module (``train.py``) and felt in
another (``layers.py``). Which files it reaches is decided by entry points and imports
(``mpfix.project.reachability``): the module that sets the policy, what it imports
within the project, tests that take a fixture parametrised over the policy. A configured
``policy`` (``[tool.mpfix]`` or ``--policy``) decides for every file. The project is scanned
once per process, and its scan kept in the cache folder until a file of it changes.
"""

from __future__ import annotations

import re
from pathlib import Path

from mpfix.project import project_root
from mpfix.project.kinds import Policy
from mpfix.project.reach import project_reach
from mpfix.project.reachability import Reach, reach_in_text
from mpfix.project.store import use as use_store

__all__ = ["Policy", "policy_in_text", "project_reach", "project_root", "reach_for", "use_store", "forget_projects"]

_FLOAT16 = re.compile(r"""['"]mixed_float16['"]""")
_BFLOAT16 = re.compile(r"""['"]mixed_bfloat16['"]""")


def policy_in_text(text: str) -> Policy:
    """The mixed policy a source text names (in any string); float16 wins when both appear."""
    if _FLOAT16.search(text):
        return Policy.FLOAT16
    if _BFLOAT16.search(text):
        return Policy.BFLOAT16
    return Policy.NONE


def policy_in_project(root: Path) -> Policy:
    """The strongest mixed policy any file of the project runs under."""
    return project_reach(root).policy


policy_in_project.cache_clear = project_reach.cache_clear  # type: ignore[attr-defined]


_CONFIGURED = {"mixed_float16": Policy.FLOAT16, "mixed_bfloat16": Policy.BFLOAT16, "float32": Policy.NONE}


def reach_for(path: Path, text: str | None = None, *, configured: str | None = None, project: bool = True):
    """The policy ``path`` runs under and why (a ``reachability.Reach``).

    ``configured``: the ``policy`` setting, which decides for every file. ``project``: consult
    the rest of the project (else only the file's own entry points). ``text``: the file's
    current text, when it may differ from what is on disk (fix passes, notebooks).
    """
    if configured in _CONFIGURED:
        return Reach(_CONFIGURED[configured], f"configured: policy = {configured!r}")
    found = project_reach(project_root(path)).reach_for(path) if project else None
    if found is not None and found.policy is Policy.FLOAT16:
        return found
    # The file's own text may set a policy the project scan did not see (it read the disk).
    own = reach_in_text(text, path) if text is not None else None
    if own is not None and (own.policy is Policy.FLOAT16 or found is None or found.policy is Policy.NONE):
        return own if own.policy is not Policy.NONE or found is None else found
    if found is not None:
        return found
    return Reach(Policy.NONE, "the project was not consulted")


def describe(files, configured: str | None = None, shown: int = 50) -> list[str]:
    """``--verbose`` lines: the policy each checked file runs under, and why (the entry point)."""
    from mpfix.display import display_path

    if configured in _CONFIGURED:
        return [f"policy {_CONFIGURED[configured]} for all {len(files)} files: configured ({configured!r})"]
    reached, unreached = [], []
    for path in files:
        reach = reach_for(Path(path))
        (unreached if reach.policy is Policy.NONE else reached).append((display_path(str(path)), reach))
    lines = [f"float16 reachability: {len(reached)} of {len(files)} files run under a mixed policy "
             "(set `policy` in [tool.mpfix] or pass --policy to decide for every file)"]
    for name, reach in reached[:shown]:
        lines.append(f"  {name}: {reach.policy} — {reach.why}")
    if len(reached) > shown:
        lines.append(f"  … and {len(reached) - shown} more")
    if unreached:
        lines.append(f"  {len(unreached)} file{'s' if len(unreached) != 1 else ''} with no mixed policy: "
                     f"{unreached[0][1].why}")
    return lines + _unmarked_projects(files)


def _unmarked_projects(files) -> list[str]:
    """A line per project with no marker above it: what its facts read (``mpfix.project``)."""
    from mpfix import project
    from mpfix.display import display_path
    from mpfix.project.files import project_files

    if project.current_scope() is None:
        return []
    lines = []
    for root in sorted({project_root(Path(path)) for path in files}):
        if not project.is_project_root(str(root)):
            whole, flat = project.walk_paths(root)
            how = "walked whole" if not flat else "its own files and the paths named below it"
            lines.append(f"project {display_path(str(root))}: no pyproject.toml, setup.py or .git at or above it, so "
                         f"its float16 reach and callers read what the run names ({how}: "
                         f"{len(project_files(root))} files), not the working directory")
    return lines


def forget_projects() -> None:
    """Forget every project's root and scan (a long-lived process: files were created or saved)."""
    from mpfix import declared, project
    from mpfix.project import facts

    project_reach.cache_clear()
    project.forget_roots()
    facts.forget()
    declared.clear()
