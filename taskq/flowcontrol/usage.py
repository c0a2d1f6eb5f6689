"""What `taskq limits` shows: every declared limit and its current use, read from the
server alone (no app needed).

Workers record their tasks' limits when they start (`<prefix>.limit.decl.-.<task>` in the
LIMITS stream, one record per task, no TTL). Current use then comes from where each limit
lives: a lane consumer's unacknowledged deliveries and pending messages (max_concurrency),
the slot records of each key (max_per_key), the current window's counters (rate_limit), the
held schedules in the queue streams (tasks waiting on a limit), and the windows of
unique_for/throttle still open.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from taskq.client import Client
from taskq.errors import NotFound
from taskq.flowcontrol.held import HELD_ROOT
from taskq.flowcontrol.keys import ALL, task_token
from taskq.flowcontrol.options import FlowLimits, KeySource, Rate
from taskq.flowcontrol.rates import RateWindows
from taskq.flowcontrol.store import ensure_limits
from taskq.topology.partitions import Part, queues_on_server


@dataclass
class LimitUse:
    """One limit of one task and its use now."""

    task: str
    queue: str
    kind: str  # max_concurrency | max_per_key | rate_limit | unique_for | throttle
    limit: str  # e.g. "3", "2 per tenant", "20/s"
    in_use: int = 0  # running (concurrency), this window's count (rate), open windows
    waiting: int = 0  # for a lane: its messages not yet delivered
    held: int = 0  # tasks held by this limit (schedules waiting to fire)
    keys: dict[str, int] = field(default_factory=dict)  # per key: in use (per-key limits)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def declaration(task: str, queue: str, priority: int, flow: FlowLimits) -> dict[str, Any]:
    """The record a worker writes for a task with limits."""
    return {
        "task": task,
        "queue": queue,
        "priority": priority,
        "max_concurrency": flow.max_concurrency,
        "concurrency_key": _shown(flow.concurrency_key),
        "max_per_key": flow.max_per_key,
        "rate_limit": None if flow.rate is None else str(flow.rate),
        "rate_limit_key": _shown(flow.rate_key),
    }


async def declare(client: Client, declarations: list[dict[str, Any]]) -> None:
    """Record the limits of a worker's tasks (replacing earlier records of those tasks)."""
    if not declarations:
        return
    await ensure_limits(client)
    for decl in declarations:
        subject = client.names.limit_subject("decl", "-", decl["task"])
        await client.connection.records.put(subject, json.dumps(decl).encode())


async def limits_in_use(client: Client) -> list[LimitUse]:
    """Every declared limit, and every open unique/throttle window, with its use now."""
    stream = await ensure_limits(client)
    records = await _records(client, stream)
    held = await held_counts(client)
    found: list[LimitUse] = []
    for subject, value in sorted(records.items()):
        if ".limit.decl." in subject:
            found += await _declared(client, json.loads(value), records, held)
    found += _gates(client, records)
    return found


async def _records(client: Client, stream: str) -> dict[str, bytes]:
    """Every record of the LIMITS stream: subject -> value (one message per subject)."""
    found: dict[str, bytes] = {}
    async for stored in client.connection.messages.scan(stream, client.names.limits_filter):
        found[stored.subject] = stored.data
    return found


async def _declared(
    client: Client, decl: dict[str, Any], records: dict[str, bytes], held: Counter[str]
) -> list[LimitUse]:
    task, queue = str(decl["task"]), str(decl["queue"])
    uses = []
    if decl.get("max_concurrency"):
        uses.append(await _lane(client, task, queue, int(decl["max_concurrency"])))
        uses[-1].held = _held_by(held, "lane", task)
    if decl.get("max_per_key"):
        uses.append(_per_key(client, decl, records, held))
    if decl.get("rate_limit"):
        uses.append(await _rate(client, decl, held))
    return uses


async def _lane(client: Client, task: str, queue: str, limit: int) -> LimitUse:
    use = LimitUse(task, queue, "max_concurrency", str(limit))
    streams, names = client.connection.streams, client.names
    for part in await _parts(client, queue):
        try:
            state = await streams.consumer_state(
                names.queue_stream(queue, part), names.lane_consumer(queue, task)
            )
        except NotFound:  # no worker has made this lane yet
            continue
        use.in_use += state.ack_pending
        use.waiting += state.pending
    return use


def _per_key(
    client: Client, decl: dict[str, Any], records: dict[str, bytes], held: Counter[str]
) -> LimitUse:
    task = str(decl["task"])
    shown = f"{decl['max_per_key']} per {decl.get('concurrency_key') or 'key'}"
    use = LimitUse(task, str(decl["queue"]), "max_per_key", shown)
    for subject in records:
        record = client.names.parse_limit_subject(subject)
        if record is not None and record.kind == "slot" and record.task == task:
            use.keys[record.key] = use.keys.get(record.key, 0) + 1
    use.in_use = sum(use.keys.values())
    use.held = _held_by(held, "slot", task)
    return use


def _held_by(held: Counter[str], kind: str, task: str) -> int:
    """Tasks held by limits of `kind` of `task` (any key)."""
    mine = task_token(task)
    return sum(
        n for g, n in held.items() if g.startswith(kind + ".") and g.split(".", 2)[2] == mine
    )


async def _rate(client: Client, decl: dict[str, Any], held: Counter[str]) -> LimitUse:
    task, text = str(decl["task"]), str(decl["rate_limit"])
    keyed = f" per {decl['rate_limit_key']}" if decl.get("rate_limit_key") else ""
    use = LimitUse(task, str(decl["queue"]), "rate_limit", text + keyed)
    rate, names = Rate.parse(text, task), client.names
    try:
        state = await client.connection.streams.state(
            names.limits_stream, subjects_filter=names.limit_subject("rate", "*", task)
        )
    except NotFound:
        return use
    for subject in state.subjects:
        record = names.parse_limit_subject(subject)
        if record is None:
            continue
        key = record.key
        count = await RateWindows(client, task, key, rate).in_use()
        use.keys[key if key != ALL else "-"] = count
    use.in_use = sum(use.keys.values())
    use.held = _held_by(held, "rate", task)
    return use


def _gates(client: Client, records: dict[str, bytes]) -> list[LimitUse]:
    """Open unique_for / throttle windows, per task (they are per call, not declared)."""
    open_windows: Counter[tuple[str, str]] = Counter()
    for subject in records:
        record = client.names.parse_limit_subject(subject)
        if record is not None and record.kind in ("unique", "throttle"):
            open_windows[(record.task, record.kind)] += 1
    return [
        LimitUse(task, "", kind + "_for" if kind == "unique" else kind, "(per call)", count)
        for (task, kind), count in sorted(open_windows.items())
    ]


async def held_counts(client: Client, queues: list[str] | None = None) -> Counter[str]:
    """Held tasks per limit group (`slot.<key>.<task>`, `rate.<key>.<task>`, ...)."""
    on_server = await queues_on_server(client.connection, client.names)
    counts: Counter[str] = Counter()
    for queue in queues or list(on_server):
        with contextlib.suppress(NotFound):  # no timer stream yet: nothing held
            counts.update(await held_in(client, queue))
    return counts


async def held_in(client: Client, queue: str) -> Counter[str]:
    """Held tasks of one queue per limit group (its timer stream's held schedules)."""
    names = client.names
    root = names.schedule_subject(queue, f"{HELD_ROOT}.")
    state = await client.connection.streams.state(
        names.timer_stream(queue), subjects_filter=root + ">"
    )
    counts: Counter[str] = Counter()
    for subject, count in state.subjects.items():
        limit = subject[len(root) :].split(".", 1)[1] if "." in subject[len(root) :] else ""
        if limit and not limit.startswith("probe."):
            counts[limit] += count
    return counts


async def _parts(client: Client, queue: str) -> list[Part]:
    return (await queues_on_server(client.connection, client.names)).get(queue, [None])


def _shown(source: KeySource | None) -> str | None:
    if source is None:
        return None
    return source if isinstance(source, str) else getattr(source, "__name__", "<function>")
