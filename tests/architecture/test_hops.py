"""The path of one task stays small and its map stays true (issue 40): the modules whose
code one plain enqueue and one plain delivery run, measured with `bench.hops` on a real
server, are exactly the lists docs/architecture.md's "The path of one task" names, and no
more than the budgets below. A feature that adds a module to a plain task's path fails here
first: it belongs behind the option that needs it."""

from __future__ import annotations

import ast

from bench.hops import measure
from tests.architecture.modules import PACKAGES, _internal, modules, tree
from tests.architecture.test_map import CODE, COUNTED, DOC

# modules a plain task's code passes through; issue 40's target for a delivery is 20
ENQUEUE_BUDGET = 17
DELIVERY_BUDGET = 23
WORKER_IMPORTS = 12  # internal modules the worker's core imports to run (issue 40's target)


def documented() -> tuple[list[str], list[str]]:
    """The enqueue's and the delivery's module lists, as the document names them."""
    enqueue, delivery = [
        [p for p in CODE.findall(listed) if "/" in p]
        for _, listed in COUNTED.findall(DOC.read_text())
    ][:2]
    return enqueue, delivery


async def test_a_plain_task_runs_the_modules_the_map_names(nats_url: str) -> None:
    named_enqueue, named_delivery = documented()
    # a loaded machine can only add modules (a periodic job, say the lease ticker, waking
    # while the delivery is traced), never take the path's own away: up to three tries
    for _ in range(3):
        enqueue, delivery = await measure(nats_url)
        if (sorted(enqueue), sorted(delivery)) == (sorted(named_enqueue), sorted(named_delivery)):
            break
    assert len(enqueue) <= ENQUEUE_BUDGET, str(enqueue)
    assert len(delivery) <= DELIVERY_BUDGET, delivery
    assert sorted(enqueue) == sorted(named_enqueue), "docs/architecture.md: the enqueue's list"
    assert sorted(delivery) == sorted(named_delivery), "docs/architecture.md: the delivery's list"


def test_the_check_can_fail() -> None:
    enqueue, delivery = documented()
    assert len(enqueue) == 17 and "workers/judge.py" in delivery
    assert sorted([*delivery, "taskq/cron.py"]) != sorted(delivery)


def runtime_imports(module: str) -> set[str]:
    """The internal modules `module` imports to run: every import but those under `if
    TYPE_CHECKING:` (names for annotations only)."""
    known = modules()
    parsed = tree(known[module])
    typing_only = {
        id(node)
        for block in ast.walk(parsed)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    found: set[str] = set()
    for node in ast.walk(parsed):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        for alias in node.names:
            target = _internal(f"{node.module}.{alias.name}", known)
            if target is not None:
                found.add(target)
    return found


def test_the_worker_core_imports_few_modules() -> None:
    imported = runtime_imports("taskq.workers.worker")
    assert len(imported) <= WORKER_IMPORTS, sorted(imported)
    assert "taskq.workers.assembly" in imported and "taskq.workers.spark.session" not in imported
    assert PACKAGES["taskq.workers"].joinpath("worker.py").exists()
