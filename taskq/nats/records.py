"""Records: one-value subjects of a stream, written with the server's own guards.

Flow control keeps its state in streams that hold one message per subject (a "record"):
- create-only with a per-message TTL (ADR-43 `Nats-TTL`, whole seconds): the record holds
  a uniqueness window, a throttle window or a concurrency slot, and vanishes by itself when
  its holder stops renewing it (a crashed worker's slot comes back within its TTL);
- compare-and-set (`Nats-Expected-Last-Subject-Sequence`): renewing a slot only while it is
  still ours, replacing a schedule only if nobody replaced it first;
- counters (ADR-49 `Nats-Incr`): the server adds and answers the new total in the publish
  acknowledgement, so concurrent workers never conflict (no read-modify-write).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nats.js import JetStreamContext

from taskq.errors import BrokerError
from taskq.nats.errors import WRONG_LAST_SEQUENCE, Guard
from taskq.nats.pipeline import check

EXPECTED_LAST = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"  # its subject filter
TTL = "Nats-TTL"
INCREMENT = "Nats-Incr"


def ttl_header(seconds: float) -> str:
    """A `Nats-TTL` value: whole seconds, rounded up, at least 1 (the server's unit)."""
    return f"{max(1, math.ceil(seconds))}s"


Seal = Callable[[str, bytes, "dict[str, str] | None"], bytes]


class Records:
    """Record writes on one connection. Values on subjects that hold users' data (a
    debounce schedule, a parked task re-stored) are sealed like any publish there."""

    def __init__(self, js: JetStreamContext, guard: Guard, seal: Seal) -> None:
        self._js = js
        self._guard = guard
        self._seal = seal

    async def create(
        self,
        subject: str,
        value: bytes,
        ttl: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> int | None:
        """Store `value` only if `subject` holds nothing; its sequence, or None if taken."""
        return await self.replace(subject, value, 0, ttl, headers)

    async def replace(
        self,
        subject: str,
        value: bytes,
        last_seq: int,
        ttl: float | None = None,
        headers: dict[str, str] | None = None,
        within: str | None = None,
    ) -> int | None:
        """Store `value` only if the last message on `subject` (on any subject matching
        `within`, when given) is `last_seq` (0: none); the new sequence, or None when
        someone else wrote (or it expired) meanwhile."""
        sent = {**(headers or {}), EXPECTED_LAST: str(last_seq)}
        if within is not None:
            sent[EXPECTED_LAST_SUBJECT] = within
        if ttl is not None:
            sent[TTL] = ttl_header(ttl)
        value = self._seal(subject, value, sent)
        check(subject, sent)
        try:
            with self._guard:
                ack = await self._js.publish(subject, value, headers=sent)
        except BrokerError as exc:
            if exc.code == WRONG_LAST_SEQUENCE:
                return None
            raise
        return int(ack.seq)

    async def put(
        self,
        subject: str,
        value: bytes,
        ttl: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Store `value` whatever was there; returns its sequence."""
        sent = dict(headers or {})
        if ttl is not None:
            sent[TTL] = ttl_header(ttl)
        value = self._seal(subject, value, sent)
        check(subject, sent)
        with self._guard:
            ack = await self._js.publish(subject, value, headers=sent or None)
        return int(ack.seq)

    async def increment(
        self, subject: str, by: int = 1, headers: dict[str, str] | None = None
    ) -> int:
        """Add `by` to the counter on `subject` (a stream with counters on); the new total.
        Extra `headers` are kept on the counter's message (the server preserves them)."""
        sent = {**(headers or {}), INCREMENT: f"{by:+d}"}
        check(subject, sent)
        with self._guard:
            ack = await self._js.publish(subject, b"", headers=sent)
        value = getattr(ack, "val", None)
        if value is None:
            raise BrokerError(f"the server did not count {subject}: is it a counter stream?")
        return int(value)
