"""The order the suite's tests are handed out in: the heavy ones first, one share each.

pytest-xdist's `worksteal` gives each of the N test processes a contiguous share of the
collected tests and lets an idle one steal the second half of the busiest one's queue. A
test marked `heavy` (one that runs for ten seconds or more under the suite's load: a Spark
job, a cluster, a guide run as written) left where it was collected may start last and end
the run alone while the other processes sit idle; put at the head of a share, it runs
first, beside the other shares' heavy ones, and the short tests fill in around it.
"""

from __future__ import annotations

import pytest


def heavy_first(items: list[pytest.Item], processes: int) -> list[pytest.Item]:
    """`items` reordered so that each of `processes` shares (as worksteal cuts them) begins
    with its round-robin part of the heavy tests; the rest keep their collected order."""
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if not heavy or processes < 1:
        return items
    light = iter([item for item in items if not item.get_closest_marker("heavy")])
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for share in range(processes):
        size = remaining // (processes - share)  # how worksteal sizes each share
        remaining -= size
        first = heavy[share::processes]
        ordered += first + [next(light) for _ in range(max(0, size - len(first)))]
    return ordered + list(light)
