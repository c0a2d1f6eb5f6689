"""The nats-py private attributes taskq relies on exist on a live connection and
subscription (taskq/nats/internals.py): a nats-py upgrade that changes them fails here."""

from __future__ import annotations

import asyncio

import nats
import nats.errors
import pytest

from taskq.errors import BrokerError
from taskq.nats import internals
from tests.conftest import finishes


async def test_privates_exist_on_live_objects(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        internals.check_client(client)
        sub = await client.subscribe("taskq.internals.check")
        internals.check_subscription(sub)
        await client.publish("taskq.internals.check", b"x", reply="taskq.internals.reply")
        queue = internals.pending_queue(sub)
        msg = await asyncio.wait_for(queue.get(), 5)
        before = sub._pending_size
        internals.taken(sub, msg)
        assert sub._pending_size == before - 1
        # nats-py itself then takes the message as settled: no second ack goes out
        assert not msg.is_acked
        internals.mark_settled(msg)
        assert msg.is_acked
        with pytest.raises(nats.errors.MsgAlreadyAckdError):
            await msg.ack()
        assert internals.last_error(client) is None  # a clean connection has none
    finally:
        await client.close()


async def test_the_last_connect_error_is_the_one_nats_py_kept() -> None:
    """`last_error` reads what nats-py keeps of a failed connect (its own `last_error`): a
    renamed attribute would read as None here."""
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
    kept = internals.last_error(client)
    assert kept is not None and kept is client.last_error, kept


def test_a_changed_subscription_fails_loudly() -> None:
    class Changed:  # what a nats-py without the pending queue would look like
        _pending_size = 0

    with pytest.raises(BrokerError, match="nats-py"):
        internals.check_subscription(Changed())


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
    from taskq.records.places import Places, Seals
    from taskq.settings import Settings

    msg = Msg(_client=None, subject="t.q.default.add", reply=reply, data=b"{}")  # type: ignore[arg-type]
    seals = Seals(Settings().sealer(), Places("t"))
    delivery = Delivery(msg, None, Guard(), seals)  # type: ignore[arg-type]
    meta = msg.metadata  # nats-py's own reading of the same subject
    assert (meta.stream, meta.num_delivered, meta.sequence.stream, meta.num_pending) == expected
    assert (delivery.stream, delivery.num_delivered, delivery.seq, delivery.pending) == expected


HEADER_BLOCKS = [
    b"Nats-Msg-Id: abc\r\nTaskq-Task: noop\r\n\r\n",
    b"A:1\r\nB:\t2 \r\n",  # no space after the colon, a tab, trailing blanks
    b"Bad Name: x\r\nGood: y\r\n",  # a name with a space inside: skipped
    b"Tab\tName: x\r\nSep\x1cName: y\r\nOk: z\r\n",  # ASCII whitespace str.isspace() knows
    b"  Padded  : v\r\n",  # blanks around a name are stripped
    b"No colon here\r\n: empty name\r\n",
    "Caf\u00e9: x\r\nK: v\u00e9\r\n".encode(),  # a non-ASCII name: skipped; a UTF-8 value
    b"K: \xff\xfe broken\r\n",  # malformed UTF-8 in a value: replaced
    b"Dup: 1\r\nDup: 2\r\n",  # the last wins
    b"",
]


@pytest.mark.parametrize("raw", HEADER_BLOCKS)
def test_header_lines_parse_as_nats_py_parses_them(raw: bytes) -> None:
    from nats.aio.client import Client

    assert internals.parse_header_lines(raw) == Client._parse_header_lines(raw)


async def test_a_connection_parses_headers_with_taskq_s_parser(nats_url: str) -> None:
    from taskq.nats import Connection
    from taskq.settings import Settings

    connection = await Connection.connect(Settings.load(url=nats_url))
    try:
        assert connection._nc._parse_header_lines is internals.parse_header_lines
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
