"""Spark Connect (`sc://`): the session a worker opens on a Connect server, how it tells a
lost session from a failed job, and a batch run through the DataFrame API Connect offers.

Measured with PySpark 4.3 against a server started from its own `sbin/` (docs/spark.md):
after the server restarts, a client session is closed for good (`NO_ACTIVE_SESSION`,
`INVALID_HANDLE.SESSION_CHANGED`), so a new one must be made; PySpark's default retry
policy waits up to 10 minutes for an unreachable server, ours gives up after ~10 s and lets
the task's retries wait instead; `interruptTag` cancels tagged operations from any thread.
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import re
from collections.abc import Callable
from typing import Any

from taskq.workers.spark import items as spark_items
from taskq.workers.spark.batcher import Call

# PySpark's own retry policy, bounded: 5 retries from 50 ms by x4, at most 5 s apart
RETRIES, FIRST_MS, FACTOR, LONGEST_MS = 5, 50, 4.0, 5000
# the session is gone (server restarted, session released): a new one is needed; a query
# whose stream broke and whose reattach found its operation gone on the server (it
# restarted) says RESPONSE_ALREADY_RECEIVED
LOST_CLASSES = (
    "INVALID_HANDLE.",
    "NO_ACTIVE_SESSION",
    "NO_ACTIVE_OR_DEFAULT_SESSION",
    "RESPONSE_ALREADY_RECEIVED",
)
LOST_STATUS = {"UNAVAILABLE"}  # gRPC: the server did not answer
SCHEMA_IN = "index long, call binary"
SCHEMA_OUT = "index long, ok boolean, payload binary"
# set by PySpark in a process that opened a Connect session: a classic one is refused after
MODE = "SPARK_CONNECT_MODE_ENABLED"
PROBE_ROWS = 1 << 16  # a range this long is split into the cluster's default parallelism


def build(master: str, conf: dict[str, str]) -> Any:
    """A new Connect session on `master` (never a cached one: a cached session may be the
    closed one of a server that restarted), with the bounded retry policy."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    builder = SparkSession.builder.remote(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.create()
    policy = DefaultPolicy(
        max_retries=RETRIES,
        initial_backoff=FIRST_MS,
        backoff_multiplier=FACTOR,
        max_backoff=LONGEST_MS,
    )
    session.client.set_retry_policies([policy])
    return session


def stopped(session: Any) -> bool:
    """Whether `session` was stopped (a Connect session says so; a classic one never does)."""
    return bool(getattr(session, "is_stopped", False))


def is_lost(session: Any, exc: BaseException) -> bool:
    """Whether `exc` means the session cannot be used again (rather than a failed job)."""
    if stopped(session):
        return True
    for error in _chain(exc):
        status = getattr(error, "getGrpcStatusCode", None)
        if status is not None and getattr(status(), "name", "") in LOST_STATUS:
            return True
        condition = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
        name = condition() if condition is not None else None
        if isinstance(name, str) and name.startswith(LOST_CLASSES):
            return True
    return False


def close(session: Any) -> None:
    """Close a lost session's channel. The thread running this holds the session until it
    returns, so its `__del__` (another close) never runs on the event loop meanwhile."""
    with contextlib.suppress(Exception):
        session.client.close()


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def shown(master: str) -> str:
    """`master` fit for logs and errors: a `token=` parameter is replaced by `***`."""
    return re.sub(r"(?i)(;token=)[^;]*", r"\1***", master)


def parallelism(session: Any) -> int:
    """How many partitions a batch is split into: the cluster's default parallelism, learned
    from how Spark splits a range (Connect has no SparkContext to ask)."""
    from pyspark.sql.functions import spark_partition_id

    ids = session.range(PROBE_ROWS).select(spark_partition_id().alias("p")).distinct()
    return max(1, int(ids.count()))


def collect_frames(
    session: Any, fn: Callable[..., Any], calls: list[Call], parts: int
) -> list[Any]:
    """One Spark job over the batch through `mapInArrow`: each call pickled into a row, the
    rows spread over `parts` partitions, an outcome per item back (as `run_partition`'s)."""
    from pyspark import cloudpickle

    rows = [(i, cloudpickle.dumps(call)) for i, call in enumerate(calls)]
    frame = session.createDataFrame(rows, SCHEMA_IN).repartition(parts)
    run = functools.partial(spark_items.run_batches, fn)
    return [_reported(row) for row in frame.mapInArrow(run, SCHEMA_OUT).collect()]


def _reported(row: Any) -> tuple[int, bool, Any]:
    index, ok, payload = row[0], row[1], row[2]
    # a failure's payload is a pickled tuple of plain values (see items.run_batches)
    return int(index), bool(ok), bytes(payload) if ok else pickle.loads(payload)
