"""Pipelined JetStream publishes: many in flight on one connection, each answered by its own
PubAck on one reply subscription per connection.

nats-py's `publish_async` does the same, at about twice the cost per message on taskq's hot
paths (a result record per task, bulk enqueue): a `wait_for` around a semaphore, a random
token (an `os.urandom` system call) and a PubAck dataclass per message, and a second future
chained to ours for the deadline. Here a token is a counter, the deadline is one timer per
publish on the same future, and the reply is read into taskq's own PubAck.

`check`: what taskq may send, a subject and headers that the NATS protocol carries as they are.

Every name that comes from a user or a message is made safe before it gets here
(`taskq.ids.safe_id`, `taskq.flowcontrol.keys.token`, validated queue and task names). This
is the last line: a subject with white space or a wildcard, or a header value with a line
break, would make the server close the connection (`maximum control line exceeded`,
`invalid subject`) or let one header smuggle in another, so it is refused here with a typed
error, and the connection stays up.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from pydantic_core import from_json

from taskq.errors import BrokerError, PermissionDenied, TaskqError, TransientError, UnsafeName
from taskq.nats.errors import Guard
from taskq.nats.types import PubAck
from taskq.nats.wire import Outgoing, Wire

STATUS = "Status"
NO_RESPONDERS = "503"  # no stream listens on the subject (or it is being elected)
SWEEP = 0.25  # how often publishes past their ack deadline are failed
BATCH_HEADERS = "nats-batch-"  # an atomic batch's id, sequence and commit (ADR-50)
log = logging.getLogger("taskq.nats")

MAX_SUBJECT = 1024  # well inside the server's 4 KiB control line, with a reply subject
# tokens of printable characters other than `.`, `*` and `>`, joined by single dots; as
# a negated class (no C0/C1 control, space, `*`, `.`, `>`): the same set as the ranges
# `!-)+-\-/-=?-~\u00a0-\U0010ffff`, compiled in 0.4 ms instead of 10 (at every import)
_TOKEN = r"[^\x00-\x20*.>\x7f-\x9f]+"
_SUBJECT = re.compile(rf"{_TOKEN}(?:\.{_TOKEN})*")
_BREAKS = re.compile(r"[\r\n\x00]")
_NAME = re.compile(r"[!-9;-~]+")  # a header name: printable, no space, no colon


MAX_PASSED = 4096


class Passed:
    """Subjects, and apart from them header names, checked already on one connection (a
    bulk enqueue's messages share them): each kept up to MAX_PASSED, then all forgotten."""

    def __init__(self) -> None:
        self.subjects: dict[str, None] = {}
        self.names: dict[str, None] = {}


def check(
    subject: str, headers: dict[str, str] | None = None, passed: Passed | None = None
) -> None:
    """Raise UnsafeName unless `subject` is a valid publish subject and every header name
    and value fits on its header line (what `passed` holds is not checked again)."""
    seen = passed or Passed()
    if subject not in seen.subjects:
        if len(subject) > MAX_SUBJECT or not _SUBJECT.fullmatch(subject):
            raise UnsafeName("subject", subject)
        _remember(seen.subjects, subject)
    if headers:
        for name, value in headers.items():
            if _BREAKS.search(value):
                raise UnsafeName(f"header {name[:40]!r}", value)
            if name not in seen.names:
                if not _NAME.fullmatch(name):
                    raise UnsafeName(f"header {name[:40]!r}", value)
                _remember(seen.names, name)


def _remember(seen: dict[str, None], text: str) -> None:
    if len(seen) >= MAX_PASSED:
        seen.clear()
    seen[text] = None


def unbatched(headers: dict[str, str]) -> dict[str, str]:
    """`headers` without an atomic batch's (the same dict when it has none: the usual)."""
    if not any(name[:11].lower() == BATCH_HEADERS for name in headers):
        return headers
    return {k: v for k, v in headers.items() if k[:11].lower() != BATCH_HEADERS}


class Pipeline:
    """Pipelined publishes on one connection (opened on first use)."""

    def __init__(self, client: Client, guard: Guard, wire: Wire) -> None:
        self._nc = client
        self._guard = guard
        self._wire = wire
        self._passed = Passed()  # what `check` passed on this connection
        self._prefix = ""
        self._opening: asyncio.Future[None] | None = None
        self._sent = 0
        # token -> (the publish's future, its deadline on the loop's clock, its timeout)
        self._waiting: dict[str, tuple[asyncio.Future[PubAck], float, float]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    async def send(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None,
        ack_timeout: float,
        *,
        batched: bool = False,
    ) -> asyncio.Future[PubAck]:
        """Publish now; the future holds the server's PubAck, or a taskq error: the
        server's refusal, or TransientError when no ack came within `ack_timeout`. An
        unsafe subject or header raises UnsafeName at once, before anything is sent.
        Unless `batched` (an atomic batch's commit), atomic batch headers are dropped: a
        stored message keeps its batch's, and one published again with them (a retry, a
        requeued dead letter) would be taken for an uncommitted batch and never stored."""
        if headers and not batched:
            headers = unbatched(headers)
        check(subject, headers, self._passed)
        if not self._prefix:
            await self._open()
        token, future = self._expect(ack_timeout)
        try:
            await self._nc.publish(subject, body, reply=self._prefix + token, headers=headers)
        except BaseException as exc:
            self._waiting.pop(token, None)
            self._guard.reraise(exc)
            raise
        return future

    async def send_many(
        self, messages: list[tuple[str, bytes, dict[str, str] | None]], ack_timeout: float
    ) -> list[asyncio.Future[PubAck]]:
        """`send` for many messages at once, written as one protocol buffer (with the fast
        paths: nats-py builds and queues a publish per message): per message its future, as
        `send` returns it. Everything is checked before anything is sent."""
        plain = [(s, b, unbatched(h) if h else None) for s, b, h in messages]
        for subject, _, headers in plain:
            check(subject, headers, self._passed)
        if not self._prefix:
            await self._open()
        outgoing: list[Outgoing] = []
        futures, tokens = [], []
        for subject, body, headers in plain:
            token, future = self._expect(ack_timeout)
            futures.append(future)
            tokens.append(token)
            outgoing.append((subject, self._prefix + token, body, headers))
        try:
            await self._wire.write_many(self._nc, outgoing)
        except BaseException as exc:
            for token in tokens:
                self._waiting.pop(token, None)
            self._guard.reraise(exc)
            raise
        return futures

    async def send_unanswered(self, messages: list[tuple[str, bytes, dict[str, str]]]) -> None:
        """Publish now, with no reply subject: an atomic batch's messages before its commit
        (the commit's ack, or its error, answers for the whole batch). Each is checked as a
        single publish is, then all are written at once."""
        for subject, _, headers in messages:
            check(subject, headers, self._passed)
        with self._guard:
            await self._wire.write_many(self._nc, [(s, "", b, h) for s, b, h in messages])

    def _expect(self, ack_timeout: float) -> tuple[str, asyncio.Future[PubAck]]:
        """A new reply token and the future its ack will fill, waiting from now on."""
        self._sent += 1
        token = str(self._sent)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PubAck] = loop.create_future()
        # An ack can be lost for good (a stream leader killed between storing and answering):
        # without a deadline the waiter would hang forever. One sweep timer for all of them,
        # not a timer per publish (a heap insert and a cancel per message).
        self._waiting[token] = (future, loop.time() + ack_timeout, ack_timeout)
        if self._sweep is None:
            self._sweep = loop.call_later(SWEEP, self._overdue)
        return token, future

    async def _open(self) -> None:
        """Subscribe to the replies once (concurrent first users wait for the one doing it)."""
        if self._opening is not None:
            await asyncio.shield(self._opening)
            return
        self._opening = asyncio.get_running_loop().create_future()
        try:
            prefix = self._nc.new_inbox() + "."
            with self._guard:
                await self._nc.subscribe(prefix + "*", cb=self._replied)
            self._prefix = prefix
            self._opening.set_result(None)
        except BaseException as exc:
            self._opening.set_exception(exc)
            self._opening.exception()  # retrieved: the caller raises it
            self._opening = None
            raise

    async def close(self) -> None:
        """Stop reading replies (the connection is closing); publishes still waiting for
        their ack fail now rather than wait for an answer that cannot come."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        waiting, self._waiting = self._waiting, {}
        for future, _, _ in waiting.values():
            if not future.done():
                future.set_exception(TransientError("the connection closed before the ack"))

    async def _replied(self, msg: Msg) -> None:
        try:
            self._on_reply(msg)
        except Exception:  # nats-py's subscription task must keep reading the others
            log.exception("a reply could not be handled; its publish will time out")

    def _on_reply(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if waiting is None:
            return  # overdue already
        future = waiting[0]
        if future.done():
            return
        try:
            future.set_result(self._ack(msg))
        except TaskqError as exc:
            future.set_exception(exc)
        except Exception as exc:  # an unreadable reply: the message's fate is unknown
            future.set_exception(BrokerError(f"unreadable publish acknowledgement: {exc}"))

    def _ack(self, msg: Msg) -> PubAck:
        """The PubAck in a reply, or the taskq error for a refusal."""
        try:
            if msg.headers and msg.headers.get(STATUS) == NO_RESPONDERS:
                raise nats.js.errors.NoStreamResponseError
            reply: dict[str, Any] = from_json(msg.data)
            error = reply.get("error")
            if error is not None:
                nats.js.errors.APIError.from_error(error)  # raises the error's class
            return PubAck(reply["stream"], int(reply["seq"]), bool(reply.get("duplicate")))
        except Exception as exc:
            self._guard.reraise(exc)
            raise

    def _overdue(self) -> None:
        """Fail the publishes past their deadline (SWEEP s late at most); re-arm while any
        wait (a scan of those in flight: a few thousand at most, four times a second)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [
            (token, future, after)
            for token, (future, deadline, after) in self._waiting.items()
            if deadline <= now
        ]
        for token, future, after in expired:
            del self._waiting[token]
            if not future.done():
                future.set_exception(self._no_ack(after))
        self._sweep = loop.call_later(SWEEP, self._overdue) if self._waiting else None

    def _no_ack(self, after: float) -> TaskqError:
        # a publish the server refused for permissions is never answered: say so
        refused = self._guard.recent_violation()
        if refused:
            return PermissionDenied(f"NATS refused it: {refused}", None, 403)
        return TransientError(f"no acknowledgement from the server in {after:g}s")
