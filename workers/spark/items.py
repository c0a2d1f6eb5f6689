"""What Spark runs on the executors for a batch task: the item function over one partition,
reporting each item's own outcome so that one bad item never fails the others.

This module is shipped to the executors by value (cloudpickle), so executors need neither
taskq nor its dependencies installed: it imports only the standard library, pyspark and
(over the DataFrame API) pyarrow, which Spark's SQL workers have.
Every value crossing back is pre-pickled per item, so an unpicklable result or error fails
that item alone instead of the whole partition (docs/spark.md: catch per item, inside the
partition function).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

Row = tuple[int, tuple[Any, ...], dict[str, Any]]
# (index, ok, pickled value) or (index, ok, (pickled error or None, type, message, traceback))
Reported = tuple[int, bool, Any]


def run_partition(fn: Callable[..., Any], rows: Iterable[Row]) -> Iterator[Reported]:
    """Call `fn` on every row of a partition; yield one outcome per row, never raise."""
    for index, args, kwargs in rows:
        try:
            yield index, True, _dumps(fn(*args, **kwargs))
        except Exception as exc:
            yield index, False, _error(exc, traceback.format_exc())


def run_batches(fn: Callable[..., Any], batches: Iterable[Any]) -> Iterator[Any]:
    """`mapInArrow`'s function for a batch over the DataFrame API (Spark Connect): Arrow
    record batches of (index, pickled call) in, of (index, ok, payload) out, where a
    failure's payload is its report pickled (plain values only)."""
    import pickle

    import pyarrow as pa

    for batch in batches:
        calls = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
        rows = ((index, *pickle.loads(call)) for index, call in calls)
        reported = list(run_partition(fn, rows))
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([index for index, _, _ in reported], pa.int64()),
                pa.array([ok for _, ok, _ in reported], pa.bool_()),
                pa.array([p if ok else pickle.dumps(p) for _, ok, p in reported], pa.binary()),
            ],
            names=["index", "ok", "payload"],
        )


def _error(exc: Exception, trace: str) -> tuple[bytes | None, str, str, str]:
    try:
        pickled: bytes | None = _dumps(exc)
    except Exception:  # e.g. an exception holding a lock or a socket
        pickled = None
    return pickled, type(exc).__qualname__, str(exc), trace


def _dumps(value: Any) -> bytes:
    from pyspark import cloudpickle  # what Spark itself pickles functions with

    return bytes(cloudpickle.dumps(value))
