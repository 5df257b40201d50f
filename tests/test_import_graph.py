"""No import cycle among mpfix's modules, counting imports inside functions and under TYPE_CHECKING.

Data flows one way (discover -> project facts -> parse -> file facts -> rules -> findings ->
output); a function-level import that closes a cycle only hides the inversion from Python. The
graph is computed from ``ast`` over every module of ``mpfix`` and of the rules package
(``codemods/``, installed as ``mpfix.codemods``); an import of a package counts as an edge to
its ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"mpfix": ROOT / "mpfix", "mpfix.codemods": ROOT / "codemods"}


def _modules() -> dict[str, Path]:
    found = {}
    for name, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def _resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if not level:
        return module
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its body."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", node.level, name, is_package)
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                # `import mpfix.a.b` runs mpfix.a.b; `from mpfix.a import b` runs mpfix.a and, if b is a module, it.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "mpfix":
                    graph[name].add(target)
                # ... and the packages above it (``mpfix.codemods.analysis.x`` runs every rule's import
                # in ``mpfix/codemods/__init__.py``): those above the importer itself already ran.
                target = target.rpartition(".")[0]
                while target and target != "mpfix":
                    if target != name and not name.startswith(target + "."):
                        graph[name].add(target)
                    target = target.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Iterative: recursion depth is the length of an import chain, fine, but keep it simple.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "mpfix.codemods" in graph and "mpfix.engine" in graph["mpfix.runner"]
    # A module inside a package runs the package's __init__ first.
    assert "mpfix.codemods" in graph["mpfix.project.reach"] or "mpfix.codemods.analysis" not in str(graph["mpfix.project.reach"])
    # A cycle made only of function-level imports is found (the check can fail).
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_counting_function_level_imports():
    graph = import_graph()
    found = cycles(graph)

    def edges(component):
        return sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)

    assert found == [], "\n\n".join("\n".join(edges(c)) for c in found)
