"""The map is checked: docs/architecture.md's "Package map" names every module of the three
packages on a line of its own (`- `<repository path>` — what it holds`), names no file that is
not there, and every path or link anywhere in the document points to something that exists.

A package's `__init__.py` that holds nothing but re-exports (imports, `__all__`,
`__version__`, a docstring) may be left to its heading; one with code of its own must have
its line like any module.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tests.architecture.modules import ROOT, modules

DOC = ROOT / "docs" / "architecture.md"
MAP = "## Package map"
ENTRY = re.compile(r"^- `([^`]+)` — \S")
TOP = ("taskq", "workers", "dlq", "docs", "tests", "deploy", "bench", "examples")
# a repository path: starts with a top-level folder (not inside a longer word, URL or name)
PATH = re.compile(r"(?<![\w./<>-])((?:" + "|".join(TOP) + r")/[\w./-]*)")
# a file named without its folder must be at the repository's root (`__init__.py` names a
# kind of file, not one)
BARE = re.compile(r"(?<![\w./<>-])(?!__)([\w-]+\.(?:py|md|toml|conf|yaml|yml|json))\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
URL = re.compile(r"[a-z]+://\S+")
COUNTED = re.compile(r"\*\*(\d+) modules\*\*:(.*?)(?:\n\s*\n|\Z)", re.S)
CODE = re.compile(r"`([^`]+)`")
DECLARATIONS = {"__all__", "__version__"}


def repository_path(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def only_reexports(path: Path) -> bool:
    """True for an `__init__.py` whose body is a docstring, imports and `__all__` /
    `__version__`: nothing a reader needs a line for."""
    if path.name != "__init__.py":
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        targets = node.targets if isinstance(node, ast.Assign) else []
        if targets and all(isinstance(t, ast.Name) and t.id in DECLARATIONS for t in targets):
            continue
        return False
    return True


def package_paths() -> dict[str, bool]:
    """Repository path of every module -> whether the map must name it."""
    return {repository_path(p): not only_reexports(p) for p in modules().values()}


def map_section(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the "Package map" section, up to the next `## ` heading."""
    lines = text.splitlines()
    assert MAP in lines, f"docs/architecture.md has no {MAP!r} heading"
    start = lines.index(MAP)
    found = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        found.append((number, line))
    return found


def mapped(text: str) -> list[tuple[int, str]]:
    """(line number, path) of every entry of the map."""
    return [
        (number, match.group(1))
        for number, line in map_section(text)
        if (match := ENTRY.match(line))
    ]


def missing(text: str) -> list[str]:
    """Modules the map must name and does not."""
    named = {path for _, path in mapped(text)}
    return sorted(p for p, required in package_paths().items() if required and p not in named)


def stale(text: str) -> list[str]:
    """Entries naming no module of the packages (a file gone, renamed, or not a module),
    and modules named on more than one line."""
    known = package_paths()
    wrong = [
        f"line {number}: {path}" + ("" if (ROOT / path).exists() else " (no such file)")
        for number, path in mapped(text)
        if path not in known
    ]
    counts = Counter(path for _, path in mapped(text))
    return wrong + [f"{path} ({n} lines)" for path, n in sorted(counts.items()) if n > 1]


def dangling(text: str) -> list[str]:
    """Paths and links anywhere in the document that point to nothing: a repository path
    (from the root), a bare file name (at the root), or a link (from docs/)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for link in LINK.findall(line):
            target = link.split("#", 1)[0]
            if target and not URL.match(link) and not (DOC.parent / target).exists():
                found.append(f"line {number}: link {link}")
        plain = URL.sub(" ", LINK.sub("](", line))
        for name in [*PATH.findall(plain), *BARE.findall(plain)]:
            name = name.rstrip(".,;:")
            if not (ROOT / name).exists():
                found.append(f"line {number}: {name}")
    return found


def miscounted(text: str) -> list[str]:
    """Every "**N modules**: `a`, `b`, ..." list holds N distinct modules of the packages."""
    known = package_paths()
    wrong = []
    for number, listed in COUNTED.findall(text):
        paths = [p for p in CODE.findall(listed) if "/" in p]
        if len(set(paths)) != int(number) or len(paths) != len(set(paths)):
            wrong.append(f"**{number} modules** lists {len(set(paths))} ({len(paths)} named)")
        wrong += [f"{p} is not a module" for p in paths if p not in known]
    return wrong


def test_every_module_is_on_the_map() -> None:
    absent = missing(DOC.read_text())
    assert absent == [], "modules docs/architecture.md's Package map does not name: " + ", ".join(
        absent
    )


def test_the_map_names_no_stale_path() -> None:
    found = stale(DOC.read_text())
    assert found == [], "Package map entries naming no module (or twice): " + "; ".join(found)


def test_every_path_in_the_document_exists() -> None:
    found = dangling(DOC.read_text())
    assert found == [], "docs/architecture.md points to nothing at: " + "; ".join(found)


def test_stated_module_counts_match_their_lists() -> None:
    text = DOC.read_text()
    assert len(COUNTED.findall(text)) >= 2  # the producer's path and the delivery's
    found = miscounted(text)
    assert found == [], "; ".join(found)


def test_the_checks_can_fail() -> None:
    text = DOC.read_text()
    # a module left out of the map is reported
    entry = "- `workers/writes.py` — "
    assert entry in text
    cut = "\n".join(line for line in text.splitlines() if not line.startswith(entry))
    assert missing(cut) == ["workers/writes.py"]
    # a line naming a file that is gone, and a module named twice, are stale
    extra = text.replace(entry, "- `workers/gone.py` — x\n- `workers/worker.py` — y\n" + entry)
    reported = stale(extra)
    assert any(s.endswith(": workers/gone.py (no such file)") for s in reported)
    assert "workers/worker.py (2 lines)" in reported
    # paths and links to nothing, anywhere in the document
    prose = text + "\nSee `taskq/nats/gone.py`, [x](nowhere.md) and lost.toml.\n"
    assert [d.split(": ", 1)[1] for d in dangling(prose)] == [
        "link nowhere.md",
        "taskq/nats/gone.py",
        "lost.toml",
    ]
    # a count that does not match its list
    assert miscounted("**3 modules**: `taskq/app.py`, `taskq/task.py`.") != []
    # an __init__ with code of its own must be mapped; one that only re-exports need not
    required = package_paths()
    assert required["taskq/doctor/__init__.py"] and not required["workers/__init__.py"]
