"""Which tests of a partly reached test module run under the policy (``Reach.partial``)."""

from __future__ import annotations

from mpfix.project.entries import entries_in

def float16_regions(text: str, fixtures: tuple[str, ...]) -> list[tuple[int, int]] | None:
    """Line ranges of the tests in ``text`` that run under the policy; None: the whole file.

    A test counts when it sets the policy itself, is parametrised over it, or takes one of
    ``fixtures`` (as a parameter or ``usefixtures``); a test class when its decorators or its
    ``setUp`` do. Module-level helpers those tests use by name count too. Uses ``ast`` (only
    for such test modules, which the engine parses anyway).
    """
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = {e.line for e in entries_in(text.encode("utf-8", "surrogateescape"))}
    wanted = set(fixtures)

    def start_of(node) -> int:
        return min([d.lineno for d in node.decorator_list] + [node.lineno])

    def uses_fixture(decorators) -> bool:
        for d in decorators:
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "usefixtures":
                if any(isinstance(a, ast.Constant) and a.value in wanted for a in d.args):
                    return True
        return False

    def in_decorators(node) -> bool:
        first_body = node.body[0].lineno if node.body else node.lineno
        return any(start_of(node) <= line < first_body for line in lines) or uses_fixture(node.decorator_list)

    def function_counts(node) -> bool:
        if any(start_of(node) <= line <= node.end_lineno for line in lines) or uses_fixture(node.decorator_list):
            return True
        args = node.args
        return bool(wanted & {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)})

    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    chosen: list = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            setups = [m for m in node.body if isinstance(m, functions)
                      and m.name in ("setUp", "setUpClass", "setup_method", "setup_class")]
            if in_decorators(node) or any(function_counts(m) for m in setups):
                chosen.append(node)
                continue
            chosen.extend(m for m in node.body if isinstance(m, functions) and function_counts(m))
        elif isinstance(node, functions) and function_counts(node):
            chosen.append(node)
    # Module-level helpers and classes the chosen tests use by name (one level).
    used = {n.id for node in chosen for n in ast.walk(node) if isinstance(n, ast.Name)}
    picked = {id(node) for node in chosen}
    for node in tree.body:
        if isinstance(node, (*functions, ast.ClassDef)) and node.name in used and id(node) not in picked:
            chosen.append(node)
    return sorted((start_of(node), node.end_lineno) for node in chosen)
