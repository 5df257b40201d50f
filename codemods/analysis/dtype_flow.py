"""Flow-sensitive reads of a name the region assigns float16 and float32 (``inputs = tf.cast(inputs, tf.float32)``).

The name table (``dtype_env``) joins every assignment of a name; where those disagree (float16 and
float32) it says unknown. Read at one use, the name holds the value of the last assignment that
surely ran before it, or of one of the assignments after that which may have run (in a branch):

    inputs = tf.cast(inputs, self.compute_dtype)        # float16
    inputs_dtype = inputs.dtype.base_dtype
    if inputs_dtype in (tf.float16, tf.bfloat16):       # true under a mixed policy: its body runs
        inputs = tf.cast(inputs, tf.float32)
    outputs = tf.nn.batch_normalization(inputs, ...)    # inputs is float32 here

An ``if`` that tests a dtype against dtype spellings (``==``, ``!=``, ``in``, ``not in``) is decided
when the tested dtype is known: its body surely runs, or never. A use inside a loop keeps the joined
(unknown) dtype: a later assignment of the loop reaches it on the next pass.
"""

from __future__ import annotations

import libcst as cst

from mpfix.codemods.analysis.dtype_lattice import UNK, Dtype, join_all, spelled_dtype
from mpfix.codemods.analysis.dtype_regions import ELEMENT, Region

_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)
_DTYPE_ATTRIBUTES = ("dtype", "base_dtype", "compute_dtype", "_compute_dtype")
_STATEMENTS = (cst.SimpleStatementLine, cst.For, cst.With, cst.If, cst.Try, cst.While)


class FlowDtypes:
    """Mixed into ``DtypeAnalysis``: ``reaching_dtype``."""

    flow = True  # names read where they are used (False: the joined name table only)

    def dtype_insensitive(self, node: cst.BaseExpression, region: Region) -> Dtype:
        """``node``'s dtype with every name read from the joined name table (MP206's certain mixes)."""
        self.flow = False
        try:
            return self.dtype(node, region)
        finally:
            self.flow = True

    def reaching_dtype(self, node: cst.Name, region: Region, depth: int) -> Dtype | None:
        """The dtype of the assignments of ``node``'s name that reach it; None where flow cannot say more."""
        name = node.value
        where = self.order.get(node)
        if where is None or depth > 20 or name in region.iterated:
            return None
        # Every binding of the name, by the source position of its value: an assigned value (`a, b = x, y`: a is x),
        # or (source, index) of an element of `a, b = source` (index None: nobody indexes it, `(a, b), c = v`).
        found: list[tuple[cst.BaseExpression, int | None | bool]] = [(v, False) for v in region.assigned.get(name, [])
                                                                    if v is not ELEMENT]
        found += region.elements.get(name, [])
        if not found or any(self.order.get(v) is None for v, _ in found):
            return None
        chain = []
        for ancestor in self.ancestors(node):
            if ancestor is region.node:
                break
            if isinstance(ancestor, _LOOPS):
                return None
            chain.append(ancestor)
        ids = {id(a) for a in chain}
        dtypes: set[Dtype] = set()
        bound: dict[int, set[bool]] = {}  # the branches of an if/else found to bind the name, by the if
        for value, index in sorted((f for f in found if self.order[f[0]] < where), key=lambda f: self.order[f[0]],
                                   reverse=True):
            if id(value) in region.augmented or id(value) in ids:
                continue  # `x op= v` keeps x's dtype; `x = f(x)` reads the x before it
            forks: list = []
            runs = self._runs_before(value, ids, region, forks)
            if runs is False:
                continue  # under a dtype test that is false here, or in the other branch
            if self._unknown_method(value):
                return None  # `returns = returns.stack()[::-1]`: an unknown object's method is a guess, not a fact
            dtypes.add(self.dtype(value, region, depth + 1) if index is False else UNK if index is None else
                       self.element_dtype(value, index, region, depth + 1))
            if runs:
                return self._reached(dtypes)
            if len(forks) == 1 and forks[0] is not None:
                # Surely run on its branch of an if/else: once both branches bind the name, one of them surely
                # ran, and the bindings before the if cannot reach (branches that disagree: `_reached` is None).
                branches = bound.setdefault(forks[0][0], set())
                branches.add(forks[0][1])
                if len(branches) == 2:
                    return self._reached(dtypes)
        if name not in region.param_dtypes:
            return None
        return self._reached(dtypes | {region.param_dtypes[name]})

    def _unknown_method(self, value: cst.BaseExpression) -> bool:
        """``x.stack()``, ``x.write(i, v)[::-1]``: a method of a local object no table knows (a ``TensorArray``)."""
        while isinstance(value, (cst.Subscript, cst.Attribute)) and not isinstance(value, cst.Call):
            value = value.value
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
            return False
        receiver = value.func.value
        return isinstance(receiver, cst.Name) and receiver.value != "self" and not self.resolve(value.func)

    @staticmethod
    def _reached(dtypes: set[Dtype]) -> Dtype | None:
        if UNK in dtypes or (any(d.wide for d in dtypes) and len(dtypes) > 1):
            return None
        return join_all(dtypes)

    def _runs_before(self, value: cst.BaseExpression, use_ancestors: set[int], region: Region,
                     forks: list | None = None) -> bool | None:
        """True: the statement assigning ``value`` surely ran before the use; False: it cannot have (a false dtype
        test, or the other branch of an ``if`` the use is in); None: it may have. ``forks`` gets why it may: the
        branch of an ``if``/``else`` it sits on, ``(id of the if, taken)`` (``Binding.branch``'s pair), or None
        for a step that may not run at all (a loop's or a try's body, an ``if`` with no ``else``, an ``elif``)."""
        node = value
        while node is not None and not isinstance(node, _STATEMENTS):
            node = self.parent.get(node)
        surely = True
        while node is not None and node is not region.node:
            block = self.parent.get(node)
            if block is None:
                return None
            if id(block) in use_ancestors:
                return True if surely else None
            owner = self.parent.get(block)
            taken = not isinstance(owner, cst.Else)
            if not taken:
                owner = self.parent.get(owner)
            if isinstance(owner, cst.If):
                if id(owner) in use_ancestors:
                    return False  # the use is in the other branch of this `if` (or its test)
                test = self._dtype_test(owner.test, region)
                if test is not None and test is not taken:
                    return False
                surely = surely and test is taken
                if test is None and forks is not None:
                    exhaustive = isinstance(owner.orelse, cst.Else) and not isinstance(self.parent.get(owner), cst.If)
                    forks.append((id(owner), taken) if exhaustive else None)
            elif isinstance(owner, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) or owner is None:
                return None
            elif not isinstance(owner, cst.With):
                surely = False  # a loop's or a try's body may run
                if forks is not None:
                    forks.append(None)
            node = owner
        return None

    def _dtype_test(self, test: cst.BaseExpression, region: Region) -> bool | None:
        """``x.dtype == tf.float16``, ``dtype in (tf.float16, tf.bfloat16)``: its value here, None if undecided."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self._dtype_test(test.left, region), self._dtype_test(test.right, region)
            if isinstance(test.operator, cst.And):
                return False if False in (left, right) else (True if left and right else None)
            return True if True in (left, right) else (False if left is False and right is False else None)
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
        left = test.left
        if isinstance(left, cst.Name):  # `inputs_dtype = inputs.dtype.base_dtype`
            values = region.assigned.get(left.value, [])
            left = values[0] if len(values) == 1 else None
        if not (isinstance(left, cst.Attribute) and left.attr.value in _DTYPE_ATTRIBUTES):
            return None
        tested = self.dtype_of_spelling(left, region)
        if tested is UNK:
            return None
        if isinstance(operator, (cst.In, cst.NotIn)) and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
            named = [spelled_dtype(e.value, self.resolve) for e in right.elements]
            if None in named:
                return None
            return (tested in named) is isinstance(operator, cst.In)
        if isinstance(operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
            named_one = spelled_dtype(right, self.resolve)
            if named_one is None:
                return None
            return (tested is named_one) is isinstance(operator, (cst.Equal, cst.Is))
        return None
