"""Handing a running task back when its worker stops past its grace period, at no cost.

A plain NAK would cost the task an attempt (the server counts every delivery, and the
attempt number is that count): a task with one attempt left would be dead-lettered as
`crashed` on its next delivery without ever failing. Instead the worker records the
interrupted attempt (state `interrupted`, so `taskq task ID` lists it), publishes a copy of
the message to the same subject carrying `Taskq-Attempts-Spent` = the attempts before this
one (the copy's run is this attempt again), then acknowledges the delivery. The copy's
`Nats-Msg-Id` is `<id>:interrupted:<stream>:<seq>:<delivery>`, so a retried publish makes
one copy. A worker killed between the copy and the ack leaves both (the delivery returns
after its lease): at least once, as any crash. Anything that fails on the way falls back
to the NAK.
"""

from __future__ import annotations

import contextlib
import logging

from taskq.client import Client
from taskq.errors import TaskqError
from taskq.flowcontrol.held import PARK, SPENT, carried, dropped_told
from taskq.ids import safe_id
from taskq.records.envelope import MSG_ID
from taskq.records.results import encoded, store_encoded
from taskq.workers.job import Job
from taskq.workers.writes import interrupted_fields

log = logging.getLogger("taskq.worker")


async def hand_back(client: Client, job: Job) -> None:
    """Return an interrupted delivery's task to its queue without spending an attempt
    (falling back to a NAK, which does spend one)."""
    d = job.delivery
    try:
        if job.envelope is None or job.task is None:  # not yet judged: nothing ran
            raise LookupError("no task to hand back")
        task_id = job.envelope.id
        if job.context is not None:  # its attempt had started: the story lists it
            await store_encoded(client, task_id, encoded(interrupted_fields(job)))
        # a parked task's token stays with the original: the copy runs in its place
        kept = carried(d.raw_headers, dropped_told(client))
        headers = {k: v for k, v in kept.items() if k != PARK}
        headers[SPENT] = str(job.attempt - 1)
        headers[MSG_ID] = f"{safe_id(task_id)}:interrupted:{d.stream}:{d.seq}:{d.num_delivered}"
        await client.connection.publish(d.subject, d.data, headers)
        await d.ack()
    except (TaskqError, LookupError) as exc:
        log.warning("handing back seq %s with a NAK (it spends an attempt): %s", d.seq, exc)
        with contextlib.suppress(Exception):
            await d.nak()
