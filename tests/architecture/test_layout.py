"""The architecture holds: no import cycles, dependencies point one way (cli → workers →
dlq → taskq core), only `taskq.nats` imports nats-py, and only one file of it touches
nats-py's private attributes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.architecture.modules import ROOT, cycles, graph, imported_names, layer, modules, tree

LAYERS = ("taskq core", "taskq.dlq", "taskq.workers", "taskq.cli / taskq.dashboard")


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert found == [], "import cycles (every import counts, even in functions): " + "; ".join(
        " -> ".join(c) for c in found
    )


def test_dependencies_point_one_way() -> None:
    wrong = [
        f"{source} ({LAYERS[layer(source)]}) imports {target} ({LAYERS[layer(target)]}) "
        f"at line {line}"
        for source, targets in graph().items()
        for target, line in targets.items()
        if layer(target) > layer(source)
    ]
    assert wrong == []


def test_the_checks_see_a_cycle_and_an_upward_import() -> None:
    # Given a small graph with a cycle, the detector finds it (so the test above can fail)
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {}}) == [["a", "b", "c"]]
    # and the real graph has the edges the layering rule is about
    edges = graph()
    assert "taskq.dlq.record" in edges["taskq.workers.writes"]
    assert layer("taskq.workers.worker") > layer("taskq.dlq.sweeper") > layer("taskq.client")


def test_only_taskq_nats_imports_nats() -> None:
    offenders = [
        f"{name}:{line} imports {target}"
        for name, path in modules().items()
        if not name.startswith("taskq.nats")
        for target, line in imported_names(path, name)
        if target == "nats" or target.startswith("nats.")
    ]
    assert offenders == []


def test_the_transport_knows_no_record_kinds() -> None:
    """taskq.nats moves bytes (issue 40): what a body is (sealed for which place, a claim
    check's reference) is the codec's above it, taskq.records.codec, which the transport
    reaches only through its `BodyCodec` port. No module of it imports taskq's records,
    workflows, flow control or workers."""
    above = ("taskq.records", "taskq.workflows", "taskq.flowcontrol", "taskq.workers")
    edges = graph()
    offenders = [
        f"{source} imports {target} at line {line}"
        for source, targets in edges.items()
        if source.startswith("taskq.nats")
        for target, line in targets.items()
        if target.startswith(above)
    ]
    assert offenders == []
    assert "taskq.nats.objects" in edges["taskq.records.codec"]  # the codec is above it


def test_nats_py_privates_are_touched_in_one_file() -> None:
    """Outside taskq/nats/wire.py no code inside taskq.nats reads another object's
    `_private` attribute, directly or by name through getattr/hasattr/setattr (its own
    `self._x` fields are fine)."""
    offenders = []
    for path in sorted((ROOT / "taskq" / "nats").glob("*.py")):
        if path.name == "wire.py":
            continue
        offenders += [f"{path.name}:{line} {what}" for line, what in _private_uses(path)]
    assert offenders == []


def test_at_most_four_nats_py_privates_none_written() -> None:
    """wire.py uses at most four of nats-py's private attributes and writes none (no
    assignment to one, no setattr): what a nats-py upgrade can break is small and read."""
    wire = ROOT / "taskq" / "nats" / "wire.py"
    uses = {what for _, what in _private_uses(wire)}
    names = {what.split()[-1].lstrip(".") for what in uses}
    assert names == {"_send_command", "_flush_pending", "_flush_queue", "_server_info"}, names
    written = [
        node.lineno
        for node in ast.walk(ast.parse(wire.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr.startswith("_")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert written == [] and not any(what.startswith("setattr") for what in uses)


def _private_uses(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree(path)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append((node.lineno, f".{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ):
            found.append((node.lineno, f"{node.func.id} {node.args[1].value}"))
    return found


def test_one_import_name_is_installed() -> None:
    """pyproject maps workers/ and dlq/ into taskq: the wheel adds only `taskq`."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in config["packages"]} == {"taskq"}
    assert config["package-dir"] == {
        "taskq": "taskq",
        "taskq.workers": "workers",
        "taskq.dlq": "dlq",
    }
    import taskq.dlq.record
    import taskq.workers.worker

    assert taskq.workers.worker.__file__ == str(ROOT / "workers" / "worker.py")
    assert taskq.dlq.record.__file__ == str(ROOT / "dlq" / "record.py")


def test_every_package_ships() -> None:
    """pyproject lists the packages the wheel carries: a new package missing there installs
    from a clone (editable) but not from the wheel (as taskq.doctor once did)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert packages - listed == set(), "packages pyproject.toml does not ship"


def test_no_code_cites_a_document_outside_the_repository() -> None:
    """Comments and docstrings cite docs/ (in the repository), never the design card the
    project grew from nor issue numbers a reader of the code cannot open."""
    cited = re.compile(r"DESIGN §|\bissues? \d+\b|\bDESIGN\.md\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted({*modules().values(), *(ROOT / "bench").rglob("*.py")})
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if cited.search(line)
    ]
    assert offenders == []
