"""The fast paths' nats-py private attributes exist on a live connection and do their work
(taskq/nats/wire.py), a nats-py without them gets the public API instead, and the
switch picks the way: a nats-py upgrade that changes them fails here."""

from __future__ import annotations

import asyncio

import nats
import nats.errors
import pytest

from taskq.nats.connect import PENDING_SIZE
from taskq.nats.wire import FastWire, Wire, wire_for
from tests.conftest import finishes


async def test_privates_exist_on_live_objects(nats_url: str) -> None:
    """The fast paths' three attributes exist and do what `write_many` needs: the frames it
    queues reach the server in order, as nats-py's own publishes would."""
    client = await nats.connect(nats_url)
    try:
        wire = wire_for(client, fast=True, pending_size=PENDING_SIZE)
        assert isinstance(wire, FastWire)
        sub = await client.subscribe("taskq.internals.>")
        sent = [(f"taskq.internals.{n}", "", str(n).encode(), {"N": str(n)}) for n in range(3)]
        await wire.write_many(client, sent)
        await wire.write_pending(client)
        got = [await sub.next_msg(timeout=5) for _ in sent]
        assert [(m.subject, m.data, m.headers) for m in got] == [(s, b, h) for s, _, b, h in sent]
        assert client.last_error is None  # a clean connection has none
    finally:
        await client.close()


def test_a_nats_py_without_the_privates_gets_the_public_api(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A nats-py whose internals changed is not refused: the transport uses its public
    API and says so once, at connect."""
    from types import SimpleNamespace

    changed = SimpleNamespace(_send_command=lambda frames: None)  # the rest renamed
    wire = wire_for(changed, fast=True, pending_size=PENDING_SIZE)  # type: ignore[arg-type]
    assert type(wire) is Wire and "public API" in caplog.text
    assert "_flush_pending" in caplog.text  # which one is missing


async def test_the_last_connect_error_is_the_one_nats_py_kept() -> None:
    """nats-py keeps the error of a failed connect in its public `last_error`, which the
    ConnectError's reason falls back on (taskq/nats/connect.py)."""
    from nats.aio.client import Client

    from taskq.ports import lease_port, release_port

    port = lease_port()  # nobody listens on a leased port
    client = Client()
    try:
        with pytest.raises((nats.errors.Error, OSError)):
            connecting = client.connect(
                servers=[f"nats://127.0.0.1:{port}"],
                max_reconnect_attempts=1,  # (0 is "no limit" to nats-py's server pool)
                reconnect_time_wait=0.1,
                connect_timeout=2,
            )
            await finishes(connecting, "a connect to no server")
    finally:
        release_port(port)
    kept = client.last_error
    assert isinstance(kept, (nats.errors.Error, OSError)), kept


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            "$JS.ACK.T_Q_DEFAULT.default.3.1042.977.1732480000000000000.12",
            ("T_Q_DEFAULT", 3, 1042, 12),
        ),
        (
            "$JS.ACK.hub.ACCHASH.T_Q_DEFAULT.default.2.77.70.1732480000000000000.0.xyz",
            ("T_Q_DEFAULT", 2, 77, 0),
        ),
    ],
)
def test_a_delivery_reads_its_ack_subject_as_nats_py_does(
    reply: str, expected: tuple[str, int, int, int]
) -> None:
    from nats.aio.msg import Msg

    from taskq.nats import Delivery
    from taskq.nats.errors import Guard
    from taskq.records.codec import Codec
    from taskq.settings import Settings

    msg = Msg(_client=None, subject="t.q.default.add", reply=reply, data=b"{}")  # type: ignore[arg-type]
    codec = Codec(Settings(), None)  # type: ignore[arg-type]  # no object store: none read
    delivery = Delivery(msg, None, Guard(), codec)  # type: ignore[arg-type]
    meta = msg.metadata  # nats-py's own reading of the same subject
    assert (meta.stream, meta.num_delivered, meta.sequence.stream, meta.num_pending) == expected
    assert (delivery.stream, delivery.num_delivered, delivery.seq, delivery.pending) == expected


async def test_the_switch_picks_the_wire_and_nothing_of_nats_py_is_replaced(
    nats_url: str,
) -> None:
    from taskq.records.codec import connect
    from taskq.settings import Settings

    for fast in (True, False):
        settings = Settings.load(url=nats_url, nats_fast_paths=fast)
        connection, _ = await connect(settings)
        try:
            assert connection._wire.fast is fast
            assert not vars(connection._nc).keys() & {"_parse_header_lines"}
        finally:
            await connection.close()


async def test_a_first_connect_that_swallows_a_cancellation_is_cancelled_again() -> None:
    """nats-py's first connect past its budget ends even when it swallows one cancellation
    (Python 3.11's `asyncio.wait_for` can, when its inner result meets the cancellation):
    a single `asyncio.timeout` left `doctor` waiting past 90 s."""
    from taskq.nats.connect import _within

    swallowed: list[bool] = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(True)  # as a racing wait_for does: carry on
        await asyncio.sleep(3600)

    connecting = asyncio.ensure_future(stubborn())
    with pytest.raises(TimeoutError, match=r"no connection within 0\.1s"):
        await finishes(_within(connecting, 0.1), "the bounded connect")
    assert swallowed == [True] and connecting.cancelled()  # ended, not left retrying
