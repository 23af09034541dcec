"""The package's modules import each other without a circle.

Every import of a `replicate` module counts, a function-level one too and one under
``TYPE_CHECKING``, so a circle cannot hide behind a lazier import; the lazy experiment
registry (`importlib`) is the one edge this cannot see, and it points from the registry
down to the papers' packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO

PACKAGE = REPO / "replicate"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (``from replicate import x`` names module x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found |= (subs & modules) or ({node.module} & modules)
    return found - {_module(path)}


def import_graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {name: _imports(path, modules) for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as a path of module names (empty: none)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_package_has_no_import_circle() -> None:
    assert _cycle(import_graph()) == []


def test_the_circle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


COMMANDS = {
    f"replicate.{name}" for name in ("controls", "dvcfile", "expect", "plan", "record", "stability")
}
"""The modules behind `python -m replicate` commands (and `python -m replicate.dvcfile`):
each imports the shared core (the claims and the report, `replicate.checkout`,
`replicate.suite`, ...), never another command, so a change to one command reaches no
other."""


def test_no_command_imports_another() -> None:
    graph = import_graph()
    assert set(graph) >= COMMANDS
    assert {name: graph[name] & COMMANDS for name in COMMANDS} == {name: set() for name in COMMANDS}
