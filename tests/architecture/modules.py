"""The project's modules as the installed package sees them, and the imports between them.

The repository keeps `workers/` and `dlq/` beside `taskq/`, but they install as
`taskq.workers` and `taskq.dlq` (pyproject's package-dir): module names here are the
installed ones. Every import statement counts, wherever it stands: module level, inside a
function, or under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"taskq": ROOT / "taskq", "taskq.workers": ROOT / "workers", "taskq.dlq": ROOT / "dlq"}


@functools.cache  # read once per test process: imported_names asks for it per file
def modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the three packages."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


@functools.cache  # several layout and budget tests walk every module: parsed once
def tree(path: Path) -> ast.Module:
    """The module's syntax tree (shared: callers only read it)."""
    return ast.parse(path.read_text(), str(path))


def imported_names(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """(fully qualified name, line) for every import in the file; `from a import b` yields
    `a.b` when that is a module of ours, else `a` (b is then a name inside a)."""
    known = modules()
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in known else base), node.lineno


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def graph() -> dict[str, dict[str, int]]:
    """module -> {internal module it imports: line}."""
    known = modules()
    edges: dict[str, dict[str, int]] = {name: {} for name in known}
    for name, path in known.items():
        for target, line in imported_names(path, name):
            resolved = _internal(target, known)
            if resolved is not None and resolved != name:
                edges[name].setdefault(resolved, line)
    return edges


def _internal(target: str, known: dict[str, Path]) -> str | None:
    """The internal module `target` names: itself, or the longest module prefix of it."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = _pop_component(stack, on_stack, node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    component = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == root:
            return component


# the outbox's relay: it publishes and dead-letters, as a worker does (the rest of
# taskq.outbox, what `task.enqueue_in` writes with, is core)
RELAY = ("taskq.outbox.publish", "taskq.outbox.relay")


def layer(module: str) -> int:
    """0 core (taskq), 1 dlq, 2 workers, 3 the command line (wires the three together)
    and the dashboard (a web face of the same commands), and taskq.testing."""
    if _within(module, "taskq.cli") or _within(module, "taskq.dashboard"):
        return 3
    if module in ("taskq.cli.demo_run", "taskq.__main__"):
        return 3
    if _within(module, "taskq.testing"):  # runs a real Worker inside the user's tests
        return 3
    if _within(module, "taskq.workers") or module in RELAY:
        return 2
    if _within(module, "taskq.dlq"):
        return 1
    return 0


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
