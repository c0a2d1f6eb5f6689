"""Every delay the engine waits out, in one place: `Settings.timings`.

The defaults are production's. A test suite shortens them (`App(timings=Timings.short())`)
rather than waiting real seconds for a hand-back or a redelivered decision; so does
`taskq.testing`. The worker's heartbeat interval is `Settings.heartbeat` (TASKQ_HEARTBEAT),
and a task's own `ack_wait`, `backoff` and `timeout` are its options.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Timings(BaseModel):
    """Seconds the engine waits, each for one reason (docs/operations.md, "Timings")."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    # a task no worker of its queue knows comes back after this (up to twice it, jittered),
    # until `unknown_task_grace` has passed: a rolling deploy's new worker takes it
    unknown_again: float = Field(default=5.0, gt=0)
    # a message whose handling failed on taskq's side (a transient NATS error, a verdict
    # half written, a dead letter not written) is handed back to come again after this
    failed_again: float = Field(default=5.0, gt=0)
    # a task (or a rate-limited start, a debounced burst, a run's next decision) due within
    # this waits in the worker; one due later is held as a server-side schedule
    in_worker_wait: float = Field(default=2.0, gt=0)
    # a durable run's decision is handed to another worker this long after its worker died
    decision_ack_wait: float = Field(default=5.0, gt=0)
    # a priority level's pull request waits this long for more before its loop ends
    level_linger: float = Field(default=0.25, gt=0)
    # between passes of the janitor of journal subjects no run started (taskq.workflows.janitor)
    janitor_every: float = Field(default=600.0, gt=0)
    # between two reconnect attempts to a server that went away
    reconnect_wait: float = Field(default=0.5, gt=0)
    # a worker's loop that failed (a fetch, a timer move) tries again after this
    loop_retry: float = Field(default=0.5, gt=0)
    # a worker adds what it settled to the history's windows this often (taskq.records.history)
    history_every: float = Field(default=10.0, gt=0)

    @classmethod
    def short(cls) -> Timings:
        """Timings for a test suite: the same behaviour, in a fraction of the time (a
        schedule fires to the second, so `in_worker_wait` stays above one second)."""
        return cls(
            unknown_again=0.2,
            failed_again=0.2,
            in_worker_wait=1.2,
            decision_ack_wait=1.0,
            level_linger=0.05,
            janitor_every=5.0,
            reconnect_wait=0.1,
            loop_retry=0.1,
            history_every=0.5,
        )
