"""Testing your own tasks with taskq.testing: a real worker and a real server, no mocks.

Run with `pytest` in this directory (`pip install 'taskq[testing]'`): the `taskq_server`
fixture comes from taskq's pytest plugin, there is no conftest.py.
"""

from __future__ import annotations

from tasks import app, invoice, price, reserve

from taskq import chain
from taskq.testing import worker


async def test_price(taskq_server):
    async with worker(app) as w:  # `app` now talks to taskq_server, with this test's prefix
        handle = await price.enqueue("apple", 4)
        await w.drain()
    assert w.results[handle.id].result == 2.0


async def test_reserve_is_retried_then_succeeds(taskq_server):
    async with worker(app) as w:
        handle = await reserve.enqueue("apple", 1)
        await w.drain()  # waits out the retry delay too
    record = w.results[handle.id]
    assert (record.state, record.result, record.attempts) == ("succeeded", "1 apple reserved", 2)


async def test_unknown_item_is_dead_lettered(taskq_server):
    async with worker(app) as w:
        handle = await reserve.enqueue("kiwi", 1)
        await w.drain()
    assert w.dead[handle.id].reason == "permanent"
    assert "we do not sell kiwi" in w.dead[handle.id].error.message


async def test_a_workflow_runs_to_its_end(taskq_server):
    async with worker(app) as w:
        handle = await chain(price.s("pear", 4), invoice.s()).enqueue()
        await w.drain()  # every step, across the chain
        assert await handle.result(timeout=1) == "invoice for 3.00"


async def test_each_test_has_its_own_queues(taskq_server, taskq_prefix):
    async with worker(app) as w:
        assert app.settings.prefix == taskq_prefix
        await w.drain()
    assert len(w.results) == 0  # the other tests' tasks are under other prefixes
