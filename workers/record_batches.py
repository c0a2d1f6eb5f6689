"""Whether a settle group's result records go to the server as one atomic batch or one by
one, pipelined: whichever has cost less per record lately, on this server.

A batch is stored with one write and one fsync, which is what a server syncing every write
(`sync_interval: always`, the shipped configs') needs: records cost a fraction of an fsync
each instead of one (a one-process drain of no-op tasks 2,600-2,800/s -> 3,600-4,750/s
here). On a server that syncs every two minutes (its default) the server's staging of each
batch costs more than it saves (6,500-7,300/s pipelined, 4,200-5,600/s batched, groups of
~50). A client cannot ask the server which it is, so the settler measures: each group's
time from sending its records to their last ack, per record, averaged per way, the other
way tried every `EXPLORE`th group so a changed server (or load) is noticed.
"""

from __future__ import annotations

EXPLORE = 64  # every this many groups, the way that looks worse is tried again
WEIGHT = 0.2  # of a new measurement in the running average


class RecordBatches:
    """The settler's choice of how a group's records are written, from what it measured."""

    def __init__(self) -> None:
        self.cost: dict[bool, float | None] = {True: None, False: None}  # s per record
        self.groups = 0

    def pick(self, records: int) -> bool:
        """True: write this group's `records` as one batch."""
        if records < 2:
            return False
        self.groups += 1
        batched, alone = self.cost[True], self.cost[False]
        if batched is None or alone is None:
            return batched is None  # each way measured once first
        better = batched <= alone
        return (not better) if self.groups % EXPLORE == 0 else better

    def observe(self, batched: bool, records: int, seconds: float) -> None:
        """A group of `records` written `batched` (or not) took `seconds` to be stored."""
        if records < 2:
            return
        cost = seconds / records
        old = self.cost[batched]
        self.cost[batched] = cost if old is None else (1 - WEIGHT) * old + WEIGHT * cost
