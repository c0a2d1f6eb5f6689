"""Which results bucket holds a task's records (docs/scaling.md, "Results partitions").

With `results_partitions` 1 (the default) every record is in `<PREFIX>_RESULTS`. With N > 1
records are spread over N buckets `<PREFIX>_RESULTS_P<i>` by the FNV-1a hash of the task's
key (as queue partitions place keys): each bucket is a stream of its own, so in a cluster
their leaders sit on different servers and record writes scale with the servers instead of
one stream leader's disk. Producers and workers compute the same bucket from the same
setting. A reader that misses there also looks in every other results bucket on the server
(listed by name, at most every `LISTED_FOR` seconds), so the records written before the
layout changed stay readable until their TTL ends them.
"""

from __future__ import annotations

import time

from taskq.errors import TaskqError
from taskq.nats import Connection
from taskq.topology.names import Names
from taskq.topology.partitions import partition_for

LISTED_FOR = 10.0  # seconds a listing of the results buckets on the server is reused


class ResultBuckets:
    """The results layout of one client: the bucket of a key, and every bucket there is."""

    def __init__(self, names: Names, partitions: int, connection: Connection) -> None:
        self.names = names
        self.partitions = partitions
        self._connection = connection
        self._listed: tuple[float, list[str]] | None = None
        # the one bucket of every key when unpartitioned (the default): a settle reads it
        # per record, without a call
        self.only = names.results_bucket if partitions == 1 else None

    def of(self, key: str) -> str:
        """The bucket of a record's key (a task id in its safe form)."""
        if self.only is not None:
            return self.only
        return self.names.results_partition(partition_for(key, self.partitions))

    @property
    def configured(self) -> list[str]:
        """The buckets of this client's layout."""
        return self.names.results_buckets(self.partitions)

    async def existing(self) -> list[str]:
        """Every results bucket of the prefix, in any layout: this layout's first (readers
        make them first: `ensure_results`), then any other the server has (left by an
        earlier layout)."""
        now = time.monotonic()
        if self._listed is None or now - self._listed[0] > LISTED_FOR:
            try:
                streams = await self._connection.streams.names("$KV.>")
            except TaskqError:  # a role that may not list, a listing that failed: its own
                streams = [f"KV_{bucket}" for bucket in self.configured]  # layout, this time
            found = {s[3:] for s in streams if s.startswith("KV_")}
            buckets = {b for b in found if self.names.is_results_bucket(b)}
            ours = self.configured
            self._listed = (now, ours + sorted(buckets - set(ours)))
        return list(self._listed[1])

    async def elsewhere(self, key: str) -> list[str]:
        """The existing buckets other than `key`'s own: where a record written under
        another layout may be."""
        own = self.of(key)
        return [bucket for bucket in await self.existing() if bucket != own]
