"""Per-key concurrency slots (`concurrency_key=` + `max_per_key=N`) as TTL records.

Slot `i` of key `k` is the record `<prefix>.limit.slot.<k>.<i>.<task>` in the LIMITS
stream: taking it is a create-only publish (the server refuses a second holder), holding it
is renewing its TTL (compare-and-set on its sequence, so a slot that expired and was taken by
someone else is never stolen back), giving it back is deleting it. A worker that dies stops
renewing: its slots vanish within one TTL (the task's ack_wait), when its deliveries come
back too. No counter to drift, nothing to reconcile.

Keys are unbounded (one per tenant), so slots cannot be consumers; the global limit
(`max_concurrency`) is a consumer's max_ack_pending instead (`lane_consumer` in
taskq.topology.specs, `ensure_lanes` in taskq.workers.setup).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from taskq.client import Client
from taskq.records.heartbeats import worker_name


@dataclass
class Slot:
    """A slot held by this worker: its record's subject and current sequence."""

    subject: str
    seq: int

    index: int


class KeySlots:
    """The `size` slots of one key of one task."""

    def __init__(
        self, client: Client, stream: str, task: str, key: str, size: int, ttl: float
    ) -> None:
        self.client = client
        self.stream = stream
        self.task = task
        self.key = key
        self.size = size
        self.ttl = ttl

    def subject(self, index: int | str) -> str:
        return self.client.names.limit_subject("slot", f"{self.key}.{index}", self.task)

    async def acquire(self, task_id: str, hint: int | None = None) -> Slot | None:
        """Take a free slot for `task_id`, or None when all `size` are held. `hint`: the
        slot to try first (a woken task is told which one was just released)."""
        records = self.client.connection.records
        value = _holder(task_id, self.size)
        # most of the time one round trip will do
        guess = hint if hint is not None and 0 <= hint < self.size else random.randrange(self.size)
        seq = await records.create(self.subject(guess), value, self.ttl)
        if seq is not None:
            return Slot(self.subject(guess), seq, guess)
        free = sorted(set(range(self.size)) - await self.taken(), key=lambda _: random.random())
        for index in free:
            seq = await records.create(self.subject(index), value, self.ttl)
            if seq is not None:
                return Slot(self.subject(index), seq, index)
        return None

    async def taken(self) -> set[int]:
        """The slots held now (by anyone)."""
        state = await self.client.connection.streams.state(
            self.stream, subjects_filter=self.subject("*")
        )
        held = set()
        for subject in state.subjects:
            record = self.client.names.parse_limit_subject(subject)
            if record is not None and record.index is not None and record.index.isdigit():
                held.add(int(record.index))
        return held

    async def renew(self, slot: Slot, task_id: str) -> bool:
        """Extend the slot's TTL; False when it was lost (it expired, maybe taken since)."""
        value = _holder(task_id, self.size)
        seq = await self.client.connection.records.replace(slot.subject, value, slot.seq, self.ttl)
        if seq is None:
            return False
        slot.seq = seq
        return True

    async def release(self, slot: Slot) -> None:
        await self.client.connection.messages.delete(self.stream, slot.seq)


def _holder(task_id: str, size: int) -> bytes:
    """A slot record's value: who holds it (shown by `taskq limits`)."""
    return json.dumps({"task_id": task_id, "worker": worker_name(), "size": size}).encode()
