"""The time the engine reads: the wall clock, moved ahead by what a time-skipping test
skipped (`taskq.testing.worker(app, time_skipping=True)`, docs/testing.md).

Each reading of "now" that decides when something is due — a delayed task's `eta`, a
durable timer, a wait's timeout, a retry's backoff, a rate-limit window, a periodic run's
lateness, what `wf.now()` and `taskq.current().now()` say — goes through the App's Clock
(`app.clock`, shared by its Clients), so a test can move time forward instead of waiting
for it. Nothing skips in production: `time()` is `time.time()` plus zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime


class Clock:
    """Wall-clock time plus the seconds skipped so far (only ever forward)."""

    __slots__ = ("skipped", "skipping", "time")

    def __init__(self) -> None:
        self.skipped = 0.0
        # True while a time-skipping test runs: a retry's backoff is then held as a
        # schedule the test can fire, not a redelivery delay only the server can end
        self.skipping = False
        # now, in epoch seconds: `time.time` itself until something is skipped (a task's
        # path reads it per delivery), then the wall clock plus what was skipped
        self.time: Callable[[], float] = time.time

    def _skipped_time(self) -> float:
        return time.time() + self.skipped

    def now(self) -> datetime:
        """Now, as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time(), UTC)

    def skip_to(self, moment: float) -> float:
        """Move now forward to `moment` (epoch seconds); the seconds skipped (0 when it is
        not in the future: time never goes back)."""
        ahead = moment - self.time()
        if ahead <= 0:
            return 0.0
        self.skipped += ahead
        self.time = self._skipped_time
        return ahead

    def reset(self) -> None:
        """Back to the wall clock, nothing skipped."""
        self.skipped, self.skipping, self.time = 0.0, False, time.time
