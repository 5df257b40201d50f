"""Whole import statements a fix needs, added after a module's last top-level import (``add_imports``).

Moved out of ``mpfix.engine`` unchanged (the engine re-exports it), to keep that module under 400 lines.
"""

from __future__ import annotations

import libcst as cst


def add_imports(module: cst.Module, statements: list[str]) -> cst.Module:
    """Add whole import statements missing from the module, after its last top-level import.

    A statement is missing unless every name it binds is already bound to the same module, by an
    import anywhere in the file (``import numpy as np, tensorflow as tf``, one inside ``try:``);
    ``tensorflow.compat.v2`` counts as ``tensorflow`` (the same TF2 API), so ``import tensorflow as tf``
    is not added next to ``import tensorflow.compat.v2 as tf``. An import that would rebind a name
    the file binds otherwise is still added: fix validation rejects that fix (``rebound_names``).
    """
    from mpfix.codemods.names import ImportTable, fold_compat_v2

    existing = {module.code_for_node(s).strip() for s in module.body if _is_import(s)}
    table = ImportTable(module)

    def present(statement: str) -> bool:
        if statement in existing:
            return True
        try:
            parsed = cst.parse_statement(statement)
        except cst.ParserSyntaxError:
            return False
        small = parsed.body[0] if isinstance(parsed, cst.SimpleStatementLine) and len(parsed.body) == 1 else None
        if not isinstance(small, cst.Import):
            return False
        for alias in small.names:
            full = alias.evaluated_name
            if alias.asname is None:  # ``import a.b`` binds ``a`` (``from a import x`` does not)
                head = full.split(".")[0]
                if full not in table.modules or table.aliases.get(head) != head:
                    return False
            elif fold_compat_v2(table.aliases.get(alias.evaluated_alias or "", "")) != fold_compat_v2(full):
                return False
        return True

    missing = [s for s in statements if not present(s)]
    if not missing:
        return module
    body = list(module.body)
    index = 0
    for i, stmt in enumerate(body):
        if _is_import(stmt) or (i == 0 and _is_docstring(stmt)):
            index = i + 1
        elif index:
            break
    new = [cst.parse_statement(s + module.default_newline, config=module.config_for_parsing) for s in missing]
    return module.with_changes(body=body[:index] + new + body[index:])


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))
