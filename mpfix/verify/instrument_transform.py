"""LibCST transform behind ``mpfix instrument``: guards in the user's GradientTape step.

Inside every ``with tf.GradientTape() as tape:`` block:

* before ``scaled = opt.scale_loss(loss)`` (Keras 3) or ``opt.get_scaled_loss(loss)``
  (Keras 2): ``loss = tf.debugging.check_numerics(loss, "loss before scaling")``;
* after it: ``scaled = tf.debugging.check_numerics(scaled, "loss after scaling")``;
* without a scaling call: the tape's gradient target gets one check, "loss";

and after the optimizer's ``apply_gradients``/``apply``/``minimize`` that follows the block
(or after the block itself): ``tf.print("loss scale:", opt.dynamic_scale)`` (Keras 3;
``opt.loss_scale_factor or 1.0`` when ``opt`` is a plain optimizer, which has
``scale_loss`` but no ``dynamic_scale``) or ``opt.loss_scale`` (Keras 2). ``tf.print`` and
``check_numerics`` work eagerly and inside ``tf.function``. Running it twice changes nothing the second time.

The tapes, scaling calls and updates are those of the gradient-path model the loss-scaling rules use
(``mpfix.codemods.analysis.gradient_path``): one notion of a training step for ``check`` and ``instrument``.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from mpfix.codemods._walk import walk
from mpfix.codemods.analysis.gradient_path import training_steps
from mpfix.codemods.base import RuleContext
from mpfix.codemods.names import ImportTable
from mpfix.parsing import parse_module
from mpfix.policy import policy_in_text

SCALE_METHODS = {"scale_loss": 3, "get_scaled_loss": 2}
APPLY_METHODS = ("apply_gradients", "apply", "minimize")
MARKERS = ("loss before scaling", "loss after scaling", '"loss"')


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _tf_alias(module: cst.Module) -> str | None:
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if _code(alias.name) == "tensorflow":
                        return alias.asname.name.value if alias.asname else "tensorflow"
    return None


def imports_tf_keras(module: cst.Module) -> bool:
    code = module.code
    return "import tf_keras" in code or "from tf_keras" in code


def _scaling(stmt: cst.BaseStatement):
    """(target, loss, optimizer code) for ``target = opt.scale_loss(loss)``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    assign = stmt.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target, value = assign.targets[0].target, assign.value
    if not (isinstance(target, cst.Name) and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
        return None
    if value.func.attr.value not in SCALE_METHODS or len(value.args) != 1:
        return None
    loss = value.args[0].value
    if not isinstance(loss, cst.Name):
        return None
    return target.value, loss.value, _code(value.func.value)


def _assigned_name(stmt: cst.BaseStatement) -> str | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
        if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
            return small.target.value
    return None


def _calls_method_on(stmt: cst.CSTNode, owner: str, methods) -> bool:
    for node in walk(stmt):
        if type(node) is cst.Call and isinstance(node.func, cst.Attribute) and node.func.attr.value in methods \
                and _code(node.func.value) == owner:
            return True
    return False


class _Plan:
    """Where the guards go, found with the gradient-path model (mpfix.codemods.analysis.gradient_path):
    statements to insert before / after a statement, keyed by the original statement node."""

    def __init__(self, module: cst.Module, tf: str, keras: int) -> None:
        self.tf = tf
        self.keras = keras
        self.before: dict[int, list[cst.BaseStatement]] = {}
        self.after: dict[int, list[cst.BaseStatement]] = {}
        self.changed = 0
        text = module.code
        context = RuleContext(module=module, path=Path("<instrument>"), keras=keras, policy=policy_in_text(text),
                              module_policy=policy_in_text(text), imports=ImportTable(module))
        analysis = training_steps(context)
        for scope in analysis.scopes:
            tapes = analysis.tapes.get(id(scope.node), {})
            targets = {g.target.value for s, g in analysis.gradients
                       if s is scope and g.tape is not None and isinstance(g.target, cst.Name)}
            # Where each scaling call's gradients are applied, from the flows of this scope.
            applies = {id(f.scale.call): f.apply.statement.node for f in analysis.flows
                       if f.scope is scope and f.scale is not None}
            blocks = {id(with_node): with_node for tape in tapes.values() for with_node in tape.withs}
            statements = [st.node for st in scope.statements]
            for with_node in blocks.values():
                if isinstance(with_node.body, cst.IndentedBlock):
                    self._tape_block(with_node, targets, applies, statements, analysis)

    def _check(self, name: str, message: str) -> cst.BaseStatement:
        return cst.parse_statement(f'{name} = {self.tf}.debugging.check_numerics({name}, "{message}")\n')

    def _print_scale(self, optimizer: str) -> cst.BaseStatement:
        if self.keras == 2:
            # Only a Keras 2 LossScaleOptimizer has get_scaled_loss (and loss_scale).
            scale = f"{optimizer}.loss_scale"
        else:
            # Every Keras 3 optimizer has scale_loss, only a LossScaleOptimizer has
            # dynamic_scale; a plain one scales by its loss_scale_factor (None: 1).
            scale = (
                f'{optimizer}.dynamic_scale if hasattr({optimizer}, "dynamic_scale") '
                f"else ({optimizer}.loss_scale_factor or 1.0)"
            )
        return cst.parse_statement(f'{self.tf}.print("loss scale:", {scale})\n')

    def _tape_block(self, node: cst.With, targets: set[str], applies: dict, statements: list, analysis) -> None:
        if any(marker in _code(node) for marker in MARKERS):
            return
        body = node.body.body
        optimizer = None
        scale_node = None
        scales = {id(s.statement.node): s for s in analysis.scale_calls if s.method in SCALE_METHODS}
        for stmt in body:
            scaling = _scaling(stmt)
            if scaling is not None and id(stmt) in scales:
                scaled, loss, optimizer = scaling
                scale_node = scales[id(stmt)].call
                self.before.setdefault(id(stmt), []).append(self._check(loss, "loss before scaling"))
                self.after.setdefault(id(stmt), []).insert(0, self._check(scaled, "loss after scaling"))
        if optimizer is None:
            # No scaling call: guard the last assignment of a gradient target.
            for stmt in reversed(body):
                name = _assigned_name(stmt)
                if name is not None and name in targets:
                    self.after.setdefault(id(stmt), []).insert(0, self._check(name, "loss"))
                    break
            else:
                return
            self.changed += 1
            return
        self.changed += 1
        where = applies.get(id(scale_node))
        if where is None or not _calls_method_on(where, optimizer, APPLY_METHODS):
            where = node
            # The update that follows the block (minimize included), else the block itself.
            if node in statements:
                for later in statements[statements.index(node) + 1:]:
                    if _calls_method_on(later, optimizer, APPLY_METHODS):
                        where = later
                        break
        self.after.setdefault(id(where), []).append(self._print_scale(optimizer))


class InstrumentSteps(cst.CSTTransformer):
    """Insert the guards the plan lists; ``changed`` counts the tape blocks instrumented."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.changed = plan.changed

    def _rebuild(self, original_body, updated_body) -> list:
        out: list = []
        for original, updated in zip(original_body, updated_body):
            out += self.plan.before.get(id(original), [])
            out.append(updated)
            out += self.plan.after.get(id(original), [])
        return out

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._rebuild(original.body, updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._rebuild(original.body, updated.body))


def instrument_source(source: str, keras: int = 3) -> tuple[str, int]:
    """Return (new source, number of tape blocks instrumented). Keras 2 is used when the
    file imports tf_keras, whatever ``keras`` says. Raises ``libcst.ParserSyntaxError``, or
    ``mpfix.parsing.TooComplex`` (a RecursionError) for source LibCST's parser could crash on."""
    module = parse_module(source)
    if imports_tf_keras(module):
        keras = 2
    alias = _tf_alias(module)
    transform = InstrumentSteps(_Plan(module, alias or "tf", keras))
    new = module.visit(transform)
    if transform.changed and alias is None:
        from libcst.codemod import CodemodContext
        from libcst.codemod.visitors import AddImportsVisitor

        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, "tensorflow", asname="tf")
        new = AddImportsVisitor(context).transform_module(new)
    code = new.code
    compile(code, "<instrumented>", "exec")
    return code, transform.changed
