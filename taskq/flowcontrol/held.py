"""Holding a task back without costing it an attempt: a one-shot schedule, then the ack.

A delivery held by a limit is re-scheduled as an ADR-51 `@at` schedule on
`<prefix>.s.<queue>.held.<task id>.<group>` in the queue's timer stream (its body unchanged,
its target the fired form of the task's subject, which a worker moves back into the queue)
and the delivery is then acknowledged: a NAK would count as an attempt and toward
the consumer's MaxDeliver. The schedule carries `Taskq-Attempts-Spent` (attempts already
used by earlier messages of the task), which the worker adds to the server's delivery count
when the copy arrives, so the attempt number is right and a limit never uses one up.
`<group>` names the limit (`slot.<key>.<task>`, `rate.<key>.<task>`, `lane.-.<task>`), so the
held tasks of one limit can be found (to wake one) and counted (`taskq limits`). A task
parked for a slot is woken by a direct copy (no scheduler latency); its park token makes
sure that copy and a late firing of its schedule never both run (`wake`, `claim`).

A delayed task (a future `eta`) is held the same way, on `<prefix>.s.<queue>.task.<safe id>`.

The crash window between the schedule's publish and the ack: the schedule is published
with `Nats-Msg-Id` `<id>:held:<stream>:<seq>:<delivery>`. A worker dying before the ack
leaves the delivery to be redelivered after the lease; the worker judging delivery k of a
limited task first publishes a probe with delivery k-1's id: the server answers
`duplicate` exactly when that deferral was stored (within its dedup window, which is why
a limited task's ack_wait must be well below `duplicate_window`), and the redelivery is then
only acknowledged. So a held task is never lost (the schedule is stored before the ack) and
never run twice (the probe). The probe itself is a plain message with a 60 s TTL, deleted
at once: it never fires.
"""

from __future__ import annotations

import logging
from datetime import datetime

from taskq.client import Client
from taskq.errors import UnsafeName
from taskq.flowcontrol.keys import is_token, task_token, token
from taskq.flowcontrol.store import ensure_limits
from taskq.ids import safe_id
from taskq.nats import Delivery, StoredMessage
from taskq.nats.pipeline import check
from taskq.nats.records import TTL
from taskq.records.envelope import MSG_ID, TASK_HEADER, Envelope
from taskq.records.schedules import INTERNAL, SCHEDULE, TARGET, at_expression, delayed_name
from taskq.retrying import retry_transient

SPENT = "Taskq-Attempts-Spent"  # attempts used by earlier messages of this task
HELD = "Taskq-Held"  # which limit held it, for people (`taskq task ID`)
TICKET = "Taskq-Rate-Ticket"  # a rate-limit window reserved for it (`<period>:<window>`)
PARK = "Taskq-Park"  # a parked task's token: of its copies (woken, fired) only one runs
# when a worker first could not run it (a task its app does not declare): its copies come
# back to the queue until a worker that knows it takes one, or the grace period passes
UNKNOWN = "Taskq-Unknown-Since"
SLOT_HINT = "Taskq-Slot-Hint"  # on a woken copy: the slot just released, tried first
# on a woken copy: the limit it was woken for; one that ends without trying a slot (it was
# cancelled or expired meanwhile) passes the wake on to the next task parked there
WOKEN = "Taskq-Woken-For"
FIRED = "Taskq-Fired"  # on a task a schedule fired: its timer stream's sequence
HELD_ROOT = "held"

log = logging.getLogger("taskq.worker")


def group(kind: str, key: str, task: str) -> str:
    """The three tokens naming one limit in held schedules' subjects."""
    return f"{kind}.{key}.{task_token(task)}"


def woken_for(delivery: Delivery, task: str) -> str | None:
    """The slot limit a woken copy of `task` was woken for, None if it was not woken (or
    the header names no slot limit of that task: a header is a producer's to forge)."""
    value = delivery.header(WOKEN)
    if value is None:
        return None
    kind, _, rest = value.partition(".")
    key, _, name = rest.partition(".")
    return value if kind == "slot" and is_token(key) and name == task_token(task) else None


def spent(delivery: Delivery) -> int:
    """Attempts spent before this message (0 unless it is a held task's copy)."""
    value = delivery.header(SPENT)
    return int(value) if value and value.isdigit() else 0


class Holder:
    """Held schedules of one queue (in its timer stream)."""

    def __init__(self, client: Client, queue: str) -> None:
        self.client = client
        self.queue = queue
        self.stream = client.names.timer_stream(queue)

    def subject(self, task_id: str, limit: str) -> str:
        """A held schedule's subject; `limit` "" is a delayed task's own schedule."""
        if not limit:
            return self.client.names.schedule_subject(self.queue, delayed_name(task_id))
        name = f"{HELD_ROOT}.{token(task_id)}.{limit}"
        return self.client.names.schedule_subject(self.queue, name)

    def group_filter(self, limit: str) -> str:
        """Every held schedule of one limit in this queue."""
        name = f"{HELD_ROOT}.*.{limit}"
        return self.client.names.schedule_subject(self.queue, name)

    async def hold(
        self,
        d: Delivery,
        task_id: str,
        target: str,
        limit: str,
        until: datetime,
        headers: dict[str, str],
    ) -> None:
        """Store the held copy of delivery `d` (due at `until`, to `target`); the caller
        acknowledges `d` after this returns."""
        sent = {**carried(d.raw_headers, dropped_told(self.client)), **headers}
        sent[MSG_ID] = commit_id(task_id, d.stream, d.seq, d.num_delivered)
        subject = self.subject(task_id, limit)
        await self._schedule(subject, d.data, sent, until, target, "holding a task")

    async def store(self, envelope: Envelope, until: datetime, internal: str = "") -> None:
        """Store a placed `envelope` as its own delayed schedule, due at `until`: what the
        first worker to receive it with a far `eta` would do, without that delivery (a
        worker publishing one itself: a durable workflow's timers, `internal` says which:
        `timer`, or `expire` for an ended run's clean-up)."""
        sent = {**envelope.headers, MSG_ID: safe_id(envelope.id), TASK_HEADER: envelope.task}
        if internal:
            sent[INTERNAL] = internal
        subject, body = self.subject(envelope.id, ""), envelope.encode()
        await self._schedule(subject, body, sent, until, envelope.subject, "storing a delayed task")

    async def _schedule(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str],
        until: datetime,
        target: str,
        what: str,
    ) -> None:
        """Publish `body` as a schedule on `subject` firing at `until` onto `target`."""
        sent = {**headers, SCHEDULE: at_expression(until)}
        sent[TARGET] = self.client.names.fired_subject(target)
        connection = self.client.connection
        await retry_transient(lambda: connection.publish(subject, body, sent), what=what)

    async def was_held(self, d: Delivery, task_id: str) -> bool:
        """True when the previous delivery of this message was held (its schedule stored)
        but not acknowledged: the worker died in between. See the module docstring."""
        if d.num_delivered < 2:
            return False
        previous = commit_id(task_id, d.stream, d.seq, d.num_delivered - 1)
        subject = self.subject(task_id, "probe.-.-")
        connection = self.client.connection
        ack = await retry_transient(
            lambda: connection.publish(subject, b"", {MSG_ID: previous, TTL: "60s"}),
            what="checking a held task",
        )
        if not ack.duplicate:
            await connection.messages.delete(self.stream, ack.seq)
        return ack.duplicate

    async def wake(self, limit: str, note: dict[str, str] | None = None) -> bool:
        """Send the oldest task parked on `limit` back to its queue now (with the headers
        `note`); False when none is parked here.

        Workers releasing slots at once must wake different tasks: a waker first claims
        one by replacing its schedule with an identical one (compare-and-set on its
        sequence, so one waker wins; the others move on to the next parked task). It then
        publishes a copy of the task (`Nats-Msg-Id` from its park token) and deletes the
        schedule. A crash before the copy leaves the schedule to fire at its recheck time;
        one after it leaves two copies with one park token, and only the first judged runs
        (`claim`)."""
        claimed = await self._claim_oldest(limit)
        if claimed is None:
            return False
        held, mine = claimed
        token = held.headers.get(PARK, "")
        told = dropped_told(self.client)
        headers = {**carried(held.headers, told), **(note or {}), WOKEN: limit}
        headers[MSG_ID] = f"wake:{token or mine}"
        if not await send_now(self.client, held, headers):
            return False  # not ours to move: it fires at its own time
        connection = self.client.connection
        await connection.messages.delete(self.stream, mine)
        await connection.release_claim(held.data, held.subject, held.headers)
        return True

    async def _claim_oldest(self, limit: str) -> tuple[StoredMessage, int] | None:
        """The oldest parked task on `limit` nobody else is waking, and the sequence of
        its schedule once claimed (re-stored unchanged, compare-and-set); None if none."""
        messages, records = self.client.connection.messages, self.client.connection.records
        seq = 1
        for _ in range(16):
            held = await messages.next(self.stream, seq, subject=self.group_filter(limit))
            if held is None:
                return None
            kept = {k: v for k, v in held.headers.items() if k in (SCHEDULE, TARGET)}
            schedule = {**carried(held.headers, dropped_told(self.client)), **kept}
            mine = await records.replace(held.subject, held.data, held.seq, headers=schedule)
            if mine is not None:
                return held, mine
            seq = held.seq + 1  # another worker is waking that one
        return None


async def send_now(client: Client, schedule: StoredMessage, headers: dict[str, str]) -> bool:
    """Publish a stored schedule's task straight into its queue (no scheduler latency), with
    `headers`; False when its target is no queue subject of ours. A claim-checked body is
    the schedule's own: the copy carries the body itself (the caller releases the claim
    once the schedule is gone)."""
    target = client.names.unfired(schedule.headers.get(TARGET, ""))
    if target is None:
        return False
    connection = client.connection
    body = await connection.opened(schedule.data, schedule.subject, schedule.headers)
    await retry_transient(lambda: connection.publish(target, body, headers))
    return True


def commit_id(task_id: str, stream: str, seq: int, delivery: int) -> str:
    return f"{safe_id(task_id)}:held:{stream}:{seq}:{delivery}"


def carried(headers: dict[str, str] | None, told: set[str]) -> dict[str, str]:
    """The headers a held copy keeps: the task's own (trace context, Taskq-*), not the
    server's (message id, schedule bookkeeping, TTL), and none that taskq may not send.

    The server passes on header values with a bare CR or LF from a raw publish (nats-py
    keeps them); copied, they made the outbound check refuse every held copy, hand-back and
    fired copy of the task, which then never ran. Dropped instead: the task goes on as if
    that header had not been sent (and warned about once per name: `told`, the names a
    Client warned about, `dropped_told`). A wake's marks are for the one copy it sent."""
    if not headers:
        return {}
    kept: dict[str, str] = {}
    for name, value in headers.items():
        if name.startswith("Nats-") or name in _ONE_COPY:
            continue
        if _sendable(name, value):
            kept[name] = value
        else:
            _dropped(name, value, told)
    return kept


_ONE_COPY = frozenset({SLOT_HINT, WOKEN})


def _sendable(name: str, value: str) -> bool:
    """The outbound last-line check's own verdict on one header (one definition of safe);
    the subject is a fixed valid one, so only the header decides."""
    try:
        check("_", {name: value})
    except UnsafeName:
        return False
    return True


_DROPS_SHOWN = 64  # header names warned about, per Client: a hostile producer's names vary


def dropped_told(client: Client) -> set[str]:
    """The header names `client` warned were dropped from copies (its own set)."""
    return client.cached("dropped header names", set)


def _dropped(name: str, value: str, told: set[str]) -> None:
    """Warn once per header name that its value was dropped (it may come on every task)."""
    if name in told or len(told) >= _DROPS_SHOWN:
        return
    told.add(name)
    log.warning(
        "dropping header %.40r = %.60r from a task's copies: NATS cannot carry it "
        "(a line break or NUL); further drops of this header are not logged",
        name,
        value,
    )


async def claim(client: Client, d: Delivery, token: str, task: str) -> bool:
    """True when this delivery may run as the copy of parked task `token`: it is the first
    copy judged (a create-only record names its message), or it is that copy again (a
    redelivery). A second copy (its schedule fired before it could be deleted) is False."""
    stream = await ensure_limits(client)
    subject = client.names.limit_subject("claim", token, task)
    mine = f"{d.stream}:{d.seq}".encode()
    records = client.connection.records
    if await retry_transient(lambda: records.create(subject, mine, CLAIM_TTL)) is not None:
        return True
    stored = await client.connection.messages.last(stream, subject)
    return stored is None or stored.data == mine


CLAIM_TTL = 86400.0  # a parked task's other copy fires within its recheck time: far less


_KINDS = {"slot": "max_per_key", "rate": "rate_limit", "lane": "max_concurrency"}


def held_limit(schedule_root: str, subject: str) -> str | None:
    """For a held schedule's subject (under the stream's `schedule_root`), the limit holding
    it as people read it: `rate_limit notify`, `max_per_key report (acme)`; else None."""
    head = schedule_root + HELD_ROOT + "."
    if not subject.startswith(head):
        return None
    parts = subject[len(head) :].split(".", 3)  # id, kind, key, task
    if len(parts) != 4 or parts[1] not in _KINDS:
        return None
    task = parts[3].replace("/", ".")
    key = "" if parts[2] in ("-", "_all") else f" ({parts[2]})"
    return f"{_KINDS[parts[1]]} {task}{key}"
