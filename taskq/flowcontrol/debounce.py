"""`debounce`: one run per key, `debounce` seconds after the last call, with its arguments.

A burst's state is one record per task and key in `<PREFIX>_LIMITS`
(`<prefix>.limit.debounce.<key token>.<task>`, sealed when encryption is on): the burst's task
id, when it is due, and the last call. Every call of the burst replaces the record
(compare-and-set on its sequence) and publishes a wake-up: the task's own message with the
burst's id, its due time as `eta`, and `Taskq-Debounce: <key token>` (`Nats-Msg-Id`
`<id>:debounce`, so wake-ups within the dedup window are one message).

A worker judging a wake-up reads the record: due later, it holds the wake-up until then as
the task's one delayed schedule (`task.<id>`: every wake-up of a burst lands there, so a
burst fires once); due now, it takes the record (deleting it by sequence: a call that
replaced it meanwhile extends the burst) and runs the last call. A wake-up with no record
of its burst (the burst ran, or the record expired) runs its own call unless the task has a
result already. Producers publish only to their queue and the limits stream: no schedule is
a producer's to write (docs/security.md).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from taskq.client import Client
from taskq.errors import DecodeError, TaskqError
from taskq.flowcontrol.keys import token
from taskq.flowcontrol.store import ensure_limits, write_once
from taskq.ids import safe_id
from taskq.nats import StoredMessage
from taskq.records.clock import format_time
from taskq.records.envelope import MSG_ID, Envelope, decode

BURST = "Taskq-Debounce"  # on a wake-up: the key token of its burst
RECORD_TTL = 86400.0  # a burst's record outlives any sensible wait for a worker, by far
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}|~[0-9a-f]{32}")


@dataclass(frozen=True)
class Burst:
    """A burst's record as stored: its id, when it is due (epoch seconds), its last call."""

    id: str
    due: float
    call: dict[str, Any]
    seq: int

    @classmethod
    def of(cls, stored: StoredMessage | None) -> Burst | None:
        if stored is None:
            return None
        try:
            value = json.loads(stored.data)
            return cls(str(value["id"]), float(value["due"]), dict(value["call"]), stored.seq)
        except (ValueError, KeyError, TypeError):
            return None  # not a record of ours (or one this process cannot open)


def record_subject(client: Client, key_token: str, task: str) -> str:
    return client.names.limit_subject("debounce", key_token, task)


async def call(client: Client, call: Envelope, key: str, seconds: float) -> tuple[str, bool]:
    """Record `call` (placed, not yet published) as the last of its key's burst, due in
    `seconds`, and publish its wake-up; (the burst's id, whether the burst was going on)."""
    stream = await ensure_limits(client)
    subject = record_subject(client, token(key), call.task)
    for _ in range(20):  # another producer replaced the record meanwhile: read again
        current = Burst.of(await client.connection.messages.last(stream, subject))
        due = client.clock.time() + seconds
        burst = replace(call, id=current.id if current else call.id, eta=_at(due))
        body = json.dumps({"id": burst.id, "due": due, "call": burst.to_dict()}).encode()
        last = current.seq if current is not None else 0
        if await _replace(client, stream, subject, body, last, seconds + RECORD_TTL):
            await _wake_up(client, burst, token(key))
            return burst.id, current is not None
    raise TaskqError(f"debounce of {call.task} for key {key!r}: too much contention")


async def _replace(
    client: Client, stream: str, subject: str, body: bytes, last: int, ttl: float
) -> bool:
    """Store the record (sealed: taskq.records.places) if `last` is still its last sequence.
    The body is this call's own (its due time and call), so a lost ack is told apart."""
    records = client.connection.records
    write = lambda: records.replace(subject, body, last, ttl=ttl)  # noqa: E731
    return await write_once(client, stream, subject, body, write) is not None


async def _wake_up(client: Client, burst: Envelope, key_token: str) -> None:
    headers = {**burst.headers, BURST: key_token, MSG_ID: f"{safe_id(burst.id)}:debounce"}
    await client.publish_placed(replace(burst, headers=headers))


@dataclass(frozen=True)
class Verdict:
    """What a wake-up does: run `run` now, hold until `until`, or nothing (`done`)."""

    run: Envelope | None = None
    until: float = 0.0
    done: bool = False


async def judge_wake_up(
    client: Client, envelope: Envelope, key_token: str, has_record: bool
) -> Verdict:
    """The verdict on a wake-up of `envelope`'s burst (`has_record`: the task has a result
    record already). A key token that is not one of ours makes the wake-up undecodable."""
    if not _TOKEN.fullmatch(key_token):
        raise DecodeError(f"{BURST} is not a key token: {key_token[:80]!r}")
    stream = await ensure_limits(client)
    subject = record_subject(client, key_token, envelope.task)
    for _ in range(20):
        burst = Burst.of(await client.connection.messages.last(stream, subject))
        if burst is None or burst.id != envelope.id:  # its burst ran, or expired
            return Verdict(done=True) if has_record else Verdict(run=envelope)
        now = client.clock.time()
        if burst.due - now > client.settings.timings.in_worker_wait:
            return Verdict(until=burst.due)
        if burst.due > now:  # due in a moment: wait here, then look again
            await asyncio.sleep(burst.due - now)
            continue
        if await client.connection.messages.delete(stream, burst.seq):
            return Verdict(run=_last_call(burst, envelope))
    raise TaskqError(f"debounced {envelope.task}: too much contention for its record")


def _last_call(burst: Burst, wake_up: Envelope) -> Envelope:
    """The burst's last call, to run as the wake-up (its headers, queue and subject)."""
    data = json.dumps(burst.call).encode()
    last = decode(data, subject_task=wake_up.task, msg_id=None, seq=0)
    if last.id != wake_up.id or last.task != wake_up.task:
        raise DecodeError("a debounce record that is not this task's")
    return replace(last, headers=wake_up.headers, queue=wake_up.queue, subject=wake_up.subject)


def _at(epoch: float) -> str:
    return format_time(datetime.fromtimestamp(epoch, UTC))
