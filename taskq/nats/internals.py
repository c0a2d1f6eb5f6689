"""Every use of nats-py's private attributes, in this one file.

nats-py (pinned to the tested range in pyproject.toml) has no public API for these:
- `Subscription._pending_queue` / `_pending_size`: the pull loop reads a subscription's own
  queue, as nats-py's `fetch` does, instead of a callback (a task hop per message) or
  `next_msg` (a `wait_for` task per message); it must keep the slow-consumer count right.
- `Subscription._pending_queue` replaced (`deliver_directly`): the publish pipeline's
  replies are handed to it inside nats-py's read loop, as nats-py hands a request's reply
  to its future, instead of waking a task that reads the queue (a loop turn per publish).
- `Msg._ackd`: a TERM with a reason is sent as a raw publish (nats-py's `term()` sends none),
  so the message is marked settled by hand.
- `Client._err`: why the last connect attempt failed, when the connect call only says "no
  servers available".
- `Client._flush_pending`: `flush()` writes its PING straight to the socket, ahead of the
  publishes and subscriptions still queued for the flusher, so its PONG does not prove the
  server read them; `taskq doctor`'s probes first wait for the queue to be written.
- `Client._server_info`: the INFO the connected server sent (version, cluster, TLS, auth),
  which `taskq doctor` reports; nats-py exposes only the version of it.
- `Client._parse_header_lines`: replaced, per client, by `parse_header_lines` (the same
  result, without a generator step per character of every header name: 8% of a drain's
  time went to nats-py's check that a name holds no whitespace).
- `Client._send_command` / `_flush_queue`: an atomic batch's messages before its commit are
  queued as one protocol buffer (`write_many`), encoded in one pass by taskq, instead of
  nats-py's header regex, translate and buffer work per message (40% of a bulk enqueue).

`check_client` and `check_subscription` verify them on live objects, so a nats-py upgrade that
changes any of them fails loudly at connect (and in tests/test_nats_internals.py) instead
of misbehaving quietly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from taskq.errors import BrokerError

TESTED = "nats-py>=2.16,<2.17"
log = logging.getLogger("taskq")


_CRLF = b"\r\n"
# what str.isspace() is true for among ASCII characters (header names are ASCII)
_SPACE = re.compile(rb"[\t\n\x0b\x0c\r\x1c-\x1f ]")


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """nats-py's `Client._parse_header_lines`, line for line, with its per-character check
    of a name for whitespace done by one regex search over the name's bytes."""
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip()
        if not name.isascii() or _SPACE.search(name):
            continue  # a name that is no token: skipped, as nats-py skips it
        out[name.decode("ascii")] = value.strip().decode("utf-8", "replace")
    return out


def speed_up_headers(client: Client) -> None:
    """Parse the headers of what `client` receives with `parse_header_lines`."""
    client._parse_header_lines = parse_header_lines  # type: ignore[method-assign]


def pending_queue(sub: Any) -> asyncio.Queue[Msg]:
    """The queue nats-py fills with a subscription's messages."""
    queue: asyncio.Queue[Msg] = sub._pending_queue
    return queue


class _Direct:
    """Stands in for a subscription's pending queue: each message nats-py's read loop
    would queue goes to `take` at once. `take` must not raise (it runs inside the read
    loop): errors are logged and the message dropped."""

    def __init__(self, sub: Any, take: Callable[[Msg], None]) -> None:
        self._sub = sub
        self._take = take

    def put_nowait(self, msg: Msg) -> None:
        self._sub._pending_size -= len(msg.data)  # counted as pending by nats-py: it is not
        try:
            self._take(msg)
        except Exception:
            log.exception("a reply could not be handled; its publish will time out")

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def task_done(self) -> None:
        return None

    async def join(self) -> None:
        return None


def deliver_directly(sub: Any, take: Callable[[Msg], None]) -> None:
    """Hand each message of `sub` to `take` as nats-py reads it (see `_Direct`)."""
    sub._pending_queue = _Direct(sub, take)


def taken(sub: Any, msg: Msg) -> Msg:
    """Account for a message read straight from `pending_queue` (slow-consumer limits)."""
    sub._pending_size -= len(msg.data)
    return msg


def mark_settled(msg: Msg) -> None:
    """Record that `msg` was acknowledged by a raw publish on its reply subject."""
    msg._ackd = True


def last_error(client: Client) -> BaseException | None:
    """The error of the client's last connect attempt, if it kept one."""
    error = getattr(client, "_err", None)
    return error if isinstance(error, BaseException) else None


def server_info(client: Client) -> dict[str, Any]:
    """A copy of the INFO the connected server sent."""
    info = getattr(client, "_server_info", None)
    return dict(info) if isinstance(info, dict) else {}


async def write_pending(client: Client) -> None:
    """Wait until every command queued in nats-py is written to the socket."""
    await client._flush_pending(force_flush=True)


async def write_many(client: Client, frames: bytes, messages: int) -> None:
    """Queue ready protocol frames (`messages` HPUBs, encoded by the caller) for the
    socket, as nats-py's `publish` queues one: refused when closed or draining, buffered
    while reconnecting within its pending limit, and flushed by its flusher task."""
    if client.is_closed:
        raise nats.errors.ConnectionClosedError
    if client.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    if not client.is_connected and (
        client._max_pending_size <= 0
        or len(frames) + client._pending_data_size > client._max_pending_size
    ):
        raise nats.errors.OutboundBufferLimitError
    client.stats["out_msgs"] += messages
    client.stats["out_bytes"] += len(frames)
    await client._send_command(frames)
    if client._flush_queue is not None and client._flush_queue.empty():
        await client._flush_pending()


def check_client(client: Client) -> None:
    """Raise BrokerError if this nats-py's Client or Msg lack what taskq relies on."""
    if not hasattr(client, "_err"):
        _changed("Client._err")
    if not isinstance(getattr(client, "_server_info", None), dict):
        _changed("Client._server_info")
    if not callable(getattr(client, "_flush_pending", None)):
        _changed("Client._flush_pending")
    if not callable(getattr(client, "_send_command", None)):
        _changed("Client._send_command")
    if not callable(getattr(client, "_parse_header_lines", None)):
        _changed("Client._parse_header_lines")
    for name in ("_flush_queue", "_max_pending_size", "_pending_data_size"):
        if not hasattr(client, name):
            _changed(f"Client.{name}")
    if "_ackd" not in {f.name for f in dataclasses.fields(Msg)}:
        _changed("Msg._ackd")


def check_subscription(sub: Any) -> None:
    """Raise BrokerError if a Subscription lacks its pending queue or size counter."""
    if not isinstance(getattr(sub, "_pending_queue", None), asyncio.Queue):
        _changed("Subscription._pending_queue")
    if not isinstance(getattr(sub, "_pending_size", None), int):
        _changed("Subscription._pending_size")


def _changed(what: str) -> None:
    raise BrokerError(
        f"the installed nats-py no longer has {what}, which taskq relies on: install {TESTED}"
    )
