"""Faults injected around a real, connected taskq Connection: no fake broker, no mock.

Two objects of a Connection carry every JetStream write taskq makes:
- its pipeline (`Connection._pipeline`): every acknowledged publish (`Connection.publish`,
  `publish_nowait`, `publish_many_nowait` (each message a call of its own here), the KV
  buckets' `put` / `put_nowait` / `put_many_nowait`: result records, dead letters, held
  copies, requeued tasks, enqueues);
- its records (`Connection.records`): flow control's create-only / compare-and-set writes
  (per-key slots and their renewal, rate windows, park claims, a parked task's wake).

`inject(connection)` replaces both attributes with wrappers that forward every call to the
real object, except the calls a rule picks (by subject, and which matching call: the Nth,
for `times` calls), which meet one of:
- `refuse`: the server refused the write. Nothing is sent (nothing stored); the pipeline's
  ack future fails with `error` (default: the BrokerError the pipeline raises for a
  server's error reply, taskq/nats/errors.py `_api_error`), records raise it.
- `lose_ack`: the write really reaches the server and is stored, but its ack never comes
  back: the pipeline's future fails, once the real ack has arrived (so the write is known
  stored), with the TransientError the pipeline's sweep gives a publish past its ack
  deadline; records raise the TransientError the Guard makes of a request's timeout.
- `delay`: the write reaches the server `seconds` late (a slow store: a loaded or fsyncing
  server), then goes on untouched.
- `close`: the underlying nats-py client is really closed for good (`close()` while the
  connection is live, as nats-py does on a protocol error: the Connection's `wait_lost`
  fires), then the call goes on to the real object and meets the closed connection.
Atomic batches are not sent while faults are injected (every stream counts as one that
refused them, as a stream made without atomic publishes does): taskq then publishes each
write on its own, where the rules see it. On leaving the block the real objects are back.
Every call seen is in `calls`, as `Call(kind, subject, fault, method)` (`fault` None:
forwarded untouched).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from taskq.errors import BrokerError, TaskqError, TransientError
from taskq.nats.connection import Connection
from taskq.nats.types import PubAck

REFUSE, LOSE_ACK, CLOSE, DELAY = "refuse", "lose_ack", "close", "delay"
PUBLISH, RECORD = "publish", "record"  # a call's kind: the pipeline's send, a records write


@dataclass
class Call:
    kind: str  # PUBLISH or RECORD
    subject: str
    fault: str | None  # the fault it met, None when forwarded untouched
    method: str = "send"  # records: create, replace, put or increment


@dataclass
class Rule:
    """Calls of `kind` (None: either) on a subject matching `pattern` (a glob, or a
    compiled regex searched in the subject); matching calls number `nth` to
    `nth + times - 1` meet `action`."""

    action: str
    pattern: str | re.Pattern[str]
    kind: str | None = None
    nth: int = 1
    times: int = 1
    error: TaskqError | None = None
    seconds: float = 0.0  # DELAY: how late the write is sent
    seen: int = 0  # matching calls so far
    hits: int = 0  # calls that met the fault
    active: bool = True

    def stop(self) -> None:
        """No more faults from this rule: calls it would pick go to the real object."""
        self.active = False

    def picks(self, kind: str, subject: str) -> bool:
        if not self.active or (self.kind is not None and self.kind != kind):
            return False
        if not matches(self.pattern, subject):
            return False
        self.seen += 1
        return self.nth <= self.seen < self.nth + self.times


@dataclass
class Faults:
    """The rules in force on one connection, and the calls seen."""

    connection: Connection
    rules: list[Rule] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    def refuse(
        self,
        pattern: str | re.Pattern[str],
        *,
        kind: str | None = None,
        nth: int = 1,
        times: int = 1,
        error: TaskqError | None = None,
    ) -> Rule:
        return self._add(Rule(REFUSE, pattern, kind, nth, times, error))

    def lose_ack(
        self,
        pattern: str | re.Pattern[str],
        *,
        kind: str | None = None,
        nth: int = 1,
        times: int = 1,
    ) -> Rule:
        return self._add(Rule(LOSE_ACK, pattern, kind, nth, times))

    def delay(
        self, pattern: str | re.Pattern[str], seconds: float, *, kind: str | None = None
    ) -> Rule:
        return self._add(Rule(DELAY, pattern, kind, seconds=seconds))

    def close(
        self, pattern: str | re.Pattern[str], *, kind: str | None = None, nth: int = 1
    ) -> Rule:
        return self._add(Rule(CLOSE, pattern, kind, nth, 1))

    def seen(self, subject: str | re.Pattern[str], fault: str | bool | None = False) -> list[Call]:
        """Calls on subjects matching `subject` (those that met `fault`, unless False)."""
        return [
            c
            for c in self.calls
            if matches(subject, c.subject) and (fault is False or c.fault == fault)
        ]

    def _add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def _pick(self, kind: str, subject: str, method: str = "send") -> Rule | None:
        chosen = None
        for rule in self.rules:  # every rule counts the call, the first picking it applies
            if rule.picks(kind, subject) and chosen is None:
                chosen = rule
        if chosen is not None:
            chosen.hits += 1
        self.calls.append(Call(kind, subject, chosen.action if chosen else None, method))
        return chosen

    async def _close_for_good(self) -> None:
        await self.connection._nc.close()


def matches(pattern: str | re.Pattern[str], subject: str) -> bool:
    """A glob matches the whole subject; a regex is searched in it."""
    if isinstance(pattern, re.Pattern):
        return pattern.search(subject) is not None
    return fnmatch.fnmatchcase(subject, pattern)


def refused(subject: str, error: TaskqError | None) -> TaskqError:
    return error or BrokerError(f"the server refused the write to {subject} (injected)", None, 400)


class FaultyPipeline:
    """The connection's real pipeline, with the faults of `faults` on its `send`."""

    def __init__(self, real: Any, faults: Faults) -> None:
        self._real = real
        self._faults = faults

    def __getattr__(self, name: str) -> Any:  # close() and the rest: the real pipeline's
        return getattr(self._real, name)

    async def send_many(
        self, messages: list[tuple[str, bytes, dict[str, str] | None]], ack_timeout: float
    ) -> list[asyncio.Future[PubAck]]:
        """Each message as its own `send`, so that the rules pick among them alike."""
        return [await self.send(s, b, h, ack_timeout) for s, b, h in messages]

    async def send(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None,
        ack_timeout: float,
        **more: Any,  # `batched`: an atomic batch's commit
    ) -> asyncio.Future[PubAck]:
        rule = self._faults._pick(PUBLISH, subject)
        loop = asyncio.get_running_loop()
        if rule is not None and rule.action == DELAY:
            await asyncio.sleep(rule.seconds)
        if rule is None or rule.action == DELAY:
            return await self._real.send(subject, body, headers, ack_timeout, **more)
        if rule.action == REFUSE:
            answer: asyncio.Future[PubAck] = loop.create_future()
            answer.set_exception(refused(subject, rule.error))
            return answer
        if rule.action == CLOSE:
            await self._faults._close_for_good()
            return await self._real.send(subject, body, headers, ack_timeout)
        stored = await self._real.send(subject, body, headers, ack_timeout)  # LOSE_ACK
        lost: asyncio.Future[PubAck] = loop.create_future()

        def after_the_real_ack(real: asyncio.Future[PubAck]) -> None:
            if lost.done():
                return
            if real.cancelled() or real.exception() is not None:
                lost.set_exception(real.exception() or TransientError("cancelled"))
            else:
                why = f"no acknowledgement from the server in {ack_timeout:g}s (injected)"
                lost.set_exception(TransientError(why))

        stored.add_done_callback(after_the_real_ack)
        return lost


class FaultyRecords:
    """The connection's real Records, with the faults of `faults` on its writes."""

    def __init__(self, real: Any, faults: Faults) -> None:
        self._real = real
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def _call(self, name: str, subject: str, *args: Any, **kwargs: Any) -> Any:
        rule = self._faults._pick(RECORD, subject, name)
        call = getattr(self._real, name)
        if rule is not None and rule.action == DELAY:
            await asyncio.sleep(rule.seconds)
        if rule is None or rule.action == DELAY:
            return await call(subject, *args, **kwargs)
        if rule.action == REFUSE:
            raise refused(subject, rule.error)
        if rule.action == CLOSE:
            await self._faults._close_for_good()
            return await call(subject, *args, **kwargs)
        await call(subject, *args, **kwargs)  # LOSE_ACK: stored, its answer lost
        raise TransientError("NATS request timed out (injected: the answer was lost)")

    async def create(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call("create", subject, *args, **kwargs)

    async def replace(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call("replace", subject, *args, **kwargs)

    async def put(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call("put", subject, *args, **kwargs)

    async def increment(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call("increment", subject, *args, **kwargs)


@contextlib.contextmanager
def inject(connection: Connection) -> Iterator[Faults]:
    """Faults on `connection` (real and connected) for the block; add rules to the Faults
    it yields, before or during the block."""
    faults = Faults(connection)
    pipeline, records = connection._pipeline, connection.records
    unbatched = connection._unbatched
    connection._pipeline = FaultyPipeline(pipeline, faults)  # type: ignore[assignment]
    connection.records = FaultyRecords(records, faults)  # type: ignore[assignment]
    connection._unbatched = _EveryStream()
    try:
        yield faults
    finally:
        connection._pipeline = pipeline
        connection.records = records
        connection._unbatched = unbatched


class _EveryStream(set[str]):
    """Streams that refused atomic batches, under faults: all of them."""

    def __contains__(self, stream: object) -> bool:
        return True
