"""Rate limits (`rate_limit="50/s"`, `/m`, `/h`; per key with `rate_limit_key=`): never more
than N starts in any window of W seconds — a sliding window, not clock-aligned ones (with
fixed windows, N at the end of one and N at the start of the next made 2N within W).

One record per limit (and key) in `<PREFIX>_LIMITS`, `<prefix>.limit.rate.<key>.<task>`:
the planned starts (epoch ms, each with a reservation nonce) that still matter — those of
the last W seconds and those reserved ahead — in order. A worker admitting a task reads it,
picks the earliest start `s >= now` that keeps every window of W seconds at N planned starts
or fewer (`earliest`), and writes it back compare-and-set on the record's sequence (another
worker's write in between: read again). The record carries a TTL: it vanishes W seconds
after its last planned start.

* `s` now: the task runs.
* `s` within `timings.in_worker_wait` seconds (2): the task waits in the worker (its slot
  held) and runs then.
* later: it is held as a schedule firing shortly before `s`, carrying a ticket
  (`Taskq-Rate-Ticket: <s>:<nonce>`). When the copy comes, its reservation is taken off the
  record (compare-and-set: a ticket runs once, and a forged or spent one is admitted afresh),
  it waits to `s` and runs. A copy that comes past `s` (a busy worker) is admitted afresh:
  a late start never overlaps another's window.
* Starts are reserved `slack` (10% of a short window up to 0.1 s, 1% of a long one up to
  5 s) further apart than the window asks, so a body may start up to `slack` after its
  reserved start; the last check before the body re-admits one that slipped half of it or
  more, giving the slipped reservation back (the other half is for the moment between that
  check and the body: taskq.flowcontrol.start_gate).
* Reservations reach at most `rate_horizon(W)` ahead and MAX_LOG entries; past that a task
  is held without one, to try again later (each held task is re-published once otherwise).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass

from taskq.client import Client
from taskq.flowcontrol.options import Rate
from taskq.flowcontrol.store import ensure_limits, write_once
from taskq.nats import StoredMessage
from taskq.topology.specs import rate_horizon

EARLY = 1.5  # a held copy's schedule fires this long before its start (whole seconds)
MAX_LOG = 10_000  # planned starts one record keeps, at most (~150 KB)
CONTENTION = 64  # compare-and-set attempts before giving up for now


@dataclass(frozen=True)
class Verdict:
    """Run at `start` (epoch s; now or soon), or hold until `until` with `ticket`. The
    ticket (`<start ms>:<nonce>`) names the reservation either way: a start that slipped
    gives it back when it asks for a fresh one."""

    start: float | None
    until: float = 0.0
    ticket: str = ""


def earliest(log: list[int], now: int, limit: int, window: int) -> int:
    """The earliest start (ms) >= `now` that keeps every window of `window` ms at `limit`
    planned starts or fewer, given the sorted planned starts `log`. Feasibility changes
    only where an earlier start leaves the window, so the candidates are `now` and each
    start + `window`; one past the last start always fits."""
    for start in sorted({now, *(t + window for t in log if t + window > now)}):
        if _fits(log, start, limit, window):
            return start
    raise AssertionError("unreachable: a start after every window fits")


def _fits(log: list[int], start: int, limit: int, window: int) -> bool:
    """Whether every `limit` + 1 consecutive starts of `log` with `start` span `window`."""
    merged = sorted([*log, start])
    at = merged.index(start)
    for first in range(max(0, at - limit), at + 1):
        last = first + limit
        if last < len(merged) and merged[last] - merged[first] < window:
            return False
    return True


class RateWindows:
    """One rate limit's record: a task's, or one key's of it."""

    def __init__(self, client: Client, task: str, key: str, rate: Rate) -> None:
        self.client = client
        self.task = task
        self.key = key
        self.rate = rate
        self.subject = client.names.limit_subject("rate", key, task)
        self.window = int(rate.period * 1000)
        self.slack = slack(rate.period)
        self.ahead = client.settings.timings.in_worker_wait  # a start this near: wait for it
        # planned starts are this far apart per `limit`: a body starting up to `slack`
        # after its planned start still keeps every real window within the limit
        self.spacing = self.window + int(self.slack * 1000)

    async def admit(self, ticket: str | None, slipped_from: str = "") -> Verdict:
        """Run now or soon, or hold with a reservation; a valid ticket runs at its start.
        `slipped_from`: the ticket of this task's start that slipped (no body started at
        it), taken off the record in the same write, so a slip spends one start, not two."""
        stream = await ensure_limits(self.client)
        if ticket and (start := await self._redeem(stream, ticket)) is not None:
            return Verdict(start)
        unused = _reservation(slipped_from)
        for _ in range(CONTENTION):
            verdict = await self._reserve(stream, unused)
            if verdict is not None:
                return verdict
        return Verdict(None, self.client.clock.time() + self.ahead)  # too busy: a little later

    async def _reserve(self, stream: str, unused: tuple[int, str] | None) -> Verdict | None:
        """One read-decide-write round; None when another worker wrote in between."""
        stored = await self.client.connection.messages.last(stream, self.subject)
        now = int(self.client.clock.time() * 1000)
        entries = [e for e in _entries(stored) if e[0] > now - self.spacing and e != unused]
        start = earliest([e[0] for e in entries], now, self.rate.limit, self.spacing)
        if start - now > rate_horizon(self.rate.period) * 1000 or len(entries) >= MAX_LOG:
            return Verdict(None, now / 1000 + rate_horizon(self.rate.period) / 2)
        nonce = secrets.token_hex(4)
        if not await self._write(stream, stored, [*entries, (start, nonce)], now):
            return None
        if (start - now) / 1000 <= self.ahead:
            return Verdict(start / 1000, ticket=f"{start}:{nonce}")
        return Verdict(None, start / 1000 - EARLY, f"{start}:{nonce}")

    async def _redeem(self, stream: str, ticket: str) -> float | None:
        """The start of a reservation this ticket holds, taken off the record so it runs
        once; None for a ticket that is late, spent, forged or another limit's."""
        reservation = _reservation(ticket)
        if reservation is None:
            return None
        start, nonce = reservation
        for _ in range(CONTENTION):
            stored = await self.client.connection.messages.last(stream, self.subject)
            entries = _entries(stored)
            late = slipped(start / 1000, self.slack, self.client.clock.time())
            if late or (start, nonce) not in entries:
                return None
            spent = [(t, n) if (t, n) != (start, nonce) else (t, "") for t, n in entries]
            if await self._write(stream, stored, spent, int(self.client.clock.time() * 1000)):
                return start / 1000
        return None

    async def _write(
        self, stream: str, stored: StoredMessage | None, entries: list[tuple[int, str]], now: int
    ) -> bool:
        entries = sorted(entries)
        body = json.dumps({"limit": str(self.rate), "starts": entries}).encode()
        ttl = (max(t for t, _ in entries) - now) / 1000 + self.rate.period + 60
        last = stored.seq if stored is not None else 0
        records = self.client.connection.records
        # the body holds a nonce only this call drew: write_once knows its own lost ack
        written = await write_once(
            self.client,
            stream,
            self.subject,
            body,
            lambda: records.replace(self.subject, body, last, ttl=ttl),
        )
        return written is not None

    async def in_use(self) -> int:
        """Starts planned within the last window (for `taskq limits`)."""
        stream = await ensure_limits(self.client)
        stored = await self.client.connection.messages.last(stream, self.subject)
        now = self.client.clock.time() * 1000
        return sum(1 for t, _ in _entries(stored) if now - self.window < t <= now)


def slipped(start: float, slack: float, now: float) -> bool:
    """Whether a body reserved for `start` (epoch s) is too late to go on it at `now`: half
    the `slack` has passed (the other half is for the moment between the check and the body)."""
    return now > start + slack / 2


def slack(period: float) -> float:
    """Seconds further apart than the window asks that starts are reserved under a
    `period`-long limit: a body may start up to this late and keep every window. 10% of
    a short window (0.1 s at most), 1% of a long one (5 s at most): a start that slips
    past half of it gives its reservation back and queues behind those reserved after it,
    which costs a `/h` limit an hour, so long windows tolerate the lag of a loaded worker
    (2.5 s for `/h`, 0.3 s for `/m`) for at most 1% of their throughput."""
    return max(min(0.1, 0.1 * period), min(5.0, 0.01 * period))


def _reservation(ticket: str) -> tuple[int, str] | None:
    """(start ms, nonce) of a ticket; None for one that names no reservation."""
    start_text, _, nonce = ticket.partition(":")
    if not start_text.isdigit() or len(start_text) > 16 or not nonce:
        return None
    return int(start_text), nonce


def _entries(stored: StoredMessage | None) -> list[tuple[int, str]]:
    if stored is None:
        return []
    try:
        starts = json.loads(stored.data)["starts"]
        return [(int(t), str(n)) for t, n in starts]
    except (ValueError, KeyError, TypeError):
        return []  # not a record of ours: start afresh


async def wait_until(start: float, now: float) -> None:
    """Sleep until `start` (epoch seconds), if it is still to come at `now`."""
    delay = start - now
    if delay > 0:
        await asyncio.sleep(delay)
