"""Pages of a stream read by sequence from a cursor, backwards or forwards, in windows that
double (64 sequences, up to 1,024 a request): the one way `taskq tasks ls` and the dead
letters' pages (`taskq.dlq.pages`) walk a stream, so a first page is a round trip or two
however long the stream, never a read of all of it."""

from __future__ import annotations

from typing import Protocol, TypeVar

WINDOW = 64  # sequences read by a page's first request; doubled up to MAX_WINDOW
MAX_WINDOW = 1024


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


T = TypeVar("T", bound=Sequenced)


class Windows(Protocol[T]):
    """What a page reads: the matching items of a sequence range, within a budget."""

    @property
    def spent(self) -> bool: ...

    async def window(self, start: int, end: int) -> list[T]: ...


async def older(scan: Windows[T], low: int, high: int, limit: int) -> tuple[list[T], int | None]:
    """Up to `limit` items below `high` (newest first) and the cursor below them: None
    when the stream's start was reached."""
    found: list[T] = []
    window = WINDOW
    while high > low and len(found) <= limit and not scan.spent:
        start = max(low, high - window)
        found += reversed(await scan.window(start, high))
        high = start
        window = min(window * 2, MAX_WINDOW)
    if len(found) > limit:
        return found[:limit], found[limit - 1].seq
    return found, high if high > low else None


async def newer(scan: Windows[T], after: int, last: int, limit: int) -> tuple[list[T], int | None]:
    """Up to `limit` items just above `after` (shown newest first) and the cursor above
    them: None when the stream's end was reached."""
    found: list[T] = []
    seq, window = after + 1, WINDOW
    while seq <= last and len(found) <= limit and not scan.spent:
        end = min(last + 1, seq + window)
        found += await scan.window(seq, end)
        seq = end
        window = min(window * 2, MAX_WINDOW)
    if len(found) > limit:
        shown = found[:limit]
        return list(reversed(shown)), shown[-1].seq
    return list(reversed(found)), seq - 1 if seq <= last else None
