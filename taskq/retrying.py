"""Retrying of transient NATS failures (elections, reconnects, timeouts) with tenacity.

Safe for publishes because every task message carries a `Nats-Msg-Id`: a retry of a publish
the server did store is dropped by its dedup window (DESIGN §3, cluster facts).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

from taskq.errors import TransientError

T = TypeVar("T")
log = logging.getLogger("taskq")


async def retry_transient(
    call: Callable[[], Awaitable[T]], *, deadline: float = 60.0, what: str = "request"
) -> T:
    """Await `call()`, retrying TransientError with backoff until `deadline` seconds pass."""
    try:  # fast path: no retry machinery unless something actually failed
        return await call()
    except TransientError as exc:
        log.warning("%s failed (%s), retrying", what, exc)
    retrying = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(TransientError),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=2.0, jitter=0.2),
        stop=tenacity.stop_after_delay(deadline),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "%s failed (%s), retrying", what, state.outcome.exception() if state.outcome else "?"
        ),
    )
    async for attempt in retrying:
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover
