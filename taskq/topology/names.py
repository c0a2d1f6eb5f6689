"""Names of every JetStream object and subject, derived from one prefix (DESIGN §3).

Several apps, tenants or tests share a server by using different prefixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from taskq.errors import ConfigError

_PARTITIONED = {"q": "p", "s": "ps"}  # subject root of tasks / schedules in a partition
_MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
_TASK = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


def check_queue(name: str) -> str:
    """Return `name` if it is a valid queue (or prefix) name, else raise ConfigError."""
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise ConfigError(f"invalid queue name {name!r}: use letters, digits, '_' and '-' only")
    return name


def check_prefix(name: str) -> str:
    """Return `name` if it is a valid prefix, else raise ConfigError."""
    if not isinstance(name, str) or not _TOKEN.match(name):
        raise ConfigError(f"invalid prefix {name!r}: use letters, digits, '_' and '-' only")
    return name


def check_task(name: str) -> str:
    """Return `name` if it is a valid task name (dots only between parts), else raise."""
    if not isinstance(name, str) or not _TASK.match(name):
        raise ConfigError(
            f"invalid task name {name!r}: use letters, digits, '_' and '-', "
            "with dots only between parts"
        )
    return name


@dataclass(frozen=True)
class Names:
    """All stream, consumer, bucket and subject names for one prefix."""

    prefix: str = "taskq"

    def __post_init__(self) -> None:
        check_prefix(self.prefix)

    @property
    def _up(self) -> str:
        return self.prefix.upper()

    # queues: one stream per queue, or per partition (`partition` 0..N-1) when partitioned.
    # Partitions use their own subject roots (`p`, `ps`) so that no partition stream overlaps
    # the queue's unpartitioned stream: both may exist while a queue changes its layout.
    @property
    def every_subject(self) -> str:
        """A filter over every subject of this prefix (its queues, schedules, DLQ)."""
        return f"{self.prefix}.>"

    def queue_stream(self, queue: str, partition: int | None = None) -> str:
        base = f"{self._up}_Q_{queue.upper()}"
        return base if partition is None else f"{base}_P{partition}"

    def _in_queue(self, root: str, queue: str, tail: str, partition: int | None) -> str:
        if partition is None:
            return f"{self.prefix}.{root}.{queue}.{tail}"
        return f"{self.prefix}.{_PARTITIONED[root]}.{queue}.{partition}.{tail}"

    def queue_subject(self, queue: str, task: str, partition: int | None = None) -> str:
        return self._in_queue("q", queue, task, partition)

    def queue_filter(self, queue: str, partition: int | None = None) -> str:
        return self.queue_subject(queue, ">", partition)

    def schedule_subject(self, queue: str, schedule: str, partition: int | None = None) -> str:
        return self._in_queue("s", queue, schedule, partition)

    def schedule_filter(self, queue: str, partition: int | None = None) -> str:
        return self.schedule_subject(queue, ">", partition)

    def consumer(self, queue: str) -> str:
        return queue

    def parse_queue_subject(self, subject: str) -> tuple[str, str] | None:
        """Split a task subject into (queue, task); None if it is not one.

        `<prefix>.q.<queue>.<task...>`, or `<prefix>.p.<queue>.<partition>.<task...>`.
        """
        parts = subject.split(".", 3)
        if len(parts) < 4 or parts[0] != self.prefix:
            return None
        if parts[1] == "q":
            queue, task = parts[2], parts[3]
        elif parts[1] == "p":
            number, _, task = parts[3].partition(".")
            if not number.isdigit():
                return None
            queue = parts[2]
        else:
            return None
        return (queue, task) if queue and task else None

    def parse_queue_filter(self, subject: str) -> tuple[str, int | None] | None:
        """(queue, partition) for a queue stream's task filter subject; None otherwise."""
        parsed = self.parse_queue_subject(subject)
        if parsed is None or parsed[1] != ">":
            return None
        tokens = subject.split(".")
        return parsed[0], int(tokens[3]) if tokens[1] == "p" else None

    # dead letters
    @property
    def dlq_stream(self) -> str:
        return f"{self._up}_DLQ"

    def dlq_subject(self, queue: str, task: str) -> str:
        return f"{self.prefix}.dlq.{queue}.{task}"

    @property
    def dlq_filter(self) -> str:
        return f"{self.prefix}.dlq.>"

    def dlq_filter_for(self, queue: str | None = None, task: str | None = None) -> str:
        """The narrowest DLQ subject filter for a queue and/or task (None: any)."""
        if task:
            return self.dlq_subject(queue or "*", task)
        return f"{self.prefix}.dlq.{queue or '*'}.>"

    # advisories captured for the crash-loop sweeper
    @property
    def events_stream(self) -> str:
        return f"{self._up}_EVENTS"

    @property
    def events_consumer(self) -> str:
        return "sweeper"

    @staticmethod
    def max_deliveries_subject(stream: str) -> str:
        return f"{_MAX_DELIVERIES}.{stream}.*"

    @staticmethod
    def advised_stream(subject: str) -> str | None:
        """The stream a MAX_DELIVERIES advisory capture subject is for (None: not one)."""
        if not subject.startswith(_MAX_DELIVERIES + ".") or not subject.endswith(".*"):
            return None
        return subject[len(_MAX_DELIVERIES) + 1 : -2] or None

    # key-value and object stores
    @property
    def results_bucket(self) -> str:
        return f"{self._up}_RESULTS"

    @property
    def flows_bucket(self) -> str:
        return f"{self._up}_FLOWS"

    @property
    def blobs_bucket(self) -> str:
        return f"{self._up}_BLOBS"

    @property
    def workers_bucket(self) -> str:
        return f"{self._up}_WORKERS"

    @property
    def cancels_bucket(self) -> str:
        return f"{self._up}_CANCELS"

    @property
    def progress_bucket(self) -> str:
        return f"{self._up}_PROGRESS"
