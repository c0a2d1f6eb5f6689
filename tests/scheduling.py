"""The order the suite's tests are handed out in: the heavy ones first, one share each.

pytest-xdist's `worksteal` gives each of the N test processes a contiguous share of the
collected tests and lets an idle one steal the second half of the busiest one's queue. A
test marked `heavy` (one that runs for ten seconds or more under the suite's load: a Spark
job, a cluster, a guide run as written) left where it was collected may start last and end
the run alone while the other processes sit idle; put at the head of a share, it runs
first, beside the other shares' heavy ones, and the short tests fill in around it.

The tests on the shared local SparkSession (the `spark_session` fixture) all head the first
share, and those on the Spark Connect server (`connect_server`) the second: each is a JVM of
~15 s of CPU per test process that starts one, so they share one instead of starting one in
each process the heavy ones were spread to.
"""

from __future__ import annotations

import pytest

# the session-scoped fixtures whose tests stay together, each group heading its own share
SHARED = ("spark_session", "connect_server")


def heavy_first(items: list[pytest.Item], processes: int) -> list[pytest.Item]:
    """`items` reordered so that the first shares (as worksteal cuts them) begin each with
    one SHARED fixture's tests, and the others with their round-robin part of the heavy
    tests; the rest keep their collected order."""
    if processes < 1:
        return items
    heads: list[list[pytest.Item]] = [[] for _ in range(processes)]
    placed: set[int] = set()
    for n, fixture in enumerate(SHARED):
        group = [
            i for i in items if fixture in getattr(i, "fixturenames", ()) and id(i) not in placed
        ]
        placed.update(id(i) for i in group)
        heavy_first_group = sorted(group, key=lambda item: item.get_closest_marker("heavy") is None)
        heads[n % processes] += heavy_first_group
    heavy = [i for i in items if i.get_closest_marker("heavy") and id(i) not in placed]
    light = iter([i for i in items if id(i) not in placed and i not in heavy])
    spread = list(range(len(SHARED), processes)) or [0]
    for n, item in enumerate(heavy):
        heads[spread[n % len(spread)]].append(item)
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for share, head in enumerate(heads):
        size = remaining // (processes - share)  # how worksteal sizes each share
        remaining -= size
        ordered += head + [next(light) for _ in range(max(0, size - len(head)))]
    return ordered + list(light)
