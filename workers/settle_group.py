"""Settling, together, the tasks that finished close together (the batching settle path).

A task that finished hands its verdict here and its handler returns at once. Everything
handed over within one turn of the event loop is one group: the group's writes (result
records, dead letters) are published pipelined and their server acks awaited together,
then each message is settled (ack, NAK, or TERM) only once *its own* writes are stored. A
lone task is settled on the next loop turn: no timer, no added latency. A verdict whose
write failed is not settled with its group: it is written again on its own
(`Settler.settle_alone`, retried while transient), and if that fails too its message is
handed back for redelivery, as a failed settle always was. `ack_sync` tasks, workflow
steps, holds, limits and undecodable messages never come here.

At most `window` verdicts wait for their writes at once; a task finishing beyond that keeps
its slot until there is room, so the worker fetches no faster than the server stores. A
server that fsyncs every write (`sync_interval: always`) stores a few thousand a second;
unbounded, a drain ran tens of thousands of no-op tasks ahead of their records, whose acks
then missed their 5 s deadline and were written again, and again (bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskq.client import Client
from taskq.dlq.write import Letter
from taskq.errors import StorageFull
from taskq.ids import safe_id
from taskq.nats import PubAck
from taskq.policy import Decision, Outcome
from taskq.workers.job import Job

log = logging.getLogger("taskq.worker")

Finish = Callable[[Job, Decision, "Outcome | None"], Awaitable[None]]


@dataclass(slots=True)
class Handed:
    """One task's verdict waiting for its group: the record's bytes (None: no record)."""

    job: Job
    decision: Decision
    outcome: Outcome | None
    record: bytes | None
    letter: Letter | None = None  # a dead verdict's dead letter, stored before the TERM


class SettleGroup:
    """Collects verdicts for one turn of the loop, then stores and settles them together."""

    def __init__(self, client: Client, finish: Finish, alone: Finish, window: int = 512) -> None:
        self._client = client
        self._finish = finish  # settles one message whose record is stored
        self._alone = alone  # writes one record on its own, then settles its message
        self._waiting: list[Handed] = []
        self._flushing: set[asyncio.Task[None]] = set()
        self._scheduled = False
        self.groups = 0  # how many groups were settled (bench/breakdown.py reports the mean size)
        self.grouped = 0
        # at 1,000 stored writes a second (1 ms fsyncs), a full window is half a second of
        # the server's work: well inside the 5 s a write's acknowledgement may take
        self.window = window
        self.unsettled = 0  # handed over, not yet settled (or handed back)
        self.peak = 0
        self._room = asyncio.Event()
        self._room.set()

    async def add(self, handed: Handed) -> None:
        """Take a verdict to settle with its group; waits while the window is full."""
        while self.unsettled >= self.window:
            self._room.clear()
            await self._room.wait()
        self.unsettled += 1
        self.peak = max(self.peak, self.unsettled)
        self._waiting.append(handed)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Settle everything handed over so far (the worker's shutdown waits for this)."""
        while self._waiting or self._flushing:
            if self._waiting:
                self._flush()
            await asyncio.gather(*self._flushing, return_exceptions=True)

    def _flush(self) -> None:
        self._scheduled = False
        group, self._waiting = self._waiting, []
        if not group:
            return
        self.groups += 1
        self.grouped += len(group)
        flush = asyncio.create_task(self._settle(group))
        self._flushing.add(flush)
        flush.add_done_callback(self._flushing.discard)

    async def _settle(self, group: list[Handed]) -> None:
        stored = await self._store(group)
        for handed, (record, letter) in zip(group, stored, strict=True):
            if isinstance(record, StorageFull):
                # a full store must not stop the drain: the record is lost, visibly
                log.warning("result of task %s not stored: %s", _tid(handed), record)
                record = None
            if (record is None or isinstance(record, PubAck)) and (
                letter is None or isinstance(letter, PubAck)
            ):
                handed.job.lettered = letter is not None
                await self._guarded(self._finish, handed)
            else:  # not stored: its message waits until its writes are (or comes back)
                self._spawn(self._guarded(self._alone, handed))

    async def _store(self, group: list[Handed]) -> list[tuple[Any, Any]]:
        """Each write published now (pipelined), acks awaited together; per handed, for its
        record and its dead letter: the PubAck, the error the write met, or None (none)."""
        writes: list[Awaitable[PubAck] | None] = []
        for handed in group:
            writes.append(await self._send_record(handed))
            writes.append(await self._send_letter(handed))
        sent = [w for w in writes if w is not None]
        done = iter(await asyncio.gather(*sent, return_exceptions=True))
        results = [None if w is None else next(done) for w in writes]
        return list(zip(results[::2], results[1::2], strict=True))

    async def _send_record(self, handed: Handed) -> Awaitable[PubAck] | None:
        if handed.record is None:
            return None
        kv, bucket = self._client.connection.kv, self._client.names.results_bucket
        try:
            return await kv.put_nowait(bucket, _key(handed), handed.record)
        except Exception as exc:  # refused before it was sent (e.g. not connected)
            return _failed(exc)

    async def _send_letter(self, handed: Handed) -> Awaitable[PubAck] | None:
        letter = handed.letter
        if letter is None:
            return None
        try:
            connection = self._client.connection
            return await connection.publish_nowait(letter.subject, letter.body, letter.headers)
        except Exception as exc:
            return _failed(exc)

    async def _guarded(self, settle: Finish, handed: Handed) -> None:
        """Never let one message's settle failure touch the others: it is redelivered.
        Either way its place in the window is free afterwards."""
        try:
            await settle(handed.job, handed.decision, handed.outcome)
        except Exception:
            log.exception("unexpected error settling %s; will be redelivered", _tid(handed))
            with contextlib.suppress(Exception):
                await handed.job.delivery.nak(delay=5.0)
        finally:
            self.unsettled -= 1
            self._room.set()

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        retry = asyncio.create_task(run())
        self._flushing.add(retry)
        retry.add_done_callback(self._flushing.discard)


def _key(handed: Handed) -> str:
    assert handed.job.envelope is not None
    return safe_id(handed.job.envelope.id)


def _tid(handed: Handed) -> str:
    envelope = handed.job.envelope
    return envelope.id if envelope is not None else f"seq {handed.job.delivery.seq}"


def _failed(exc: Exception) -> Awaitable[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future
