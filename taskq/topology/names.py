"""Names of every JetStream object and subject, derived from one prefix (docs/wire-format.md,
"Names").

Several apps, tenants or tests share a server by using different prefixes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from taskq.errors import ConfigError

# subject root of tasks, concurrency lanes, priority levels in a partition
_PARTITIONED = {"q": "p", "c": "pc", "r": "pr"}
# task subject roots -> number tokens (partition, priority) between queue and task name
_TASK_ROOTS = {"q": 0, "c": 0, "r": 1, "p": 1, "pc": 1, "pr": 2}
_MAX_DELIVERIES = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
_TASK = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
MAX_TASK_NAME = 200  # and queue names, prefixes: they become subjects, stream and KV names


def check_queue(name: str) -> str:
    """Return `name` if it is a valid queue (or prefix) name, else raise ConfigError."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > MAX_TASK_NAME:
        raise ConfigError(
            f"invalid queue name {str(name)[:80]!r}: use letters, digits, '_' and '-' only"
            f" (at most {MAX_TASK_NAME})"
        )
    return name


def check_prefix(name: str) -> str:
    """Return `name` if it is a valid prefix, else raise ConfigError."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > 64:
        raise ConfigError(
            f"invalid prefix {str(name)[:80]!r}: use letters, digits, '_' and '-' only (at most 64)"
        )
    return name


def check_task(name: str) -> str:
    """Return `name` if it is a valid task name (dots only between parts), else raise."""
    if not isinstance(name, str) or not _TASK.fullmatch(name) or len(name) > MAX_TASK_NAME:
        raise ConfigError(
            f"invalid task name {str(name)[:80]!r}: use letters, digits, '_' and '-', "
            f"with dots only between parts (at most {MAX_TASK_NAME})"
        )
    return name


_SITE = re.compile(r"^[a-z][a-z0-9]{0,31}$")


def check_site(name: str) -> str:
    """Return `name` if it is a valid edge site name, else raise ConfigError. A site's name
    is its JetStream domain and a token of stream names, so lower-case letters and digits
    only (no `_`: `<PREFIX>_OUT_<SITE>_<QUEUE>` stays unambiguous)."""
    if not isinstance(name, str) or not _SITE.fullmatch(name):
        raise ConfigError(
            f"invalid site name {str(name)[:80]!r}: a lower-case letter, then lower-case "
            "letters and digits (at most 32)"
        )
    return name


@dataclass(frozen=True)
class LimitRecord:
    """A flow-control record's subject read back (`Names.parse_limit_subject`)."""

    kind: str  # unique, throttle, slot, rate, decl, debounce...
    key: str  # one token
    index: str | None  # a per-key slot's number (`slot` records only)
    task: str  # the task name (it may span tokens)


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

    # timers: a queue's message schedules (delayed, periodic, held and debounced tasks) live
    # in a stream of their own, `<PREFIX>_T_<QUEUE>`, with what they fire. nats-server
    # forces roll-ups (a publish that purges) on any stream that allows schedules, and
    # producers publish into queue streams: so no queue stream allows them, and only
    # workers publish here. A fired task lands on `<prefix>.f.<queue>.<root>.<tail>` for its
    # queue subject `<prefix>.<root>.<queue>.<tail>`; a worker moves it there.
    def timer_stream(self, queue: str) -> str:
        return f"{self._up}_T_{queue.upper()}"

    def schedule_subject(self, queue: str, schedule: str) -> str:
        """A schedule's subject: `schedule` names it (`task.<id>`, `periodic.<task>`...)."""
        return f"{self.prefix}.s.{queue}.{schedule}"

    def schedule_filter(self, queue: str) -> str:
        return self.schedule_subject(queue, ">")

    def fired_subject(self, subject: str) -> str:
        """Where a schedule targeting the queue subject `subject` fires (in the timer
        stream); ValueError if `subject` is not a queue subject of this prefix."""
        parts = subject.split(".", 3)
        if len(parts) < 4 or parts[0] != self.prefix or parts[1] not in _TASK_ROOTS:
            raise ValueError(f"not a queue subject: {subject[:100]!r}")
        return f"{self.prefix}.f.{parts[2]}.{parts[1]}.{parts[3]}"

    def unfired(self, fired: str) -> str | None:
        """The queue subject a fired message goes to (None: not a fired subject)."""
        parts = fired.split(".", 4)
        if len(parts) < 5 or parts[0] != self.prefix or parts[1] != "f":
            return None
        subject = f"{self.prefix}.{parts[3]}.{parts[2]}.{parts[4]}"
        return subject if self.parse_queue_subject(subject) is not None else None

    def fired_filter(self, queue: str) -> str:
        return f"{self.prefix}.f.{queue}.>"

    def timer_consumer(self, queue: str) -> str:
        return f"{queue}-timers"

    def consumer(self, queue: str) -> str:
        return queue

    # concurrency lanes: a task with max_concurrency has its own subject and consumer in
    # its queue's stream (the consumer's max_ack_pending is the limit)
    def lane_subject(self, queue: str, task: str, partition: int | None = None) -> str:
        return self._in_queue("c", queue, task, partition)

    def lane_filter(self, queue: str, partition: int | None = None) -> str:
        return self.lane_subject(queue, ">", partition)

    def lane_consumer(self, queue: str, task: str) -> str:
        """A durable name per lane: the task name made a name token, plus a digest (two
        task names may differ only where a durable name cannot)."""
        plain = re.sub(r"[^A-Za-z0-9_-]", "_", task)[:40]
        return f"{queue}-c-{plain}-{hashlib.sha256(task.encode()).hexdigest()[:6]}"

    # priority levels: a task of priority N != 5 is published to its level's subject
    # `<prefix>.r.<queue>.<N>.<task>`, which that level's consumer `<queue>-p<N>` serves
    # (`r` and `-p` are the server-side names deployed streams and consumers already carry:
    # kept, and meant as "priority level" wherever they appear; a partition is `_P<i>`)
    def level_subject(
        self, queue: str, level: int | str, task: str, partition: int | None = None
    ) -> str:
        return self._in_queue("r", queue, f"{level}.{task}", partition)

    def levels_filter(self, queue: str, partition: int | None = None) -> str:
        return self._in_queue("r", queue, ">", partition)

    def level_consumer(self, queue: str, level: int) -> str:
        return f"{queue}-p{level}"

    def level_of(self, subject: str) -> int | None:
        """The priority level of a level subject (None: not one)."""
        tokens = subject.split(".")
        at = {"r": 3, "pr": 4}.get(tokens[1] if len(tokens) > 1 else "")
        if at is None or len(tokens) <= at + 1 or not tokens[at].isdigit():
            return None
        return int(tokens[at])

    def parse_queue_subject(self, subject: str) -> tuple[str, str] | None:
        """Split a task subject into (queue, task); None if it is not one.

        `<prefix>.q.<queue>.<task...>`, `<prefix>.p.<queue>.<partition>.<task...>`, a
        concurrency lane's `<prefix>.c.<queue>.<task...>` / `.pc.<queue>.<partition>.`, a
        priority level's `<prefix>.r.<queue>.<level>.<task...>` / `.pr.<queue>.<p>.<level>.`.
        """
        parts = subject.split(".", 3)
        if len(parts) < 4 or parts[0] != self.prefix or parts[1] not in _TASK_ROOTS:
            return None
        queue, task = parts[2], parts[3]
        for _ in range(_TASK_ROOTS[parts[1]]):
            number, _, task = task.partition(".")
            if not number.isdigit():
                return None
        return (queue, task) if queue and task else None

    def parse_queue_filter(self, subject: str) -> tuple[str, int | None] | None:
        """(queue, partition) for a queue stream's task filter subject; None otherwise."""
        parsed = self.parse_queue_subject(subject)
        tokens = subject.split(".")
        if parsed is None or parsed[1] != ">" or tokens[1] not in ("q", "p"):
            return None
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
        """The results bucket of the default layout (`results_partitions` 1)."""
        return f"{self._up}_RESULTS"

    def results_partition(self, partition: int) -> str:
        """One bucket of a partitioned results layout (taskq.records.result_buckets)."""
        return f"{self._up}_RESULTS_P{partition}"

    def results_buckets(self, partitions: int) -> list[str]:
        """The buckets of a results layout of `partitions` (1: the one default bucket)."""
        if partitions == 1:
            return [self.results_bucket]
        return [self.results_partition(i) for i in range(partitions)]

    def is_results_bucket(self, bucket: str) -> bool:
        """True for a results bucket of this prefix, in any layout."""
        base = self.results_bucket
        tail = bucket[len(base) + 2 :]
        return bucket == base or (
            bucket.startswith(base + "_P") and tail.isascii() and tail.isdigit()
        )

    @property
    def flows_bucket(self) -> str:
        return f"{self._up}_FLOWS"

    # durable runs' journals (and groups' and chords' marks) in one stream; runs' summaries
    @property
    def workflows_stream(self) -> str:
        return f"{self._up}_WORKFLOWS"

    def journal_subject(self, run_id: str, writer: str, key: str) -> str:
        """One event of a run's journal (`run_id` in its safe form), under its writer: `s`
        its start, `u` signals and cancels, `o` an operator's retry, `w` what workers write
        (decisions, step outcomes, timers), `c` a large decision's chunks. Roles get the
        writers they may write: a producer can signal a run, never write a step's outcome.
        One subject per event (`key`), found by the server's subject index, not a scan."""
        return f"{self.prefix}.wf.{run_id}.{writer}.{key}"

    def journal_filter(self, run_id: str, writer: str = "*") -> str:
        """Every event of a run's journal (or of one writer)."""
        return f"{self.prefix}.wf.{run_id}.{writer}.*"

    def canvas_subject(self, flow_id: str, part: str, key: str) -> str:
        """A group's or chord's mark in the workflows stream (taskq.workflows.marks): a
        token more than a journal event's, so no run's journal holds one."""
        return f"{self.prefix}.wf.{flow_id}.k.{part}.{key}"

    def canvas_filter(self, flow_id: str, part: str) -> str:
        return f"{self.prefix}.wf.{flow_id}.k.{part}.*"

    @property
    def journals_filter(self) -> str:
        return f"{self.prefix}.wf.>"

    @property
    def runs_bucket(self) -> str:
        return f"{self._up}_RUNS"

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

    # flow control (taskq.flowcontrol): records with TTLs, and rate counters
    @property
    def limits_stream(self) -> str:
        return f"{self._up}_LIMITS"

    def limit_subject(self, kind: str, token: str, task: str) -> str:
        """A flow-control record: `kind` (unique, throttle, slot, decl), a one-token key,
        then the task name last (it may span tokens)."""
        return f"{self.prefix}.limit.{kind}.{token}.{task}"

    def parse_limit_subject(self, subject: str) -> LimitRecord | None:
        """A `limit_subject` read back (a `slot` record's key is `<key>.<index>`); None for
        any other subject."""
        head = f"{self.prefix}.limit."
        if not subject.startswith(head):
            return None
        kind, _, rest = subject[len(head) :].partition(".")
        parts = rest.split(".", 2 if kind == "slot" else 1)
        if len(parts) != (3 if kind == "slot" else 2) or not all(parts):
            return None
        if kind == "slot":
            return LimitRecord(kind, parts[0], parts[1], parts[2])
        return LimitRecord(kind, parts[0], None, parts[1])

    def parse_schedule_subject(self, subject: str) -> tuple[str, str] | None:
        """A `schedule_subject` read back: (queue, schedule name); None for any other."""
        parts = subject.split(".", 3)
        if len(parts) != 4 or parts[0] != self.prefix or parts[1] != "s" or not parts[3]:
            return None
        return parts[2], parts[3]

    @property
    def limits_filter(self) -> str:
        return f"{self.prefix}.limit.>"

    # edge sites (docs/edge.md): at the hub, a work-queue "outbox" stream per site and queue,
    # which the site's queue stream sources through a durable consumer (ADR-60)
    def site_stream(self, site: str, queue: str) -> str:
        return f"{self._up}_OUT_{site.upper()}_{queue.upper()}"

    def site_subject(self, site: str, queue: str, task: str) -> str:
        return f"{self.prefix}.o.{site}.{queue}.{task}"

    def site_filter(self, site: str, queue: str) -> str:
        return self.site_subject(site, queue, ">")

    def site_deliver(self, site: str, queue: str) -> str:
        """Where the hub's consumer pushes a site's tasks (across the leaf connection)."""
        return f"{self.prefix}.edge.{site}.{queue}"

    def site_return(self, site: str, stream: str) -> str:
        """Where a site's consumer pushes its results or dead letters to the hub."""
        return f"{self.prefix}.edge.{site}._{stream.lower()}"

    # history (taskq.records.history): one window of one series at one resolution per subject
    @property
    def history_stream(self) -> str:
        return f"{self._up}_HISTORY"

    def history_subject(self, resolution: str, series: str, index: int | str) -> str:
        """A window's subject: resolution `f` or `c`, the window's number (its start over
        its length; `*` in a filter), then the series last (`a`, `q.<queue>`, `t.<task>`:
        a task name may span tokens)."""
        return f"{self.prefix}.h.{resolution}.{index}.{series}"

    @property
    def history_filter(self) -> str:
        return f"{self.prefix}.h.>"
