"""The history's windows as stored (docs/wire-format.md, "History"): per queue, per task name
and for all queues together, how many tasks succeeded, were dead-lettered and were retried in
one window of time, and a histogram of their attempts' run times to read percentiles from.

A window is one record of the `<PREFIX>_HISTORY` stream (one message per subject, each with
its own TTL): 10-second windows kept an hour, 5-minute windows kept a day. Workers merge
what they settled into a window with compare-and-set, so every worker's tasks land in the
same record and a window's storage does not grow with the workers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from taskq.records.clock import stamp

# the two resolutions: (window length, how long a window is kept), in seconds
FINE, FINE_KEPT = 10, 3600
COARSE, COARSE_KEPT = 300, 86400
RESOLUTIONS = {"f": (FINE, FINE_KEPT), "c": (COARSE, COARSE_KEPT)}
SPANS = {"1h": "f", "24h": "c"}  # what `history(span=...)` reads

# run times in bins four to a doubling from 100 µs (each within 9% of its middle), up to
# a day in 120 bins; a longer attempt counts in the last one
BASE, PER_DOUBLING, BINS = 1e-4, 4, 120
MAX_RECORD = 4096  # bytes a stored window may take (the stream refuses more; hostile)
COUNT_MAX = 2**53  # counts beyond this are not a worker's (JSON's exact integers)


def bin_of(seconds: float) -> int:
    """The histogram bin a run time of `seconds` counts in."""
    if not seconds > BASE:  # NaN and negatives too
        return 0
    return min(BINS - 1, int(math.log2(seconds / BASE) * PER_DOUBLING))


def bin_middle(index: int) -> float:
    """The run time a bin stands for: its geometric middle (bin 0: the base itself)."""
    if index <= 0:
        return BASE
    return BASE * 2 ** ((index + 0.5) / PER_DOUBLING)


@dataclass
class Window:
    """What happened in one window: counts by verdict and run times by bin."""

    start: int  # epoch seconds, a multiple of the window's length
    length: int  # seconds: FINE or COARSE
    succeeded: int = 0
    failed: int = 0  # dead-lettered
    retried: int = 0
    bins: dict[int, int] = field(default_factory=dict)

    def add(self, other: Window) -> None:
        """Count `other`'s tasks in this window too (merging two workers' counts)."""
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.retried += other.retried
        for index, count in other.bins.items():
            self.bins[index] = self.bins.get(index, 0) + count

    def ran(self, seconds: float) -> None:
        """Count one attempt's run time."""
        index = bin_of(seconds)
        self.bins[index] = self.bins.get(index, 0) + 1

    def percentile(self, fraction: float) -> float | None:
        """The run time `fraction` (0.5, 0.95, 0.99) of the attempts took at most, to within
        a bin (None: no attempt ran in the window)."""
        total = sum(self.bins.values())
        if total == 0:
            return None
        rank, seen = math.ceil(fraction * total), 0
        for index in sorted(self.bins):
            seen += self.bins[index]
            if seen >= rank:
                return round(bin_middle(index), 6)
        return round(bin_middle(max(self.bins)), 6)

    def encode(self) -> bytes:
        body = {
            "start": self.start,
            "len": self.length,
            "s": self.succeeded,
            "f": self.failed,
            "r": self.retried,
            "b": sorted(self.bins.items()),
        }
        return json.dumps(body, separators=(",", ":")).encode()

    def to_dict(self) -> dict[str, Any]:
        """The window as `/api/history` and `taskq history --json` give it."""
        return {
            "start": stamp(self.start),
            "seconds": self.length,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "retried": self.retried,
            "runtime_p50": self.percentile(0.5),
            "runtime_p95": self.percentile(0.95),
            "runtime_p99": self.percentile(0.99),
        }


def decode(data: bytes, length: int) -> Window | None:
    """A stored window of `length` seconds, or None when it is not one (written by a
    hostile or broken worker: too large, not JSON, counts out of range, bins out of range)."""
    if len(data) > MAX_RECORD:
        return None
    try:
        body = json.loads(data)
        window = Window(
            start=_count(body["start"]),
            length=_count(body["len"]),
            succeeded=_count(body["s"]),
            failed=_count(body["f"]),
            retried=_count(body["r"]),
            bins=_bins(body["b"]),
        )
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    if window.length != length or window.start % length:
        return None
    return window


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value < COUNT_MAX:
        raise ValueError(value)
    return value


def _bins(pairs: Any) -> dict[int, int]:
    if not isinstance(pairs, list) or len(pairs) > BINS:
        raise ValueError("bins")
    bins: dict[int, int] = {}
    for index, count in pairs:
        if _count(index) >= BINS:
            raise ValueError(index)
        bins[index] = bins.get(index, 0) + _count(count)
    return bins
