"""Fix validation beyond ``compile()``: a fix is kept only if the fixed file still makes sense.

Two checks, both against the file as it was before any fix (so a name that was already
undefined, or a dtype mix that was already there, is not the fix's doing):

* **every name the fixed file uses is bound**: pyflakes' undefined-name messages of the fixed
  text, compared with the original's; a fix that writes ``tf.cast(...)`` into a Keras 3 module
  that never imports ``tf`` would raise NameError at run time;
* **no new float16/float32 mix** for fixes that change dtypes, by the shared dtype analysis
  (``mpfix.codemods.analysis.dtypes.new_dtype_mixes``): a cast
  that makes one operand float16 and leaves the other float32 raises on the TF backend.

The engine calls this for each pass of fixes before keeping it; a fix that fails is reported
without a fix and never written.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

# Substrings of a fix's replacement text that make it a dtype-changing fix.
_DTYPE_WORDS = ("cast(", "dtype", "float16", "float32", "float64", "bfloat16", "astype(")


def undefined_names(text: str, filename: str = "<fixed>") -> set[str] | None:
    """Names pyflakes reports as undefined in ``text``; None when it cannot tell (no parse)."""
    from pyflakes import checker, messages

    try:
        tree = ast.parse(text, filename=filename, type_comments=False)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        found = checker.Checker(tree, filename=filename)
    except Exception:  # pyflakes itself failing (RecursionError included) must not block fixes
        return None
    return {m.message_args[0] for m in found.messages
            if isinstance(m, (messages.UndefinedName, messages.UndefinedExport))}


def changes_dtypes(before: str, after: str) -> bool:
    """Whether a fix may change dtypes: its new text names a dtype, a cast or a policy dtype."""
    return any(after.count(word) != before.count(word) for word in _DTYPE_WORDS)


@dataclass
class Validator:
    """Checks fixed texts of one file against the original."""

    original: str
    filename: str
    original_module: cst.Module | None = None
    keras: int = 3
    _undefined: set[str] | None = field(default=None, repr=False)
    _computed: bool = field(default=False, repr=False)

    def _original_undefined(self) -> set[str] | None:
        if not self._computed:
            self._undefined = undefined_names(self.original, self.filename)
            self._computed = True
        return self._undefined

    def new_undefined(self, fixed: str) -> set[str]:
        """Names undefined in ``fixed`` that the original did not leave undefined."""
        before = self._original_undefined()
        if before is None:
            return set()  # the original is not plain Python (IPython cells, Python 2): no baseline
        after = undefined_names(fixed, self.filename)
        return set() if after is None else after - before

    def problem(self, fixed: str, fixed_module: cst.Module | None = None) -> str | None:
        """Why ``fixed`` must not be written (None: it passes)."""
        new = self.new_undefined(fixed)
        if new:
            names = ", ".join(f"`{n}`" for n in sorted(new))
            return f"it would use {names}, which the file never defines or imports"
        if fixed_module is not None and self.original_module is not None and changes_dtypes(self.original, fixed):
            from mpfix.codemods.analysis.dtypes import new_dtype_mixes

            try:
                mixes = new_dtype_mixes(self.original_module, fixed_module, self.keras)
            except RecursionError:
                mixes = []
            if mixes:
                return f"it would mix dtypes: {mixes[0]}"
        return None
