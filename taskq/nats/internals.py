"""The fast paths: every use of nats-py's private attributes but the server's INFO, in this
one file, taken only when the connection's `nats_fast_paths` switch is on (the default) and
the installed nats-py has them; the public API does the same more slowly
(`taskq/nats/wire.py`, which also reads `Client._server_info`, with a default).

nats-py (pinned to the tested range in pyproject.toml) has no public API for writing many
ready-encoded publishes at once. `write_many` queues a batch of publishes or acks as one
protocol buffer, encoded in one pass by taskq, as nats-py's `publish` queues one: through
`Client._send_command`, then `_flush_pending` when `_flush_queue` holds no flush yet. nats-py
builds, checks and queues each publish on its own: a worker's acks one by one cost ~17 µs
more per task (bench/profile.py A/B), and 40% of a bulk enqueue was that work. The same
`_flush_pending` (forced) lets `taskq doctor`'s probes wait until what is queued is
written: `flush()` writes its PING ahead of it. Nothing of nats-py's is replaced or
written; `check_client` proves at connect that the three exist, else the connection runs on
the public API and says so (tests/test_nats_internals.py).
"""

from __future__ import annotations

import logging

import nats.errors
from nats.aio.client import Client

from taskq.errors import BrokerError
from taskq.nats.wire import Outgoing, Wire

TESTED = "nats-py>=2.16,<2.17"
log = logging.getLogger("taskq")


def header_block(headers: dict[str, str]) -> bytes:
    """A message's NATS header block (`outbound.check` has vetted every name and value)."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def frame(subject: str, reply: str, body: bytes, headers: dict[str, str] | None) -> bytes:
    """One publish as the protocol has it: PUB, or HPUB with headers; `reply` "" for none."""
    head = subject.encode() + (b" " + reply.encode() if reply else b"")
    if not headers:
        return b"PUB %b %d\r\n%b\r\n" % (head, len(body), body)
    block = header_block(headers)
    return b"HPUB %b %d %d\r\n%b%b\r\n" % (head, len(block), len(block) + len(body), block, body)


class FastWire(Wire):
    """The fast paths (this module's docstring says which and why)."""

    fast = True

    def __init__(self, pending_size: int) -> None:
        self._pending_size = pending_size  # the client's outbound buffer limit while down

    async def write_many(self, client: Client, messages: list[Outgoing]) -> None:
        """Queue the messages as one protocol buffer encoded here, as nats-py's `publish`
        queues one: refused when closed or draining, buffered while reconnecting within its
        pending limit, and flushed by its flusher task."""
        frames = b"".join([frame(*message) for message in messages])
        if client.is_closed:
            raise nats.errors.ConnectionClosedError
        if client.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        if not client.is_connected and (
            self._pending_size <= 0 or len(frames) + client.pending_data_size > self._pending_size
        ):
            raise nats.errors.OutboundBufferLimitError
        client.stats["out_msgs"] += len(messages)
        client.stats["out_bytes"] += len(frames)
        await client._send_command(frames)
        if client._flush_queue is not None and client._flush_queue.empty():
            await client._flush_pending()

    async def write_pending(self, client: Client) -> None:
        """Wait until every command queued in nats-py is written to the socket."""
        await client._flush_pending(force_flush=True)


def wire_for(client: Client, fast: bool, pending_size: int) -> Wire:
    """The fast paths for `client` (connected with `pending_size`) when asked for and this
    nats-py has what they use; else the public API (said once, when they were asked for)."""
    if not fast:
        return Wire()
    try:
        check_client(client)
    except BrokerError as exc:
        log.warning("%s; taskq runs on nats-py's public API instead (slower)", exc)
        return Wire()
    return FastWire(pending_size)


def check_client(client: Client) -> None:
    """Raise BrokerError if this nats-py's Client lacks what the fast paths use."""
    for method in ("_send_command", "_flush_pending"):
        if not callable(getattr(client, method, None)):
            _changed(f"Client.{method}")
    if not hasattr(client, "_flush_queue"):
        _changed("Client._flush_queue")


def _changed(what: str) -> None:
    raise BrokerError(
        f"the installed nats-py has no {what}, which taskq's fast paths use ({TESTED})"
    )
