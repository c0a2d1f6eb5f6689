"""The nats-py private attributes taskq relies on exist on a live connection and
subscription (taskq/nats/internals.py): a nats-py upgrade that changes them fails here."""

from __future__ import annotations

import asyncio

import nats
import pytest

from taskq.errors import BrokerError
from taskq.nats import internals


async def test_privates_exist_on_live_objects(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        internals.check_client(client)
        sub = await client.subscribe("taskq.internals.check")
        internals.check_subscription(sub)
        await client.publish("taskq.internals.check", b"x")
        queue = internals.pending_queue(sub)
        msg = await asyncio.wait_for(queue.get(), 5)
        before = sub._pending_size
        internals.taken(sub, msg)
        assert sub._pending_size == before - 1
        internals.mark_settled(msg)
        assert msg._ackd is True
        assert internals.last_error(client) is None or isinstance(
            internals.last_error(client), BaseException
        )
    finally:
        await client.close()


def test_a_changed_subscription_fails_loudly() -> None:
    class Changed:  # what a nats-py without the pending queue would look like
        _pending_size = 0

    with pytest.raises(BrokerError, match="nats-py"):
        internals.check_subscription(Changed())
