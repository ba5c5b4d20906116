"""Imports inside `flows/` run one way: no cycle, and no import against the layers.

A cycle means two modules cannot be read (or moved) apart; an import against the layers (the
benchmark library reaching up into the pipeline, a spec into the benchmark library) means a lower
room cannot be read, tested or reused without the rooms above it. The test walks every import
statement with `ast`, so an import hidden inside a function to dodge a cycle at runtime still
counts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import flows

ROOT = Path(flows.__file__).resolve().parent
PACKAGE = "flows"

KNOWN_CYCLES: set[frozenset[str]] = set()
"""Cycles tolerated for now, each named with the modules it joins (none today)."""


@dataclass(frozen=True)
class Forbidden:
    """Modules under `importer` never import modules under `imported`, for `reason`."""

    importer: str
    imported: str
    reason: str

    def __str__(self) -> str:
        return f"{self.importer} never imports {self.imported}: {self.reason}"


LAYER_RULES = (
    Forbidden(
        "flows.gates", "flows.record", "gates never read records; History hands them the past"
    ),
    Forbidden(
        "flows.ui", "flows.pipeline", "the ui observes stage events, the pipeline emits them"
    ),
    Forbidden("flows.spec", "flows.bench", "specs are the bottom room; bench reads them"),
    Forbidden("flows.record", "flows.cluster", "a record is recomputed from its files alone"),
    Forbidden("flows.bench", "flows.pipeline", "the benchmark library runs without a flow"),
    Forbidden("flows.bench", "flows.gates", "gates use the benchmark library, not the reverse"),
    Forbidden("flows.bench", "flows.ui", "the benchmark library prints nothing of its own"),
    Forbidden("flows.pipeline", "flows.research", "research tools sit above the pipeline"),
    Forbidden("flows.bench", "flows.research", "research tools sit above the benchmark library"),
)
"""The layer rules: each forbidden edge with the reason it is forbidden."""

PENDING_LAYER_FIXES: dict[tuple[str, str], str] = {}
"""Imports against a rule that another branch removes, each with who removes it (empty it when
that branch lands: an entry whose import is gone fails the test)."""


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


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(
    graph: dict[str, set[str]], rules: tuple[Forbidden, ...]
) -> list[tuple[str, str, Forbidden]]:
    """Every import that breaks a rule: (importer, imported, the rule), sorted."""
    return sorted(
        (module, target, rule)
        for module, targets in graph.items()
        for target in targets
        for rule in rules
        if _under(module, rule.importer) and _under(target, rule.imported)
    )


def test_the_walk_sees_function_level_imports() -> None:
    graph = import_graph()
    assert "flows.pipeline.qualify" in graph["flows.commands.qualify"]


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_flows_has_no_import_cycle() -> None:
    found = [c for c in cycles(import_graph()) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles in flows/: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_forbidden_import_is_found_with_its_rule() -> None:
    rule = Forbidden("flows.bench", "flows.gates", "why")
    graph = {
        "flows.bench.runner": {"flows.gates.base", "flows.spec.suite"},
        "flows.benchmarks": {"flows.gates.base"},  # a sibling whose name starts alike: allowed
        "flows.gates.base": {"flows.bench.runner"},
    }
    assert layer_violations(graph, (rule,)) == [("flows.bench.runner", "flows.gates.base", rule)]


def test_every_rule_names_rooms_that_exist() -> None:
    modules = set(import_graph())
    for rule in LAYER_RULES:
        for room in (rule.importer, rule.imported):
            assert any(_under(module, room) for module in modules), f"no {room}: {rule}"


def test_flows_imports_follow_the_layers() -> None:
    found = layer_violations(import_graph(), LAYER_RULES)
    broken = [
        f"{module} -> {target} ({rule})"
        for module, target, rule in found
        if (module, target) not in PENDING_LAYER_FIXES
    ]
    assert not broken, "imports against the layers:\n" + "\n".join(broken)


def test_every_pending_layer_fix_is_still_pending() -> None:
    found = {
        (module, target) for module, target, _ in layer_violations(import_graph(), LAYER_RULES)
    }
    fixed = sorted(set(PENDING_LAYER_FIXES) - found)
    assert not fixed, "fixed, remove from PENDING_LAYER_FIXES: " + ", ".join(
        f"{module} -> {target}" for module, target in fixed
    )
