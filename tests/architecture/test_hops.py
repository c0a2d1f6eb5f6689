"""The path of one task stays small and its map stays true (issue 40): the modules whose
code one plain enqueue and one plain delivery run, measured with `bench.hops` on a real
server, are exactly the lists docs/architecture.md's "The path of one task" names, and no
more than the budgets below. A feature that adds a module to a plain task's path fails here
first: it belongs behind the option that needs it."""

from __future__ import annotations

from bench.hops import measure
from tests.architecture.test_map import CODE, COUNTED, DOC

# modules a plain task's code passes through; issue 40's target for a delivery is 20
ENQUEUE_BUDGET = 18
DELIVERY_BUDGET = 25


def documented() -> tuple[list[str], list[str]]:
    """The enqueue's and the delivery's module lists, as the document names them."""
    enqueue, delivery = [
        [p for p in CODE.findall(listed) if "/" in p]
        for _, listed in COUNTED.findall(DOC.read_text())
    ][:2]
    return enqueue, delivery


async def test_a_plain_task_runs_the_modules_the_map_names(nats_url: str) -> None:
    enqueue, delivery = await measure(nats_url)
    assert len(enqueue) <= ENQUEUE_BUDGET, str(enqueue)
    assert len(delivery) <= DELIVERY_BUDGET, delivery
    named_enqueue, named_delivery = documented()
    assert sorted(enqueue) == sorted(named_enqueue), "docs/architecture.md: the enqueue's list"
    assert sorted(delivery) == sorted(named_delivery), "docs/architecture.md: the delivery's list"


def test_the_check_can_fail() -> None:
    enqueue, delivery = documented()
    assert len(enqueue) == 18 and "workers/judge.py" in delivery
    assert sorted([*delivery, "taskq/cron.py"]) != sorted(delivery)
