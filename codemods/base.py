"""The rule framework: one class per rule, with its code, message, fix safety and examples.

A rule is a LibCST ``BatchableCSTVisitor``: every selected rule runs in one
traversal of the file (TorchFix's model). It reports with ``self.report(node,
fix=...)``; the engine turns reports into findings, positions and fixes.

Each rule carries ``VALID`` and ``INVALID`` examples (Fixit's model); the test
suite runs every one of them, so a rule's documentation cannot drift from its
behaviour.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Union

import libcst as cst

from mpfix.codemods.names import ImportTable
from mpfix.findings import Fix, FixSafety
from mpfix.policy import Policy
from mpfix.project.facts import NO_FACTS, ProjectFileFacts

if TYPE_CHECKING:
    from pathlib import Path


Trigger = Union[str, "re.Pattern[str]"]


class FixAvailability(Enum):
    """Whether a rule's findings come with a fix (Ruff's ``FixAvailability``), apart from how safe each fix is."""

    ALWAYS = "always"  # every finding has a fix
    SOMETIMES = "sometimes"  # some findings have one: where the rule cannot write a right fix it reports without
    NONE = "none"  # report only

_BYTES_PATTERNS: dict["re.Pattern[str]", "re.Pattern[bytes]"] = {}


def triggered(triggers: tuple[Trigger, ...], source: str | bytes) -> bool:
    """True if any trigger (a substring, or a compiled regex) occurs in ``source``.

    Works on raw bytes too (the cache keys files before decoding them): trigger
    text is ASCII, which reads the same in every encoding mpfix decodes.
    """
    if isinstance(source, bytes):
        for t in triggers:
            if isinstance(t, str):
                if t.encode() in source:
                    return True
            else:
                pattern = _BYTES_PATTERNS.get(t)
                if pattern is None:
                    pattern = _BYTES_PATTERNS[t] = re.compile(t.pattern.encode(), t.flags & ~re.UNICODE)
                if pattern.search(source):
                    return True
        return False
    return any((t in source) if isinstance(t, str) else t.search(source) is not None for t in triggers)


@dataclass(frozen=True)
class Valid:
    """Code the rule must leave alone."""

    code: str
    keras: int | None = None  # None: must hold on both generations
    policy: str | None = None  # forces the project's policy, like [tool.mpfix] policy

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", textwrap.dedent(self.code).lstrip("\n"))


@dataclass(frozen=True)
class Invalid:
    """Code the rule must flag; ``expected`` is the code after its fix (None: no fix)."""

    code: str
    expected: str | None = None
    keras: int | None = None
    policy: str | None = None
    count: int = 1  # how many findings of this rule the example produces

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", textwrap.dedent(self.code).lstrip("\n"))
        if self.expected is not None:
            object.__setattr__(self, "expected", textwrap.dedent(self.expected).lstrip("\n"))


@dataclass
class Report:
    """What a rule said about one node, before the engine resolves positions."""

    node: cst.CSTNode
    message: str
    fix: Fix | None


@dataclass
class RuleContext:
    """Facts about the file being checked, shared by every rule."""

    module: cst.Module
    path: "Path"
    keras: int  # 2 or 3: the generation this file runs under
    policy: Policy  # the mixed policy the module or its project sets
    module_policy: Policy  # the mixed policy this module itself names
    imports: ImportTable
    loss_scale: float | None = None  # --loss-scale N: write a fixed loss scale instead of dynamic
    # False when nothing decides the Keras generation (mpfix.target): ``keras`` is then the default
    # the rules analyse with, and the engine withholds fixes that differ between the generations.
    keras_known: bool = True
    # The newest TensorFlow (major, minor) the project declares it runs (mpfix.declared.tf_max_for);
    # None: open or not declared. Rules whose fix needs a newer API than that leave the code alone.
    tf_max: tuple[int, int] | None = None
    # What the rest of the project decides about this file (callers index, reach, declarations),
    # computed once per project before the per-file run; the file's cache key holds exactly this.
    project: ProjectFileFacts = NO_FACTS
    # Per-file analysis shared by several rules (e.g. the training-step finder), keyed by its owner.
    cache: dict[str, Any] = field(default_factory=dict)
    reports: list[tuple["Rule", Report]] = field(default_factory=list)

    @property
    def float16(self) -> bool:
        """True when tensors in this file can be float16 (a mixed_float16 policy is in play)."""
        return self.policy is Policy.FLOAT16

    def resolve(self, node: cst.BaseExpression) -> str | None:
        return self.imports.resolve(node)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)


class Rule(cst.BatchableCSTVisitor):
    """Base class of every mpfix rule. Subclasses set the class attributes below."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case
    message: ClassVar[str]  # one sentence: what is wrong and what to do
    fix_safety: ClassVar[FixSafety] = FixSafety.NONE  # the applicability of the rule's fixes unless a report says
    # Declared apart from safety (Ruff: availability vs applicability). None: derived from fix_safety
    # (NONE -> none, else sometimes). The applicabilities its fixes can have; () -> (fix_safety,).
    fix_availability: ClassVar[FixAvailability | None] = None
    fix_applicabilities: ClassVar[tuple[FixSafety, ...]] = ()
    # Substrings (or compiled regexes) of which one must appear in a file for the rule to
    # run: the prefilter that keeps most files from being parsed at all. Keep them specific.
    triggers: ClassVar[tuple[Trigger, ...]]
    # Substrings that must ALL appear as well (e.g. "def call" for rules about Layer.call).
    also_requires: ClassVar[tuple[str, ...]] = ()
    # Only run where float16 compute is reachable (a mixed_float16 policy in play).
    requires_float16: ClassVar[bool] = False
    # Only run for these Keras generations.
    keras_generations: ClassVar[tuple[int, ...]] = (2, 3)
    # Ruff-style documentation: "What it does", "Why is this bad?", "Example", "Use instead".
    explanation: ClassVar[str] = ""
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def __init__(self, context: RuleContext) -> None:
        super().__init__()
        self.context = context

    def get_visitors(self):
        # LibCST finds visitor methods with inspect.getmembers on every instance, i.e. on
        # every file; the names only depend on the class, so find them once per class.
        names = type(self).__dict__.get("_visitor_names")
        if names is None:
            names = tuple(sorted(
                name for name in dir(type(self))
                if name.startswith(("visit_", "leave_"))
                and callable(getattr(type(self), name))
                and not getattr(getattr(type(self), name), "_is_no_op", False)
            ))
            type(self)._visitor_names = names
        return {name: getattr(self, name) for name in names}

    def report(
        self,
        node: cst.CSTNode,
        message: str | None = None,
        *,
        fix: dict[cst.CSTNode, Any] | Fix | None = None,
        safety: FixSafety | None = None,
        description: str | None = None,
        imports: tuple[str, ...] = (),
    ) -> None:
        """Report ``node``; ``fix`` maps original nodes to their replacements."""
        if isinstance(fix, dict):
            fix = Fix(
                changes=fix,
                safety=safety or self.fix_safety,
                description=description or f"Fix {self.code}",
                imports=imports,
            )
        self.context.reports.append((self, Report(node, message or self.message, fix)))

    @classmethod
    def may_match(cls, source: str | bytes) -> bool:
        """The prefilter: can this rule find anything in ``source``?"""
        if isinstance(source, bytes):
            if not all(s.encode() in source for s in cls.also_requires):
                return False
        elif not all(s in source for s in cls.also_requires):
            return False
        return triggered(cls.triggers, source)

    @classmethod
    def availability(cls) -> FixAvailability:
        if cls.fix_availability is not None:
            return cls.fix_availability
        return FixAvailability.NONE if cls.fix_safety is FixSafety.NONE else FixAvailability.SOMETIMES

    @classmethod
    def applicabilities(cls) -> tuple[FixSafety, ...]:
        """How safe its fixes can be: ``(UNSAFE,)``, or ``(SAFE, UNSAFE)`` for a rule that decides per finding."""
        if cls.availability() is FixAvailability.NONE:
            return ()
        return cls.fix_applicabilities or (cls.fix_safety,)

    @classmethod
    def doc(cls) -> str:
        return textwrap.dedent(cls.explanation).strip()
