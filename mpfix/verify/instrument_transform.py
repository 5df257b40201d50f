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
"""

from __future__ import annotations

import libcst as cst

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


def _is_tape(with_node: cst.With) -> bool:
    for item in with_node.items:
        call = item.item
        if isinstance(call, cst.Call) and _code(call.func).split(".")[-1] == "GradientTape":
            return True
    return False


def _gradient_targets(node: cst.CSTNode) -> set[str]:
    """Names passed as the first argument of ``*.gradient(...)`` anywhere under node."""
    found: set[str] = set()

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "gradient" and call.args:
                if isinstance(call.args[0].value, cst.Name):
                    found.add(call.args[0].value.value)

    node.visit(Visitor())
    return found


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
    found = False

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            nonlocal found
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in methods:
                if _code(call.func.value) == owner:
                    found = True

    stmt.visit(Visitor())
    return found


class InstrumentSteps(cst.CSTTransformer):
    """Insert the guards; ``changed`` counts the tape blocks instrumented."""

    def __init__(self, tf: str, keras: int) -> None:
        self.tf = tf
        self.keras = keras
        self.changed = 0

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

    def _instrument_tape(self, node: cst.With, targets: set[str]):
        if any(marker in _code(node) for marker in MARKERS):
            return node, None
        body = list(node.body.body)
        out: list[cst.BaseStatement] = []
        optimizer = None
        for stmt in body:
            scaling = _scaling(stmt)
            if scaling is not None:
                scaled, loss, optimizer = scaling
                out += [self._check(loss, "loss before scaling"), stmt, self._check(scaled, "loss after scaling")]
            else:
                out.append(stmt)
        if optimizer is None:
            # No scaling call: guard the last assignment of a gradient target.
            for index in range(len(out) - 1, -1, -1):
                name = _assigned_name(out[index])
                if name is not None and name in targets:
                    out.insert(index + 1, self._check(name, "loss"))
                    break
            else:
                return node, None
        self.changed += 1
        return node.with_changes(body=node.body.with_changes(body=out)), optimizer

    def _instrument_block(self, statements, scope: cst.CSTNode):
        targets = _gradient_targets(scope)
        out = list(statements)
        index = 0
        while index < len(out):
            stmt = out[index]
            if isinstance(stmt, cst.With) and _is_tape(stmt):
                new, optimizer = self._instrument_tape(stmt, targets)
                out[index] = new
                if optimizer is not None and new is not stmt:
                    where = index
                    for later in range(index + 1, len(out)):
                        if _calls_method_on(out[later], optimizer, APPLY_METHODS):
                            where = later
                            break
                    out.insert(where + 1, self._print_scale(optimizer))
            index += 1
        return out

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated.with_changes(body=self._instrument_block(updated.body, updated))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._instrument_block(updated.body, updated))


def instrument_source(source: str, keras: int = 3) -> tuple[str, int]:
    """Return (new source, number of tape blocks instrumented). Keras 2 is used when the
    file imports tf_keras, whatever ``keras`` says. Raises ``libcst.ParserSyntaxError``."""
    module = cst.parse_module(source)
    if imports_tf_keras(module):
        keras = 2
    alias = _tf_alias(module)
    transform = InstrumentSteps(alias or "tf", keras)
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
