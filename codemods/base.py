"""The rule framework: one class per rule, with its code, message, fix safety and examples.

A rule is a LibCST ``BatchableCSTVisitor``: every selected rule runs in one
traversal of the file (TorchFix's model). It reports with ``self.report(node,
fix=..., **fields)``; the engine turns reports into findings, positions and fixes.

A rule's messages are templates with named fields (Ruff's violation structs): ``message``
for its main finding, ``messages`` for the others by name, ``notes`` for parentheticals a
report may add. A report names its template and gives the fields; the text is rendered
here, once, and the fields travel with the finding. ``render`` refuses a template whose
fields differ from those given, so a misspelt field fails the rule's examples.

Each rule carries ``VALID`` and ``INVALID`` examples (Fixit's model); the test
suite runs every one of them, so a rule's documentation cannot drift from its
behaviour.
"""

from __future__ import annotations

import re
import string
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Union

import libcst as cst

from mpfix.codemods.names import ImportTable
from mpfix.findings import Fix, FixSafety, MessageRef
from mpfix.policy import Policy
from mpfix.project.facts import NO_FACTS, ProjectFileFacts

if TYPE_CHECKING:
    from pathlib import Path


Trigger = Union[str, "re.Pattern[str]"]


class Fact(Enum):
    """A per-file fact a rule queries: built on first use, once per file, and shared by every rule
    (LibCST's declared metadata dependencies). A rule names the ones it uses in ``Rule.uses``; a test
    runs each rule alone and checks that it builds (reads) no other. The value is the key the fact is
    shared under in ``RuleContext.cache`` (``PROJECT`` is ``RuleContext.project``, built before the run).
    The context's basics (``imports``/``resolve``, ``policy``, ``keras``, ``tf_max``) are no facts: every
    rule may read them.
    """

    DTYPES = "dtype_facts"  # facts.dtype_facts.dtype_facts: dtype_of, float32_source, mixes, layers, is_guarded
    GRADIENT_PATH = "training_steps"  # analysis.gradient_path.training_steps: steps, flows, scale calls
    MODEL_OUTPUTS = "float16_models"  # analysis.model_outputs.model_facts: models and their output layers
    VERSION_GUARDS = "mpfix.codemods.analysis.version_guards"  # analysis.version_guards.of: guarded branches
    DECLARED_TF = "mpfix.codemods._mp_api_support.tf_min"  # _mp_api_support.declared_tf_min
    PROJECT = "project"  # RuleContext.project: callers index, reach, declarations (mpfix.project.facts)


class Need(Enum):
    """What must hold in a file before a rule can report anything there, decided before the LibCST parse
    (``mpfix.gate``): where no selected rule's needs can hold, the file is not parsed. A test runs each rule
    that declares one over its examples and real code and fails when a finding lies where the need fails."""

    # Reports only on nodes of a non-module dtype region (a function the inference analyses as float16
    # compute: a layer's call, a training step, a loss, a tf.function and their helpers), never module code.
    FLOAT16_REGION = "float16-region"
    # Reports only an output layer's call (``keras_layers.OUTPUT_LAYERS``) built without ``dtype=``, never in test code.
    OUTPUT_HEAD = "output-head"
    # Reports only on a gradient scaled by ``<optimizer>.scale_loss``/``get_scaled_loss`` in this file.
    SCALE_CALL = "scale-call"
    # Reports only an import or a name of the ``mixed_precision`` module (``_api_table.MIXED_PRECISION``).
    MIXED_PRECISION_API = "mixed-precision-api"
    # Reports only on a gradient update: a call ``<optimizer>.apply_gradients(...)``/``.apply(...)`` in this file.
    GRADIENT_UPDATE = "gradient-update"


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


def required(requirement: str | tuple[str, ...], source: str | bytes) -> bool:
    """An ``also_requires`` element is met: its substring (or, for a tuple, any of its substrings) occurs."""
    alternatives = (requirement,) if isinstance(requirement, str) else requirement
    if isinstance(source, bytes):
        return any(a.encode() in source for a in alternatives)
    return any(a in source for a in alternatives)


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


class TemplateError(ValueError):
    """A message template that cannot be rendered from the fields a report gave."""


FieldValue = Union[str, int, float]
# Keyword names of ``Rule.report`` itself, which a template's fields cannot take.
_RESERVED = frozenset({"node", "template", "note", "fix", "safety", "description", "imports", "self"})


def template_fields(template: str) -> frozenset[str]:
    """The named fields of ``template`` (``"`{op}` of ..."`` -> ``{"op"}``); ``{{``/``}}`` are literal braces.

    Only plain ``{name}`` fields: no positional ``{}``, attribute, index, conversion or format
    spec, so every value a report gives is shown as it is.
    """
    names = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"{template!r}: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise TemplateError(f"{template!r}: field {{{name}{'!' + conversion if conversion else ''}"
                                f"{':' + spec if spec else ''}}} is not a plain {{name}}")
        if name in _RESERVED:
            raise TemplateError(f"{template!r}: field {{{name}}} is a keyword of Rule.report")
        names.add(name)
    return frozenset(names)


def render(template: str, fields: Mapping[str, FieldValue]) -> str:
    """``template`` filled with ``fields``, which must name exactly its fields (a typo raises)."""
    expected = template_fields(template)
    if expected != set(fields):
        missing, extra = sorted(expected - set(fields)), sorted(set(fields) - expected)
        raise TemplateError(f"{template!r}: missing fields {missing}, unknown fields {extra}")
    return template.format_map(fields)


@dataclass
class Report:
    """What a rule said about one node, before the engine resolves positions.

    ``message`` is ``template`` rendered with ``fields`` (``Rule.report`` renders it); the
    fields go on to the finding.
    """

    node: cst.CSTNode
    message: str
    fix: Fix | None
    fields: dict[str, str] = field(default_factory=dict)
    template: str = ""
    ref: MessageRef = MessageRef()  # which template and notes ``template`` is (the finding's ``template``)


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
    # The template of the rule's main finding: one sentence, what is wrong and what to do, with
    # ``{field}``s each report fills (``{{``/``}}`` for a literal brace). The README shows it.
    message: ClassVar[str]
    # Templates of the rule's other findings, by name: ``self.report(node, "name", **fields)``.
    messages: ClassVar[Mapping[str, str]] = {}
    # Parentheticals a report may add after its sentence, by name: ``report(..., note="name")``.
    notes: ClassVar[Mapping[str, str]] = {}
    fix_safety: ClassVar[FixSafety] = FixSafety.NONE  # the applicability of the rule's fixes unless a report says
    # Declared apart from safety (Ruff: availability vs applicability). None: derived from fix_safety
    # (NONE -> none, else sometimes). The applicabilities its fixes can have; () -> (fix_safety,).
    fix_availability: ClassVar[FixAvailability | None] = None
    fix_applicabilities: ClassVar[tuple[FixSafety, ...]] = ()
    # Substrings (or compiled regexes) of which one must appear in a file for the rule to
    # run: the prefilter that keeps most files from being parsed at all. Keep them specific.
    triggers: ClassVar[tuple[Trigger, ...]]
    # Substrings that must ALL appear as well (e.g. "def call" for rules about Layer.call); an element that is
    # a tuple of substrings is met when ANY of them appears (("def call", "concat("): a layer, or an accumulator).
    also_requires: ClassVar[tuple[str | tuple[str, ...], ...]] = ()
    # The facts the rule queries (``Fact``); None: not declared yet.
    uses: ClassVar[frozenset[Fact] | None] = None
    # Only run where float16 compute is reachable (a mixed_float16 policy in play).
    requires_float16: ClassVar[bool] = False
    # What must hold in a file for the rule to report there (``Need``); the engine skips the parse of a file
    # where every selected rule needs something that cheap facts prove absent (``mpfix.gate``).
    needs: ClassVar[frozenset[Need]] = frozenset()
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
        template: str | None = None,
        *,
        fix: dict[cst.CSTNode, Any] | Fix | None = None,
        safety: FixSafety | None = None,
        description: str | None = None,
        imports: tuple[str, ...] = (),
        note: str | tuple[str, ...] | None = None,
        **fields: FieldValue,
    ) -> None:
        """Report ``node`` with the template named ``template`` (None: ``message``) filled with ``fields``,
        and the notes named ``note`` after it; ``fix`` maps original nodes to their replacements."""
        if isinstance(fix, dict):
            fix = Fix(
                changes=fix,
                safety=safety or self.fix_safety,
                description=description or f"Fix {self.code}",
                imports=imports,
            )
        text = self.message_template(template)
        notes = (note,) if isinstance(note, str) else tuple(note or ())
        for name in notes:
            text = f"{text} ({self.note_template(name)})"
        values = {name: str(value) for name, value in fields.items()}
        self.context.reports.append((self, Report(node, render(text, values), fix, values, text,
                                                  MessageRef(template, notes))))

    @classmethod
    def message_template(cls, name: str | None = None) -> str:
        """The message template called ``name`` (None: the main one, ``message``)."""
        if name is None:
            return cls.message
        try:
            return cls.messages[name]
        except KeyError:
            raise TemplateError(f"{cls.code} has no message template {name!r}") from None

    @classmethod
    def note_template(cls, name: str) -> str:
        try:
            return cls.all_notes()[name]
        except KeyError:
            raise TemplateError(f"{cls.code} has no note template {name!r}") from None

    @classmethod
    def all_notes(cls) -> dict[str, str]:
        """``notes`` of the rule and of its bases (a base's shared notes, e.g. why API-drift fixes are withheld)."""
        merged: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("notes", {}))
        return merged

    @classmethod
    def templates(cls) -> dict[str, str]:
        """Every template the rule declares: ``message``, ``messages`` by name, ``notes`` as ``note:name``."""
        return {"message": cls.message, **cls.messages, **{f"note:{k}": v for k, v in cls.all_notes().items()}}

    @classmethod
    def may_match(cls, source: str | bytes) -> bool:
        """The prefilter: can this rule find anything in ``source``?"""
        if not all(required(s, source) for s in cls.also_requires):
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
