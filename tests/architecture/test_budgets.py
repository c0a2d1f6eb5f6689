"""Code budgets, enforced: ruff (with max-complexity 10) and `ruff format` clean, `mypy
--strict` clean on the packages, no module over 400 lines, no function over 40 lines."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.architecture.modules import ROOT, modules, tree
from tests.architecture.typecheck import mypy

BIN = Path(sys.executable).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
FORMATTED = ["taskq", "workers", "dlq", "tests", "bench", "examples"]


def _run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_modules_are_short() -> None:
    long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines"


def test_functions_are_short() -> None:
    long = []
    for name, path in modules().items():
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} ({lines} lines, line {node.lineno})")
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines"


def test_ruff_lint_with_complexity_budget() -> None:
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
    # the complexity rule is on, so the check above can fail on a tangled function
    config = _run(str(BIN / "ruff"), "check", "--show-settings", "taskq/app.py").stdout
    assert "max_complexity = 10" in config


def test_ruff_format() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", *FORMATTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict(tmp_path: Path) -> None:
    """mypy on the packages under their installed names (tests/architecture/typecheck.py:
    a staged copy, the clone's cache, warmed before the test processes start)."""
    result = mypy(tmp_path)
    assert (tmp_path / "taskq" / "workers" / "worker.py").exists()
    report = result.stdout.replace("taskq/workers/", "workers/").replace("taskq/dlq/", "dlq/")
    assert result.returncode == 0, report + result.stderr


def dataclass_fields(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(class, field, line) for every annotated field of the module's dataclasses."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            "dataclass" in ast.unparse(d) for d in node.decorator_list
        ):
            found += [
                (node.name, s.target.id, s.lineno)
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return found


def test_no_dataclass_field_is_dead() -> None:
    """Every field of the packages' dataclasses is read or passed by name somewhere in
    them (issue 40: dead fields gone): a field nothing reads is state to keep for nothing."""
    sources = {name: path.read_text() for name, path in modules().items()}
    # every name read as an attribute, passed as a keyword or quoted, found in one pass
    used = set(re.findall(r"\.(\w+)|\b(\w+)=|[\"'](\w+)[\"']", "\n".join(sources.values())))
    named = {name for found in used for name in found if name}
    dead = [
        f"{name}:{line} {cls}.{field}"
        for name, path in modules().items()
        for cls, field, line in dataclass_fields(tree(path))
        if field not in named
    ]
    assert dead == [], dead
    assert dataclass_fields(ast.parse("@dataclass\nclass A:\n    x: int\n")) == [("A", "x", 3)]
