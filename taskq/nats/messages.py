"""Stored messages read, deleted and purged by sequence or subject, without consuming them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from taskq.errors import BrokerError, NotFound, TaskqError, TransientError
from taskq.nats.codec import BodyCodec
from taskq.nats.errors import (
    MESSAGE_NOT_FOUND,
    MSG_DELETE_FAILED,
    SEQUENCE_NOT_FOUND,
    Guard,
    reply_error,
)
from taskq.nats.pull import Delivery, Puller
from taskq.nats.raw import request as api_request
from taskq.nats.streams import rfc3339
from taskq.nats.types import StoredMessage
from taskq.nats.wire import Wire
from taskq.retrying import patiently

MULTI_LAST = 1024  # subjects one `multi_last` direct get may name (nats-server 2.15.1)
PAST_THE_END = 2**31 - 1  # a subject listing's offset beyond any: no subjects, their total


class Messages:
    """Direct reads and removals of stream messages on one connection."""

    def __init__(
        self, client: Client, js: JetStreamContext, guard: Guard, codec: BodyCodec, wire: Wire
    ) -> None:
        self._nc = client
        self._wire = wire
        self._js = js
        self._guard = guard
        self._codec = codec

    async def get(self, stream: str, seq: int) -> StoredMessage | None:
        """Read one message by sequence; None when it is gone."""
        return await self._read_one(stream, seq, following=False, subject=None)

    async def next(self, stream: str, seq: int, subject: str | None = None) -> StoredMessage | None:
        """The first message at or after `seq` (optionally on `subject`); None past the end."""
        return await self._read_one(stream, seq, following=True, subject=subject)

    async def last(self, stream: str, subject: str) -> StoredMessage | None:
        """The last message stored on `subject`, or None."""
        try:
            with self._guard:
                raw = await self._js.get_last_msg(stream, subject)
        except (NotFound, BrokerError):
            return None
        return _stored(raw, subject, 0, self._codec)

    async def _read_one(
        self, stream: str, seq: int, *, following: bool, subject: str | None
    ) -> StoredMessage | None:
        async def read() -> api.RawStreamMsg:
            with self._guard:
                return await self._js.get_msg(stream, seq=seq, next=following, subject=subject)

        try:
            raw = await patiently(read)
        except NotFound:
            return None
        except BrokerError as exc:
            if exc.code == MESSAGE_NOT_FOUND:
                return None
            raise
        return _stored(raw, "", seq, self._codec)

    async def delete(self, stream: str, seq: int) -> bool:
        """Delete one message; False when it was already gone.

        `no_erase`: nats-py's delete asks the server to overwrite the bytes first, which
        costs milliseconds per message on a file store; removal is what we need.
        """
        reply = await self._api(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})
        error = reply_error(reply, "delete")
        if error is None:
            return True
        if error.code == MESSAGE_NOT_FOUND or error.status == 404 or _gone(error):
            return False
        raise error

    async def purge(
        self, stream: str, subject: str | None = None, before_seq: int | None = None
    ) -> int:
        """Remove messages (on `subject`, with sequence below `before_seq`); returns how many."""
        request: dict[str, Any] = {}
        if subject:
            request["filter"] = subject
        if before_seq:
            request["seq"] = before_seq
        reply = await self._api(f"STREAM.PURGE.{stream}", request)
        error = reply_error(reply, "purge")
        if error is not None:
            raise error
        return int(reply.get("purged", 0))

    async def read(
        self, stream: str, subject: str | None = None, batch: int = 1000
    ) -> AsyncIterator[StoredMessage]:
        """Every message of `stream` (on `subject`), oldest first, without consuming any.

        An ephemeral, unacknowledged pull consumer reads in batches: far fewer round trips
        than a direct get per message. It is deleted afterwards (and expires by itself).
        """
        name, pending = await self._reader(stream, subject)
        if not pending:
            await self._drop_consumer(stream, name)
            return
        puller = await Puller(self._nc, self._guard, self._wire, stream, name, self._codec).open()
        try:
            # the first pull may meet a consumer just made on a cluster before its leader is
            # elected (503): retried, as it read nothing
            got = await patiently(lambda: _pulled(puller, batch))
            read, empty = 0, 0
            while True:
                for delivery in got:
                    yield delivery.stored()
                read, empty = read + len(got), 0 if got else empty + 1
                if got and got[-1].pending == 0:
                    return
                # a pull that brought nothing is no end: on a busy machine its expiry can
                # pass first. The consumer's own count says what is left (none when the
                # stream changed under us), those it sent late included.
                if not got and not await self._unread(stream, name, read, empty):
                    return
                got = await _pulled(puller, batch)
        finally:
            await puller.close()
            await self._drop_consumer(stream, name)

    async def _unread(self, stream: str, reader: str, read: int, empty: int) -> int:
        """How many messages `reader` holds that `read` did not yield: pending, or sent and
        not yet arrived. Raises TransientError after READ_STALLS empty pulls in a row."""

        async def ask() -> api.ConsumerInfo:
            with self._guard:
                info: api.ConsumerInfo = await self._js.consumer_info(stream, reader)
            return info

        try:
            info = await patiently(ask)
        except NotFound:  # the stream's NotFound ends a read quietly: this one must not
            raise TransientError(f"reading stream {stream}: the reader expired") from None
        sent = info.delivered.consumer_seq if info.delivered else 0
        left = int(info.num_pending or 0) + max(0, (sent or 0) - read)
        if left and empty >= READ_STALLS:
            raise TransientError(f"reading stream {stream}: {left} message(s) not delivered")
        return left

    async def scan(
        self, stream: str, subject: str | None = None, batch: int = 256
    ) -> AsyncIterator[StoredMessage]:
        """Every message of `stream` (on `subject`), oldest first, by batched direct gets:
        unlike `read`, this works on work-queue streams, which allow no second consumer."""
        seq = 1
        while True:
            found = await self._direct_batch(stream, seq, subject, batch)
            for stored in found:
                yield stored
            if len(found) < batch:
                return
            seq = found[-1].seq + 1

    async def batch(
        self, stream: str, seq: int, count: int, subject: str | None = None
    ) -> list[StoredMessage]:
        """Up to `count` messages from `seq` on (on `subject`), oldest first, in one batched
        direct get: one round trip however long the stream. Fewer when the stream ends;
        empty when nothing is stored there (or the stream does not exist)."""
        return await self._direct_batch(stream, seq, subject, count)

    async def count(self, stream: str, subjects: str) -> int:
        """How many subjects matching `subjects` hold a message: the server's `total` of a
        subject listing asked for past its end, so the answer does not grow with the
        subjects (a group's or chord's members each ask, as they settle)."""
        body = {"subjects_filter": subjects, "offset": PAST_THE_END}
        what = f"STREAM.INFO.{stream}"
        reply = await patiently(lambda: api_request(self._nc, self._guard, what, body))
        error = reply_error(reply, "stream info")
        if error is not None:
            raise error
        return int(reply.get("total") or 0)

    async def latest(self, stream: str, subjects: list[str]) -> dict[str, int]:
        """The sequence of the last message stored on each of `subjects` (those with none
        are left out): one batched direct get (`multi_last`, ADR-31), however many."""
        if not subjects:
            return {}
        unique = sorted(set(subjects))
        last: dict[str, int] = {}
        for start in range(0, len(unique), MULTI_LAST):  # the server answers 413 above
            part = unique[start : start + MULTI_LAST]
            found = await self._direct(stream, {"multi_last": part, "batch": len(part)})
            last.update((stored.subject, stored.seq) for stored in found)
        return last

    async def newest(self, stream: str, subjects: str) -> StoredMessage | None:
        """The last message stored on any subject matching `subjects` (None: none), in one
        direct get (a single one: its answer is the message, or a status)."""
        msg, headers = await self._single(stream, {"last_by_subj": subjects})
        if "Status" in headers:  # 404: nothing stored there
            return None
        return _from_batch(msg, headers, self._codec)

    async def first_seq_at(self, stream: str, when: datetime) -> int | None:
        """The first sequence of `stream` stored at or after `when` (None: nothing stored
        since), in one direct get by `start_time` (the server finds it by its per-block
        times)."""
        _, headers = await self._single(stream, {"start_time": rfc3339(when)})
        status = headers.get("Status")
        if status == "404":  # nothing stored at or after it
            return None
        if status:
            raise BrokerError(f"direct get by time: {status} {headers.get('Description', '')}")
        return int(headers.get("Nats-Sequence", "0")) or None

    async def _single(self, stream: str, request: dict[str, Any]) -> tuple[Msg, dict[str, str]]:
        """The answer to a single direct get (the message, or a status) and its headers."""
        body = json.dumps(request).encode()
        with self._guard:
            msg = await self._nc.request(f"$JS.API.DIRECT.GET.{stream}", body, timeout=5.0)
        return msg, dict(msg.headers or {})

    async def lasts(self, stream: str, subjects: str, after: int = 0) -> list[StoredMessage] | None:
        """The last message of each subject matching `subjects` (a wildcard), stored after
        sequence `after`, oldest first: the server finds each by its subject index, where a
        filtered read scans the stream between them. None when more than MULTI_LAST
        subjects match (the server answers 413; read them with `batch`)."""
        request = {"multi_last": [subjects], "seq": after + 1, "batch": MULTI_LAST}
        found, status = await self._direct_status(stream, request)
        if status == "413":
            return None
        return sorted(found, key=lambda stored: stored.seq)

    async def _direct_batch(
        self, stream: str, seq: int, subject: str | None, batch: int
    ) -> list[StoredMessage]:
        request: dict[str, Any] = {"seq": seq, "batch": batch}
        if subject:
            request["next_by_subj"] = subject
        return await self._direct(stream, request)

    async def _direct(self, stream: str, request: dict[str, Any]) -> list[StoredMessage]:
        """The messages one batched direct get answers, up to its end-of-batch."""
        return (await self._direct_status(stream, request))[0]

    async def _direct_status(
        self, stream: str, request: dict[str, Any]
    ) -> tuple[list[StoredMessage], str]:
        """The messages one batched direct get answers, and the status that ended them
        (204 end of batch, 404 nothing matched, 413 too many subjects)."""
        replies: asyncio.Queue[Msg] = asyncio.Queue()
        subject = f"$JS.API.DIRECT.GET.{stream}"

        async def answer() -> tuple[list[StoredMessage], str]:
            await self._nc.publish(subject, json.dumps(request).encode(), reply=inbox)
            return await _until_end_of_batch(replies, self._codec)

        with self._guard:
            inbox = self._nc.new_inbox()
            sub = await self._nc.subscribe(inbox, cb=replies.put)
            try:  # a refused get is told at the server's -ERR, not at its timeout
                return await self._guard.refusable(subject, answer())
            finally:
                await sub.unsubscribe()

    async def _reader(self, stream: str, subject: str | None) -> tuple[str, int]:
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subject=subject,
            inactive_threshold=30.0,  # a retried create that did land cleans itself up
            mem_storage=True,
            num_replicas=1,
        )

        async def create() -> api.ConsumerInfo:
            with self._guard:
                return await self._js.add_consumer(stream, config)

        info = await patiently(create)
        return info.name or "", int(info.num_pending or 0)

    async def _drop_consumer(self, stream: str, name: str) -> None:
        with contextlib.suppress(TaskqError), self._guard:
            await self._js.delete_consumer(stream, name)

    async def _api(self, what: str, body: dict[str, Any]) -> dict[str, Any]:
        return await api_request(self._nc, self._guard, what, body)


def _gone(error: BrokerError) -> bool:
    """A delete refused because the message is not there (anymore), as nats-server 2.15.1
    answers it (measured): 10043 "sequence N not found" (deleted already, e.g. by another
    worker), or the generic delete-failed 10057 with "no message found" / "stream store
    EOF" (past the last sequence)."""
    if error.code == SEQUENCE_NOT_FOUND:
        return True
    text = str(error)
    return error.code == MSG_DELETE_FAILED and ("no message found" in text or "EOF" in text)


def _stored(raw: api.RawStreamMsg, subject: str, seq: int, codec: BodyCodec) -> StoredMessage:
    headers = dict(raw.headers or {})
    where = raw.subject or subject
    return StoredMessage(
        subject=where,
        seq=raw.seq or seq,
        data=codec.keep(where, headers, raw.data or b""),
        headers=headers,
        time=raw.time,
    )


async def _until_end_of_batch(
    replies: asyncio.Queue[Msg], codec: BodyCodec
) -> tuple[list[StoredMessage], str]:
    """The messages of one batched direct get, up to its end-of-batch (or not-found)
    status message, and that status."""
    found: list[StoredMessage] = []
    loop = asyncio.get_running_loop()
    # one deadline moved on by each message: a wait_for per message (a task each) costs
    # more than reading the message
    async with asyncio.timeout(REPLY_GAP) as deadline:
        while True:
            msg = await replies.get()
            deadline.reschedule(loop.time() + REPLY_GAP)
            headers = dict(msg.headers or {})
            if "Status" in headers:  # 204 EOB, 404 when nothing matched, 413 too many
                return found, headers["Status"]
            found.append(_from_batch(msg, headers, codec))


def _from_batch(msg: Msg, headers: dict[str, str], codec: BodyCodec) -> StoredMessage:
    subject = headers.pop("Nats-Subject", "")
    return StoredMessage(
        subject=subject,
        seq=int(headers.pop("Nats-Sequence", "0")),
        data=codec.keep(subject, headers, msg.data),
        headers={k: v for k, v in headers.items() if not k.startswith("Nats-") or k in _KEPT},
        time=_stamp(headers.pop("Nats-Time-Stamp", "")),
    )


def _stamp(text: str) -> datetime | None:
    """When the server stored a message (its `Nats-Time-Stamp`, RFC 3339 with nanoseconds,
    cut to microseconds), or None."""
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


READ_STALLS = 10  # empty pulls in a row (~3 s each) after which a read gives up, loudly
REPLY_GAP = 10.0  # seconds a batched direct get may go quiet before it is given up
_KEPT = ("Nats-Msg-Id", "Nats-Schedule", "Nats-Schedule-Target", "Nats-TTL")


async def _pulled(puller: Puller, batch: int) -> list[Delivery]:
    """One pull of up to `batch` messages, ending at the last one pending. A TransientError
    with nothing received is raised (the pull may be retried); with some received, they are
    returned: the consumer takes no acks, so a second pull would not see them again."""
    got: list[Delivery] = []
    try:
        async for delivery in puller.stream(batch, 2.0):
            got.append(delivery)
            if delivery.pending == 0:
                break
    except TransientError:
        if not got:
            raise
    return got
