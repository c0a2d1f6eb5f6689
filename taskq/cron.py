"""When a message schedule fires next, from its `Nats-Schedule` expression: `@at <time>`,
`@every <n>s|m|h`, a 6-field cron (seconds first) or a shorthand such as `@hourly`.

As nats-server 2.15.1 evaluates them (measured): cron fields match in UTC, and `@every N`
fires on whole seconds, N seconds after the second following the moment the schedule was
stored, then every N seconds (stored at :23.6, `@every 3s` fired at :27, :30, :33).
Day of month and day of week combine as in robfig/cron: when both are restricted, either
may match; otherwise both must.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from taskq.envelope import parse_time
from taskq.errors import ConfigError

SHORTHANDS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_EVERY = re.compile(r"^@every (\d+)(s|m|h)$")
_UNIT = {"s": 1, "m": 60, "h": 3600}
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# (lowest, highest, names from `lowest` on) of: second, minute, hour, day, month, weekday
_FIELDS: tuple[tuple[int, int, list[str]], ...] = (
    (0, 59, []),
    (0, 59, []),
    (0, 23, []),
    (1, 31, []),
    (1, 12, _MONTHS),
    (0, 7, _DAYS),
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
    any_day: bool  # the day-of-month field is `*` or `?`
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

    def _day_matches(self, t: datetime) -> bool:
        in_month = t.day in self.days
        in_week = (t.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week


def parse_cron(text: str) -> Cron:
    """A 6-field cron expression (or a shorthand); ConfigError says what is wrong."""
    fields = SHORTHANDS.get(text.strip(), text).split()
    if len(fields) != 6:
        raise ConfigError(f"cron {text!r} must have 6 fields, seconds first")
    values = [_field(f, *spec) for f, spec in zip(fields, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in values[5])  # 7 is Sunday too
    seconds, minutes, hours, days, months = values[:5]
    return Cron(
        seconds,
        minutes,
        hours,
        days,
        months,
        weekdays=weekdays,
        any_day=fields[3] in ("*", "?"),
        any_weekday=fields[5] in ("*", "?"),
    )


def _field(text: str, low: int, high: int, names: list[str]) -> frozenset[int]:
    found: set[int] = set()
    for part in text.upper().split(","):
        base, slash, step_text = part.partition("/")
        step = _number(step_text, names, low) if slash else 1
        if base in ("*", "?"):
            first, last = low, high
        elif "-" in base:
            start, _, stop = base.partition("-")
            first, last = _number(start, names, low), _number(stop, names, low)
        else:
            first = _number(base, names, low)
            last = high if slash else first
        if not (low <= first <= last <= high) or step < 1:
            raise ConfigError(f"cron field {text!r}: {part!r} is outside {low}-{high}")
        found.update(range(first, last + 1, step))
    return frozenset(found)


def _number(text: str, names: list[str], low: int) -> int:
    if text in names:
        return names.index(text) + low
    if not text.isdigit():
        raise ConfigError(f"cron value {text!r} is not a number")
    return int(text)


def next_fire(expression: str, stored_at: datetime, now: datetime) -> datetime | None:
    """When the schedule `expression`, stored at `stored_at`, fires next after `now`
    (an `@at` schedule: its time, even if it is already due); None if it never will."""
    if expression.startswith("@at "):
        return parse_time(expression[4:].strip())
    every = _EVERY.match(expression)
    if every is not None:
        interval = int(every.group(1)) * _UNIT[every.group(2)]
        base = math.ceil(stored_at.timestamp())
        passed = max(0, math.floor((now.timestamp() - base) / interval))
        return datetime.fromtimestamp(base + (passed + 1) * interval, UTC)
    return parse_cron(expression).after(now)
