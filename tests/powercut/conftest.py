"""Power-cut fixtures: FUSE installed before the tests run, rigs always unmounted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.powercut.mount import ensure_fuse
from tests.powercut.rig import Rig, cluster_rig, single_rig
from tests.system_packages import Prerequisite

FUSE = Prerequisite("rig", ensure_fuse, "power-cut tests need FUSE")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    FUSE.collected(items)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Callable[..., Awaitable[Rig]]]:
    """Make a rig: `await rig("single" | "cluster", sync=None | "always")`. The test FAILS
    (never skips) without FUSE; every mount is unmounted afterwards, whatever happened."""
    FUSE.require()
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
