"""Cron expressions as nats-server reads them, and when a message schedule fires next,
from its `Nats-Schedule` expression: `@at <time>`, `@every <n>s|m|h`, a 6-field cron
(seconds first) or a shorthand such as `@hourly`.

The parser follows nats-server 2.15.1's (server/cron.go, after robfig/cron), so a cron
taskq accepts is one the server stores, and one it refuses is refused at declaration with
what is wrong, never as a server error (measured against the server in
tests/test_cron.py). Fields are separated by any white space; a field is a comma list of
`*` or `?`, `N`, `N-M`, each optionally `/STEP` (`N/STEP` runs from N to the field's
maximum); months and weekdays also take names (`jan`, `MON`, any case). Ranges:
seconds and minutes 0-59, hours 0-23, day 1-31, month 1-12, weekday 0-6 (0 is Sunday;
7 is refused, as the server does). Refused besides: a step of 0, a range running
backwards, an empty field (`,`), and a day that never comes (`31 2`, February 30 or 31,
April 31...: the server refuses a schedule with no time to fire within five years; 29
February is a day). One choice of taskq's own: `*-5` (the server reads it as `*`,
ignoring the `-5`) is refused as surely a mistake.

Day of month and day of week combine as in robfig/cron: when both are restricted, either
may match; when either is `*` or `?` (also `*/1`, not `*/2`), both must.

As nats-server evaluates schedules (measured): cron fields match in UTC, and `@every N`
fires on whole seconds, N seconds after the second following the moment the schedule was
stored, then every N seconds (stored at :23.6, `@every 3s` fired at :27, :30, :33).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from taskq.errors import ConfigError
from taskq.records.clock import SECONDS, parse_time

SHORTHANDS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_EVERY = re.compile(r"^@every (\d+)(s|m|h)$")
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# (field, lowest, highest, names from `lowest` on), in the expression's order
_FIELDS: tuple[tuple[str, int, int, list[str]], ...] = (
    ("second", 0, 59, []),
    ("minute", 0, 59, []),
    ("hour", 0, 23, []),
    ("day", 1, 31, []),
    ("month", 1, 12, _MONTHS),
    ("weekday", 0, 6, _DAYS),
)
HORIZON = timedelta(days=5 * 366)  # a cron matching no day within it never fires


@dataclass(frozen=True)
class Cron:
    """A parsed 6-field cron expression: the values each field matches."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # the day-of-month field has the server's star bit (`*`, `?`, `*/1`)
    any_weekday: bool

    def after(self, moment: datetime) -> datetime | None:
        """The first whole second after `moment` the expression matches (UTC)."""
        t = moment.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
        end = t + HORIZON
        while t < end:
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0, second=0) + timedelta(days=32)).replace(
                    day=1
                )
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0, second=0) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0, second=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t = t.replace(second=0) + timedelta(minutes=1)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return t
        return None

    def before(self, moment: datetime) -> datetime | None:
        """The last whole second before `moment` the expression matches (UTC)."""
        t = moment.astimezone(UTC)
        t = t.replace(microsecond=0) - timedelta(seconds=0 if t.microsecond else 1)
        end = t - HORIZON
        second = timedelta(seconds=1)
        while t > end:
            if t.month not in self.months:
                t = t.replace(day=1, hour=0, minute=0, second=0) - second
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0, second=0) - second
            elif t.hour not in self.hours:
                t = t.replace(minute=0, second=0) - second
            elif t.minute not in self.minutes:
                t = t.replace(second=0) - second
            elif t.second not in self.seconds:
                t -= second
            else:
                return t
        return None

    def _day_matches(self, t: datetime) -> bool:
        in_month = t.day in self.days
        in_week = (t.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week


def parse_cron(text: str) -> Cron:
    """A 6-field cron expression (or a shorthand) as nats-server reads it; ConfigError
    says what is wrong with one the server would refuse (module docstring)."""
    stripped = text.strip()
    if stripped.startswith("@"):
        if stripped not in SHORTHANDS:
            known = ", ".join(SHORTHANDS)
            raise ConfigError(f"cron {text!r}: unknown shorthand (known: {known})")
        stripped = SHORTHANDS[stripped]
    fields = stripped.split()
    if len(fields) != 6:
        raise ConfigError(
            f"cron {text!r} must have 6 fields, seconds first (e.g. '0 */5 * * * *'), "
            f"not {len(fields)}"
        )
    parsed = [_field(text, f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
    (seconds, _), (minutes, _), (hours, _), (days, any_day), (months, _), (weekdays, any_week) = (
        parsed
    )
    cron = Cron(seconds, minutes, hours, days, months, weekdays, any_day, any_week)
    if not _comes(cron):
        raise ConfigError(f"cron {text!r} names a day that never comes (such as 30 February)")
    return cron


def _comes(cron: Cron) -> bool:
    """Whether some date matches: when both day fields must match and the weekday is any,
    a (day, month) pair must exist in the calendar (29 February does)."""
    if cron.any_day or not cron.any_weekday:
        return True  # any day will do, or (both restricted) a weekday alone may match
    return any(day <= _LONGEST[month] for month in cron.months for day in cron.days)


_LONGEST = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


def _field(
    text: str, field: str, name: str, low: int, high: int, names: list[str]
) -> tuple[frozenset[int], bool]:
    """The values one field matches, and whether it has the server's star bit."""
    found: set[int] = set()
    star = False
    for part in (p for p in field.lower().split(",") if p):  # empty parts are skipped
        try:
            values, part_star = _range(part, low, high, names)
        except ValueError as exc:
            raise ConfigError(f"cron {text!r}: {name} {part!r} {exc}") from None
        found.update(values)
        star = star or part_star
    if not found:
        raise ConfigError(f"cron {text!r}: {name} field {field!r} matches nothing")
    return frozenset(found), star


def _range(part: str, low: int, high: int, names: list[str]) -> tuple[range, bool]:
    """`*`, `N`, `N-M`, each with an optional `/STEP`: its values, and its star bit;
    ValueError says what is wrong."""
    span, *steps = part.split("/")
    bounds = span.split("-")
    if len(steps) > 1 or len(bounds) > 2:
        raise ValueError("has too many '/' or '-'")
    star = bounds[0] in ("*", "?")
    if star and len(bounds) > 1:
        raise ValueError("is not a range: a range starts with a number, not '*'")
    first = low if star else _number(bounds[0], names, low)
    last = high if star else _number(bounds[-1], names, low)
    step = 1
    if steps:
        step = _number(steps[0], [], low)
        last = high if len(bounds) == 1 else last  # `N/STEP` runs to the field's maximum
        star = star and step <= 1
    if not low <= first <= high or not low <= last <= high:
        raise ValueError(f"is outside {low}-{high}")
    if first > last:
        raise ValueError("runs backwards")
    if step < 1:
        raise ValueError("has a step of 0")
    return range(first, last + 1, step), star


def _number(value: str, names: list[str], low: int) -> int:
    if value in names:
        return names.index(value) + low
    if not _DIGITS.fullmatch(value) or int(value) > 2**63 - 1:  # as Go's strconv.Atoi
        raise ValueError(f"has {value!r}, which is not a number" + (" or a name" if names else ""))
    return int(value)


_DIGITS = re.compile(r"\+?[0-9]+")


def every_seconds(expression: str) -> int | None:
    """The interval of an `@every <n>s|m|h` expression in seconds (None: not one)."""
    every = _EVERY.match(expression)
    return None if every is None else int(every.group(1)) * SECONDS[every.group(2)]


def next_fire(expression: str, stored_at: datetime, now: datetime) -> datetime | None:
    """When the schedule `expression`, stored at `stored_at`, fires next after `now`
    (an `@at` schedule: its time, even if it is already due); None if it never will."""
    if expression.startswith("@at "):
        return parse_time(expression[4:].strip())
    interval = every_seconds(expression)
    if interval is not None:
        base = math.ceil(stored_at.timestamp())
        passed = max(0, math.floor((now.timestamp() - base) / interval))
        return datetime.fromtimestamp(base + (passed + 1) * interval, UTC)
    return parse_cron(expression).after(now)
