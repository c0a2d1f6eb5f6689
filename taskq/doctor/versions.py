"""Which nats-server releases taskq accepts: a floor below which releases lose acknowledged
messages through known JetStream bugs, and later fixes that make a release line worth
leaving. The evidence is in docs/operations.md ("Before going live: taskq doctor"): each bug
is named by its nats-server pull request and the first release of each line that has the
fix, read from the nats-server repository's tags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from taskq.doctor.report import Check, fail, ok, warn


class Version(NamedTuple):
    """A nats-server version; a pre-release (`-RC.1`, `-dev`) sorts before its release."""

    major: int
    minor: int
    patch: int
    final: int = 1

    @property
    def line(self) -> tuple[int, int]:
        return self.major, self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + ("" if self.final else "-pre")


_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(-\S+)?$")


def parse_version(text: str) -> Version | None:
    """`2.15.1` (or `v2.15.1`, `2.12.3-RC.1`) as a Version; None when it is not one."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    major, minor, patch, suffix = match.groups()
    return Version(int(major), int(minor), int(patch), 0 if suffix else 1)


@dataclass(frozen=True)
class KnownBug:
    """A JetStream bug that loses acknowledged messages. `fixed_in` is the first release of
    each line that has the fix, oldest line first; the last is the main line's, which every
    later line inherits."""

    ref: str
    what: str
    fixed_in: tuple[Version, ...]

    def affects(self, version: Version) -> bool:
        on_its_line = any(f.line == version.line and version >= f for f in self.fixed_in)
        return not on_its_line and version < self.fixed_in[-1]


# The first release taskq's streams work on: message schedules and counters are 2.12's.
REQUIRED = Version(2, 12, 0)

# Below the floor, refuse: replicated streams could lose acknowledged writes.
FLOOR_BUG = KnownBug(
    "nats-server#7594",
    "SyncBlocks may lose pending writes: on a replicated stream, a server process paused past "
    "its sync interval could lose messages it had acknowledged (process pauses in Jepsen's "
    "NATS 2.12.1 analysis)",
    (Version(2, 11, 12), Version(2, 12, 3), Version(2, 14, 0)),
)
FLOOR = Version(2, 12, 3)

# At or above the floor, a fix these releases lack: warn.
LATER_FIXES = (
    KnownBug(
        "nats-server#8475",
        "inline block compaction ignored sync_interval: always, so a block rewritten after "
        "deletes (every ack in a work queue deletes) was not fsynced and a power cut could "
        "lose acknowledged tasks",
        (Version(2, 15, 0),),
    ),
)


def judge_versions(seen: dict[str, str]) -> Check:
    """The version check over every reachable server (`seen`: server -> its version)."""
    if not seen:
        return warn("version", "no server's version could be read", "see the servers check")
    verdicts = [_judge(server, text) for server, text in sorted(seen.items())]
    for status in ("fail", "warn"):
        found = [v for v in verdicts if v.status == status]
        if found:
            return found[0]
    listed = ", ".join(f"{text} on {server}" for server, text in sorted(seen.items()))
    return ok("version", f"nats-server {listed}: no known data-loss bug")


def _judge(server: str, text: str) -> Check:
    version = parse_version(text)
    upgrade = f"upgrade {server} to nats-server {LATER_FIXES[-1].fixed_in[-1]} or later"
    if version is None:
        return warn(
            "version", f"{server} reports version {text!r}, which taskq cannot read", upgrade
        )
    if version < REQUIRED:
        return fail(
            "version",
            f"{server} runs nats-server {text}; taskq needs {REQUIRED} or later "
            "(message schedules, counters)",
            upgrade,
        )
    if version < FLOOR:
        return fail("version", f"{server} runs nats-server {text}: {_bug(FLOOR_BUG)}", upgrade)
    for bug in LATER_FIXES:
        if bug.affects(version):
            return warn("version", f"{server} runs nats-server {text}: {_bug(bug)}", upgrade)
    return ok("version", f"{server} runs nats-server {text}")


def _bug(bug: KnownBug) -> str:
    fixed = ", ".join(str(v) for v in bug.fixed_in)
    return f"{bug.ref}, {bug.what} (fixed in {fixed})"
