"""The line a worker logs for each settled task: `succeeded NAME[ID] attempt 1/4 in 0.012s`,
a retry with its error, a dead letter with its reason (and the fields `--log-format json`
writes for each, workers/logs.py)."""

from __future__ import annotations

import logging
import time

from taskq.operate.tracebacks import fold
from taskq.policy import Ack, Cancel, Dead, Decision, Failure, Nak, Outcome
from taskq.workers.job import Job
from taskq.workers.logs import BUFFERED, SETTLED, TRACE, write_direct

log = logging.getLogger("taskq.worker")


def log_settled(job: Job, decision: Decision, outcome: Outcome | None) -> None:
    """One line per settled task (successes at INFO, buffered; the rest at once); the caller
    checked that `log` takes it, so a worker that logs nothing runs none of this."""
    name = job.envelope.task if job.envelope else "?"
    tid = job.envelope.id if job.envelope else f"seq {job.delivery.seq}"
    took = time.monotonic() - job.started if job.started else 0.0
    attempts = job.task.policy.attempts if job.task else 0
    head = f"{name}[{tid}] attempt {job.attempt}/{attempts or '?'}"
    # the line's fields for `--log-format json` (workers/logs.py SETTLED_KEYS order)
    task = (name, tid, job.attempt, job.queue, took)
    if isinstance(decision, Ack):
        if not write_direct(log, f"succeeded {head} in {took:.3f}s"):
            done = {BUFFERED: True, SETTLED: (*task, "succeeded", "")}
            log.info("succeeded %s in %.3fs", head, took, extra=done)
    elif isinstance(decision, Cancel):
        ran = f" after {took:.3f}s" if took else " before it ran"
        log.warning("cancelled %s%s", head, ran, extra={SETTLED: (*task, "cancelled", "")})
    elif isinstance(decision, Nak):
        error = outcome.error if isinstance(outcome, Failure) else None
        retry: dict[str, object] = {SETTLED: (*task, "retried", "")}
        if logging.getLogger().isEnabledFor(logging.INFO):  # -v: where it failed, too
            retry[TRACE] = _trace(outcome)
        log.warning("retry %s in %.1fs: %r", head, decision.delay, error, extra=retry)
    elif isinstance(decision, Dead):
        dead = {SETTLED: (*task, "dead", decision.reason), TRACE: _trace(outcome)}
        why = _why(decision, outcome)
        log.error("dead-lettered %s (%s): %s", head, decision.reason, why, extra=dead)


def _trace(outcome: Outcome | None) -> str | None:
    """The attempt's traceback as a worker's log shows it: the user's frames first, taskq's
    folded into a line (the dead letter keeps them all: `taskq dlq show ID -v`)."""
    trace = outcome.traceback if isinstance(outcome, Failure) else ""
    if not trace:
        return None
    folded = fold(trace)
    if folded is None:
        return trace.rstrip()
    return "\n".join(folded.text_lines("taskq dlq show ID -v shows them", lead=False))


def _why(decision: Dead, outcome: Outcome | None) -> str:
    if isinstance(outcome, Failure):
        return f"{type(outcome.error).__name__}: {outcome.error}"
    return decision.detail
