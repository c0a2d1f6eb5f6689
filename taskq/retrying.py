"""The one retry mechanism for transient NATS failures (elections, reconnects, timeouts).

tenacity, used as designed: `retry_transient` retries a call that raised TransientError with
exponential backoff and jitter until a deadline. Safe for publishes because every task
message carries a `Nats-Msg-Id`: a retry of a publish the server did store is dropped by its
dedup window (docs/operations.md, clusters). `patiently` is the same helper with the short
deadline that idempotent reads use to ride out a leader election (up to ~20 s in a cluster
after a node dies).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

from taskq.errors import TransientError

T = TypeVar("T")
log = logging.getLogger("taskq")

# seconds a read keeps trying through a leader election: a nats-server follower waits 4-9 s
# (raft.go's election timeout) for a lost leader before it campaigns, and a split vote takes
# another round; 8 s did not cover one worst-case timeout, and a loaded 3-node cluster
# whose meta leader was killed had none for 12 s (a DLQ listing failed on it)
ELECTION = 20.0


async def retry_transient(
    call: Callable[[], Awaitable[T]],
    *,
    deadline: float = 60.0,
    what: str = "request",
    level: int = logging.WARNING,
    also: tuple[type[Exception], ...] = (),
) -> T:
    """Await `call()`, retrying TransientError (and the errors in `also`) with backoff
    until `deadline` seconds pass."""
    retried: tuple[type[Exception], ...] = (TransientError, *also)
    try:  # fast path: no retry machinery unless something actually failed
        return await call()
    except retried as exc:
        log.log(level, "%s failed (%s), retrying", what, exc)
    retrying = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(retried),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=2.0, jitter=0.2),
        stop=tenacity.stop_after_delay(deadline),
        reraise=True,
        before_sleep=lambda state: log.log(
            level,
            "%s failed (%s), retrying",
            what,
            state.outcome.exception() if state.outcome else "?",
        ),
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """An idempotent read, retried through a leader election (bounded, ~20 s, quietly)."""
    return await retry_transient(call, deadline=ELECTION, what="read", level=logging.DEBUG)
