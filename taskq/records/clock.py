"""How every record writes and reads a time: RFC 3339 UTC with milliseconds and a `Z`, as on
the wire (docs/wire-format.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

# seconds in one duration unit, as written in `30s`, `15m`, `2h`, `7d` (CLI durations,
# `@every` schedules and rate limits each accept the units their syntax allows)
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def now_iso() -> str:
    """The current UTC time as RFC 3339 with a `Z`, as used on the wire."""
    return format_epoch(time.time())


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def format_epoch(seconds: float) -> str:
    """`format_time` of a `time.time()` value, at a fraction of its cost: the whole second
    is formatted once per second (the settle path stamps every record)."""
    global _second
    whole, micros = divmod(round(seconds * 1_000_000), 1_000_000)  # as datetime rounds it
    if whole != _second[0]:
        _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{_second[1]}.{micros // 1000:03d}Z"


def format_time(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def stamp(seconds: float) -> str:
    """A wall-clock time (`time.time()`) as written in records."""
    return format_epoch(seconds)
