"""The transport's tests again on nats-py's public API (`TASKQ_NATS_FAST_PATHS=0`,
taskq/nats/wire.py): publishes one by one and pipelined, bulk and atomic batches, claim
checks, pull deliveries with every settle (ack, NAK with a delay, TERM with a reason), a raw
producer, acks in one write, and `taskq doctor`'s probes (the rest of test_core and
test_doctor is not about the transport's way).
The same test functions run with the fast paths in their own modules; here each app and
each CLI call of the test connects with the switch off (checked by the first test)."""

from __future__ import annotations

import pytest

from taskq import App
from tests.test_bulk_batches import *  # noqa: F403
from tests.test_claim_checks import *  # noqa: F403
from tests.test_core import (  # noqa: F401
    test_async_and_sync_tasks_run,
    test_foreign_producer_raw_nats_py,
    test_retries_are_delayed_by_the_policy_and_not_repeated,
    test_retry_and_reject_raised_by_task_code,
    test_unknown_task_and_bad_bytes_go_to_dlq_worker_stays_up,
)
from tests.test_doctor import (  # noqa: F401
    test_the_shipped_secure_single_node_passes_as_the_operator,
)
from tests.test_publish_many import *  # noqa: F403
from tests.test_record_batches import *  # noqa: F403


@pytest.fixture(autouse=True)
def public_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKQ_NATS_FAST_PATHS", "0")


async def test_the_switch_is_off_here(app: App) -> None:
    from taskq.nats.wire import FastWire

    client = await app.client()
    wire = client.connection._wire
    assert not wire.fast and not isinstance(wire, FastWire)
    assert "_parse_header_lines" not in vars(client.connection._nc)
