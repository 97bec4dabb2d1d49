"""The import graph of the project's packages, read from the source with `ast` (nothing is
imported, so it takes a fraction of a second and sees imports that a run never reaches).

An edge A -> B for every `import B` / `from B import x` in A whose target is one of our
modules (`from P import m` with m a module of package P is an edge to P.m). Two views:
- every import, at module level and inside functions: what a command can end up executing;
  a function-level import defers a cycle, it does not remove it;
- `if TYPE_CHECKING:` blocks are left out of cycles (they never run), but kept for layering
  rules, which are about what a module depends on, checked or run.
A package's own __init__ is not added as an edge of `import P.m`: ours hold docstrings only
(tests check the graph, not Python's import machinery).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("contract", "runner", "workloads", "infra")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (one of ours)
    line: int
    typing_only: bool  # inside `if TYPE_CHECKING:`


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(known: dict[str, Path]) -> list[Import]:
    """Every import of one of `known` by another."""
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node, typing_only in _walk(tree, False):
            for target in _targets(node, package, known):
                if target != name:
                    found.append(Import(name, target, node.lineno, typing_only))
    return found


Statement = ast.Import | ast.ImportFrom


def _walk(node: ast.AST, typing_only: bool) -> Iterator[tuple[Statement, bool]]:
    for child in ast.iter_child_nodes(node):
        yield from _visit(child, typing_only)


def _visit(node: ast.AST, typing_only: bool) -> Iterator[tuple[Statement, bool]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, typing_only
    elif isinstance(node, ast.If) and _is_type_checking(node.test):
        for part in node.body:
            yield from _visit(part, True)
        for part in node.orelse:
            yield from _visit(part, typing_only)
    else:
        yield from _walk(node, typing_only)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: Statement, package: str, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {_nearest(alias.name, known) for alias in node.names} - {""}
    base = node.module or ""
    if node.level:  # relative: from the importing module's package, up level - 1
        parents = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*parents, *([base] if base else [])])
    targets = set()
    for alias in node.names:
        full = f"{base}.{alias.name}"
        targets.add(full if full in known else _nearest(base, known))
    return targets - {""}


def _nearest(name: str, known: dict[str, Path]) -> str:
    """The module `name` is, or the nearest of our modules above it ("" if none)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def cycles(edges: Iterable[Import]) -> list[list[str]]:
    """The import cycles (strongly connected components of two or more modules), each sorted;
    `if TYPE_CHECKING:` imports left out. Tarjan's algorithm, iteratively."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.typing_only:
            graph.setdefault(edge.source, set()).add(edge.target)
            graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def under(name: str, prefix: str) -> bool:
    """Whether module `name` is `prefix` or inside it."""
    return name == prefix or name.startswith(prefix + ".")
