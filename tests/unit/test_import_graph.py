"""No import cycle inside `flows/`: module-level and function-level imports both count.

A cycle means two modules cannot be read (or moved) apart; the test walks every import statement
with `ast`, so an import hidden inside a function to dodge the cycle at runtime still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import flows

ROOT = Path(flows.__file__).resolve().parent
PACKAGE = "flows"

KNOWN_CYCLES: set[frozenset[str]] = set()
"""Cycles tolerated for now, each named with the modules it joins (none today)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """The flows module an imported name lives in (a name inside a module maps to the module)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every flows module `module` imports anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            if name.split(".")[0] != PACKAGE:
                continue
            target = _resolve(name, known)
            if target is not None and target != module and not module.startswith(target + "."):
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the flows modules it imports (a package's own parents are left out)."""
    modules = _modules()
    known = set(modules)
    return {module: _imports(module, path, known) for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: list[str] = []
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


def test_the_walk_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "flows.pipeline.qualify" in graph["flows.commands.qualify"]


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_flows_has_no_import_cycle() -> None:
    found = [c for c in cycles(import_graph()) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles in flows/: " + "; ".join(" <-> ".join(c) for c in found)
