"""Fix validation beyond ``compile()``: a fix is kept only if the fixed file still makes sense.

Two checks, both against the file as it was before any fix (so a name that was already
undefined, or a dtype mix that was already there, is not the fix's doing):

* **every name the fixed file uses is bound**: pyflakes' undefined-name messages of the fixed
  text, compared with the original's; a fix that writes ``tf.cast(...)`` into a Keras 3 module
  that never imports ``tf`` would raise NameError at run time;
* **no new float16/float32 mix** for fixes that change dtypes, by the shared dtype analysis
  (``mpfix.codemods.facts.dtype_facts.new_mixes``, MP206's detector): a cast
  that makes one operand float16 and leaves the other float32 raises on the TF backend.

* **no added import rebinds a name** the file already binds to something else (``import
  tensorflow as tf`` next to ``import tensorflow.compat.v1 as tf``, a ``tf = ...`` or a ``def``):
  the file's own uses of the name would then reach the new module (``rebound_names``).

* **no half migration of loss scaling**: a fixed function that scales with one Keras generation's
  methods and unscales with the other's on the same optimizer (``opt.scale_loss`` beside
  ``opt.get_unscaled_gradients``) runs on neither generation; paired edits go in one fix or none
  (``mixed_scaling``).

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


_OTHER = "<not an import>"


def _bindings(tree: ast.AST) -> dict[str, set[str]]:
    """Name → what binds it anywhere in the file: an imported module path, or ``_OTHER``."""
    from mpfix.codemods.names import fold_compat_v2

    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                found.setdefault(name, set()).add(fold_compat_v2(alias.name if alias.asname else name))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    path = f"{'.' * node.level}{node.module or ''}.{alias.name}"
                    found.setdefault(alias.asname or alias.name, set()).add(fold_compat_v2(path))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, set()).add(_OTHER)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.setdefault(node.id, set()).add(_OTHER)
    return found


def _import_keys(tree: ast.Module) -> list[str]:
    return [ast.dump(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def rebound_names(original: str, fixed: str) -> list[tuple[str, str]] | None:
    """(name, what the file bound it to) for each name an import added by the fix binds that the
    original file binds to something else; None when either text does not parse."""
    try:
        before, after = ast.parse(original), ast.parse(fixed)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    old_keys = _import_keys(before)
    added = [node for node in ast.walk(after) if isinstance(node, (ast.Import, ast.ImportFrom))]
    remaining = list(old_keys)
    new_imports = []
    for node in added:
        key = ast.dump(node)
        if key in remaining:
            remaining.remove(key)
        else:
            new_imports.append(node)
    if not new_imports:
        return []
    old, now = _bindings(before), _bindings(after)
    clashes = []
    for name, what in sorted(_bindings(ast.Module(body=new_imports, type_ignores=[])).items()):
        # A binding of the original that the fixed file still has next to the new import: the
        # file's own uses now meet two meanings. The same import again (one was inside ``try:``)
        # rebinds nothing, and a fix that rewrites the import itself leaves no old binding behind.
        kept = (old.get(name, set()) & now.get(name, set())) - what
        if kept and not what <= old.get(name, set()):
            clashes.append((name, " and ".join(sorted("an assignment or definition" if b == _OTHER else b
                                                      for b in kept))))
    return clashes


# Loss-scaling methods of each Keras generation (KERAS_API.md): Keras 2's LossScaleOptimizer has the
# first two, Keras 3's the last; one optimizer in one training step uses one generation's.
_KERAS2_SCALING = frozenset({"get_scaled_loss", "get_unscaled_gradients"})
_KERAS3_SCALING = frozenset({"scale_loss"})


def mixed_scaling(text: str) -> set[tuple[str, str]] | None:
    """(function, receiver) pairs whose body calls both generations' loss-scaling methods on the same
    receiver; None when ``text`` does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: set[tuple[str, str]] = set()
    scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in [tree, *scopes]:
        methods: dict[str, set[str]] = {}
        for node in ast.walk(scope):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _KERAS2_SCALING | _KERAS3_SCALING):
                methods.setdefault(ast.unparse(node.func.value), set()).add(node.func.attr)
        name = getattr(scope, "name", "<module>")
        found |= {(name, receiver) for receiver, used in methods.items()
                  if used & _KERAS2_SCALING and used & _KERAS3_SCALING}
    return found


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
        if "import" in fixed:
            rebound = rebound_names(self.original, fixed)
            if rebound:
                name, was = rebound[0]
                return f"an import it adds would rebind `{name}`, which the file binds to {was}"
        if "scale_loss" in fixed and "get_" in fixed:
            before, after = mixed_scaling(self.original), mixed_scaling(fixed)
            new_mix = sorted(after - before) if before is not None and after is not None else []
            if new_mix:
                scope, receiver = new_mix[0]
                return (f"it would leave `{scope}` scaling with Keras 2 and Keras 3 methods on `{receiver}` "
                        "(half a migration runs on neither generation)")
        if fixed_module is not None and self.original_module is not None and changes_dtypes(self.original, fixed):
            from mpfix.codemods.facts.dtype_facts import new_mixes  # MP206's own mix detector

            try:
                mixes = new_mixes(self.original_module, fixed_module, self.keras)
            except RecursionError:
                mixes = []
            if mixes:
                return f"it would mix dtypes: {mixes[0]}"
        return None
