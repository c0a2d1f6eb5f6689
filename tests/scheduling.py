"""The order the suite's tests are handed out in, and which ones stay in one process.

The suite runs with pytest-xdist's `loadgroup`: a test is handed to a test process when one
is free, and the tests marked with one `xdist_group` all go to the same process, as one unit.
The tests on the shared local SparkSession (the `spark_session` fixture) form one group and
those on the Spark Connect server (`connect_server`) another: each fixture is a JVM of ~15 s
of CPU per test process that starts one (35 to 50 s under the suite's load), so they share one.
(With `worksteal` they stayed together only while no idle process stole them: under load
four processes started a SparkSession and two a Connect server.)

Units are handed out largest first (xdist's `--loadscope-reorder`), so the two groups start
at once; then the tests marked `heavy` (ten seconds or more under the suite's load: a
cluster, a guide run as written), so that none starts last and ends the run alone while the
other processes sit idle; then the rest in their collected order.
"""

from __future__ import annotations

import pytest

# the session-scoped fixtures whose tests stay together, one xdist group each
SHARED = ("spark_session", "connect_server")


def heavy_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` grouped and reordered: each SHARED fixture's tests marked as its group (heavy
    ones first within it), then the heavy tests, then the rest in collected order."""
    grouped: list[pytest.Item] = []
    for fixture in SHARED:
        group = [i for i in items if fixture in getattr(i, "fixturenames", ())]
        group = [i for i in group if i not in grouped]
        for item in group:
            item.add_marker(pytest.mark.xdist_group(fixture))
        grouped += sorted(group, key=lambda item: item.get_closest_marker("heavy") is None)
    rest = [i for i in items if i not in grouped]
    heavy = [i for i in rest if i.get_closest_marker("heavy")]
    return grouped + heavy + [i for i in rest if not i.get_closest_marker("heavy")]
