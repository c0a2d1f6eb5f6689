"""The order the suite's tests are handed out in, and which ones stay in one process.

Tests are handed to a test process when it is free (xdist's load scheduling, by scope): each
test is its own unit, except the tests on one shared JVM, which form one unit run by one
process. The local SparkSession (the `spark_session` fixture) and the Spark Connect server
(`connect_server`) each cost ~15 s of CPU (35 to 50 s under the suite's load) in every test
process that starts one. (Under `worksteal` idle processes stole them from the process
holding the JVM: a fresh-clone run started four SparkSessions and two Connect servers; and
xdist's own `loadgroup` names groups through a pytest internal that pytest 9.2 no longer
reads, so it grouped nothing.) The units go out largest first, so the two groups start at
once, then the tests marked `heavy` (ten seconds or more under load: a cluster, a guide run
as written), so that none starts last and ends the run alone, then the rest module by
module, the first half of the modules alternated with the second half: neighbouring
modules tend to be alike (tests/security/ and the edge-site, flow and periodic modules wait
on real time; tests/workflows/ computes), and six processes on neighbouring modules left a
core idle for tens of seconds at a time.

The controller sees only test ids, so a group is named by the modules whose tests share its
fixture; collection checks that every test using the fixture lives in one of them.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# the session-scoped fixtures whose tests stay together, and the modules that hold them
SHARED = {
    "spark_session": ("tests/spark/test_spark.py", "tests/spark/test_pipeline.py"),
    "connect_server": ("tests/spark/test_connect.py",),
}
GROUP_OF = {module: fixture for fixture, modules in SHARED.items() for module in modules}


class SharedJvmScheduling(LoadScopeScheduling):
    """Load scheduling where each SHARED fixture's modules are one unit, every other test
    one unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return GROUP_OF.get(nodeid.split("::", 1)[0], nodeid)


def scheduler(config: pytest.Config, log: Any) -> SharedJvmScheduling:
    """The scheduler `pytest_xdist_make_scheduler` gives xdist."""
    return SharedJvmScheduling(config, log)


def heavy_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with the heavy tests first (within a group too), the rest in collected order;
    a test on a SHARED fixture outside its group's modules is a collection error."""
    for item in items:
        for fixture, modules in SHARED.items():
            module = item.nodeid.split("::", 1)[0]
            if fixture in getattr(item, "fixturenames", ()) and module not in modules:
                raise pytest.UsageError(
                    f"{item.nodeid} uses {fixture}: move it to {' or '.join(modules)} "
                    "(tests/scheduling.py keeps those in one process)"
                )
    heavy = [i for i in items if i.get_closest_marker("heavy")]
    return heavy + interleaved([i for i in items if not i.get_closest_marker("heavy")])


def interleaved(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` module by module (each module's tests together, in their order), the first
    half of the modules alternated with the second."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    blocks = list(modules.values())
    half = (len(blocks) + 1) // 2
    pairs = itertools.zip_longest(blocks[:half], blocks[half:], fillvalue=[])
    return [item for pair in pairs for block in pair for item in block]
