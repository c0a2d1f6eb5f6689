"""One state vocabulary for tasks, workflow steps, durable runs and canvases: each word
means one thing wherever the CLI, its JSON, the dashboard or the Python API says it.

Not ended: `queued` (stored, waiting for a worker), `delayed` (its eta is to come), `held`
(by a flow-control limit), `running` (a worker runs it), `failed` (an attempt failed and a
retry is coming: a task's or a step's). A durable run also `sleeping` (only timers ahead),
`waiting` (for a signal) or `cancelling` (its code got the cancel and compensates); a
run's command not carried out yet is `pending`.

Ended: `succeeded`; `dead` (ended failed: a dead-lettered task or step, a run whose code
raised or timed out, a canvas with a dead task); `cancelled`; `dropped` (a throttled call
that never ran). A timer `fired`; a wait `received` its signal or `timed out`.

Earlier taskq versions wrote `failed` for a run or canvas that had ended failed: read back,
it is `dead` (`LEGACY_RUN`).
"""

from __future__ import annotations

SUCCEEDED, DEAD, CANCELLED, DROPPED = "succeeded", "dead", "cancelled", "dropped"
QUEUED = "queued"  # a record says so only of a requeued task, until its next run writes
RETRYING = "failed"  # an attempt failed, a retry is coming (a task's, a step's)

# a durable run's or canvas's summary, in the order `taskq workflows ls --state` lists them
RUN_STATES = ("running", "sleeping", "waiting", "cancelling", SUCCEEDED, DEAD, CANCELLED)
RUN_FINAL = frozenset({SUCCEEDED, DEAD, CANCELLED})
# a run's summary as earlier versions wrote it -> the state it means now
LEGACY_RUN = {"failed": DEAD}
