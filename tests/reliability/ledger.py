"""Accounting for the reliability suite: every task succeeded or is in the DLQ, none lost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.dlq.record import EnvelopeOriginal


@dataclass(frozen=True)
class Accounting:
    tasks: int
    succeeded: int
    dead: int
    lost: int
    duplicates: int  # extra runs beyond the first, over all tasks

    def line(self, name: str, kills: int = 0) -> str:
        return (
            f"{name}: tasks={self.tasks} kills={kills} succeeded={self.succeeded} "
            f"dead={self.dead} lost={self.lost} duplicates={self.duplicates}"
        )


def runs(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines() if line.strip())


async def account(app: App, ids: list[str], ledger: Path) -> Accounting:
    done = runs(ledger)
    dead = {
        r.message.kwargs.get("tid") or (r.message.args or [None])[0]
        for r in await list_dead(app)
        if isinstance(r.message, EnvelopeOriginal)
    }
    succeeded = sum(1 for i in ids if done[i] > 0)
    in_dlq = sum(1 for i in ids if done[i] == 0 and i in dead)
    return Accounting(
        tasks=len(ids),
        succeeded=succeeded,
        dead=in_dlq,
        lost=len(ids) - succeeded - in_dlq,
        duplicates=sum(max(0, done[i] - 1) for i in ids),
    )


def all_done(ledger: Path, ids: list[str]) -> bool:
    done = runs(ledger)
    return all(done[i] > 0 for i in ids)
