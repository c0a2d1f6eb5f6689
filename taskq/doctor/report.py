"""One line of `taskq doctor`'s report: a check, its status, what was found, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """The outcome of one check: `fix` says in one line what to change (None when ok)."""

    check: str
    status: Status
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"check": self.check, "status": self.status, "detail": self.detail, "fix": self.fix}

    def line(self) -> str:
        """The check as people read it: `warn  sync         detail  fix: ...`."""
        text = f"{self.status:4}  {self.check:11}  {self.detail}"
        return f"{text}  fix: {self.fix}" if self.fix else text


def ok(check: str, detail: str) -> Check:
    return Check(check, "ok", detail)


def warn(check: str, detail: str, fix: str) -> Check:
    return Check(check, "warn", detail, fix)


def fail(check: str, detail: str, fix: str) -> Check:
    return Check(check, "fail", detail, fix)


def worst(checks: list[Check]) -> Status:
    """The most serious status among `checks` (ok when there are none)."""
    statuses = {c.status for c in checks}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"
