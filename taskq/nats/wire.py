"""How the transport meets nats-py below a single `publish`, and every use of nats-py's
private attributes, in this one file.

Two ways, one switch per connection (`nats_fast_paths`, `TASKQ_NATS_FAST_PATHS`, on by
default): `FastWire` queues a batch of publishes or acks as one protocol buffer, encoded in
one pass here, as nats-py's `publish` queues one: through `Client._send_command`, then
`_flush_pending` when `_flush_queue` holds no flush yet (nats-py has no public call for
ready-encoded frames; it builds, checks and queues each publish on its own: a worker's acks
one by one cost ~15 µs more per task, and a bulk enqueue ~20% of its rate; bench/README.md).
The same `_flush_pending`, forced, lets `taskq doctor`'s probes wait until what is queued is
written (`flush()` writes its PING ahead of it). `Wire` does both on the public API: a
`publish` each, and two `flush()` round trips. It is the fallback for a nats-py whose
internals changed: `wire_for` checks at connect that the three exist, else the connection
runs on the public API and says so. Both ways pass the transport's tests
(tests/test_transport_wire.py runs them on the public one).

One read-only look stays on both ways, with a default when nats-py no longer has it: the
server's INFO, which `taskq doctor` reports (nats-py exposes only its version). Nothing of
nats-py's is replaced or written. Everything else in the transport is nats-py's public API:
a puller's deliveries and a publish pipeline's acks come through subscription callbacks
(reading nats-py's pending queues directly, as earlier versions did, measured no cheaper).
"""

from __future__ import annotations

import logging
from typing import Any

import nats.errors
from nats.aio.client import Client

from taskq.errors import BrokerError

TESTED = "nats-py>=2.16,<2.17"
log = logging.getLogger("taskq")

# one publish of a batch: subject, reply subject ("" for none), body, headers
Outgoing = tuple[str, str, bytes, "dict[str, str] | None"]


class Wire:
    """nats-py's public API for what the transport does below a single publish."""

    fast = False

    async def write_many(self, client: Client, messages: list[Outgoing]) -> None:
        """Queue `messages` for the socket in their order."""
        for subject, reply, body, headers in messages:
            await client.publish(subject, body, reply=reply, headers=headers)

    async def write_pending(self, client: Client) -> None:
        """Return once what was queued before the call has reached the server: a PING is
        written ahead of queued commands, so the first round trip gives the flusher its
        turn and the second one's PONG comes after what it wrote."""
        await client.flush()
        await client.flush()

    def server_info(self, client: Client) -> dict[str, Any]:
        """A copy of the INFO the connected server sent ({} beyond its version when this
        nats-py keeps it elsewhere)."""
        info = getattr(client, "_server_info", None)
        if isinstance(info, dict):
            return dict(info)
        version = client.connected_server_version
        return {"version": str(version)} if version else {}


def header_block(headers: dict[str, str]) -> bytes:
    """A message's NATS header block (`pipeline.check` has vetted every name and value)."""
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
