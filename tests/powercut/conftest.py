"""Power-cut fixtures: FUSE installed before the tests run, rigs always unmounted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.powercut.mount import FuseUnavailable, ensure_fuse
from tests.powercut.rig import Rig, cluster_rig, single_rig

PROBLEM: list[str] = []  # why FUSE is unavailable, once known


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Install fuse3 before any test runs when a power-cut test was collected: outside
    every test's timeout (apt-get can take a while on a fresh machine)."""
    wanted = any("rig" in getattr(item, "fixturenames", ()) for item in items)
    if wanted and not PROBLEM:
        try:
            ensure_fuse()
        except FuseUnavailable as exc:
            PROBLEM.append(str(exc))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Callable[..., Awaitable[Rig]]]:
    """Make a rig: `await rig("single" | "cluster", sync=None | "always")`. The test FAILS
    (never skips) without FUSE; every mount is unmounted afterwards, whatever happened."""
    if PROBLEM:
        pytest.fail(f"power-cut tests need FUSE: {PROBLEM[0]}", pytrace=False)
    made: list[Rig] = []

    async def make(kind: str, sync: str | None) -> Rig:
        root = tmp_path / f"{kind}-{len(made)}"
        build = single_rig if kind == "single" else cluster_rig
        made.append(build(root, sync))
        await made[-1].ready()
        return made[-1]

    yield make
    for each in made:
        each.close()
