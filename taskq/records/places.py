"""Where a body is stored, and what that binds it to (docs/wire-format.md, "Encrypted
bodies" and "Large bodies").

A sealed body's AES-GCM additional data ends with its *context*: the kind of body and its
place, computed from what the writer and every reader know before opening it (the subject
and, for some kinds, one header). A body copied under another key, subject or kind
therefore fails authentication and is `undecodable`. Contexts (parts joined by NUL):

* task message (`q`, `c`, `r`, `p`, `pc`, `pr` subjects): `task`, prefix, queue;
* a schedule's firing (on the timer stream's `f` subjects, or a task subject, with the
  server's `Nats-Scheduler` header) and a schedule itself (`s`: delayed, periodic, held):
  `schedule`, the schedule's subject;
* a debounced burst's record (`limit.debounce`): `debounce`, its subject;
* a durable workflow run's journal event (`wf`): `journal`, its subject;
* dead letter (`dlq`): `dead`, subject, the `Taskq-Id` header;
* KV value (`$KV.<PREFIX>_RESULTS|FLOWS|PROGRESS.<key>`, and a partitioned results layout's
  `$KV.<PREFIX>_RESULTS_P<i>.<key>`): `result`, `workflow` or `progress`, bucket, key;
* object-store copy of a dead letter's original: `blob`, bucket, object name.

nats-server refuses a client's message carrying `Nats-Scheduler` on a stream with schedules
(measured on 2.15.1: error 10212 "message schedules invalid scheduler"), so a schedule's
body opens only as that schedule's firing, never replayed straight into a queue.

A place's `owner` is what a claim-checked body stored from there belongs to
(`taskq.records.claims`): the subject of a KV value or a schedule, the schedule of a firing,
else the message's `Nats-Msg-Id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from taskq.records.envelope import MSG_ID
from taskq.records.sealing import Sealer, is_sealed
from taskq.topology.names import Names

CLAIM = b"\x00TQC1"  # a claim-check reference (taskq.records.claims): not sealed itself
SCHEDULER = "Nats-Scheduler"  # set by the server on a fired schedule's message
SCHEDULE_NEXT = "Nats-Schedule-Next"  # on a firing: the next time, or `purge` (one-shot)
ID_HEADER = "Taskq-Id"  # a dead letter's task id
TASK_ROOTS = frozenset({"q", "c", "r", "p", "pc", "pr"})  # tasks, lanes, levels, partitions
FIRED_ROOT = "f"  # what a schedule fired, in the queue's timer stream
SCHEDULE_ROOTS = frozenset({"s"})
JOURNAL_ROOT = "wf"  # a durable workflow run's journal (taskq.workflows.journal)
DEBOUNCE = "limit.debounce."  # a debounced burst's record (taskq.flowcontrol.debounce)
KV_KINDS = {"RESULTS": "result", "FLOWS": "workflow", "PROGRESS": "progress"}
Headers = Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Place:
    """What a body on one subject is: its kind, its sealing context, its claim owner."""

    kind: str  # task, schedule, journal, dead, result, workflow, progress
    context: bytes
    owner: str | None  # None: no claim-checked body may be stored or read here


def is_claim(data: bytes) -> bool:
    return data[:1] == b"\x00" and data.startswith(CLAIM)


def shares_its_object(headers: Headers) -> bool:
    """True for a periodic schedule's firing: a claim-checked body it carries is the
    schedule's, read by every firing, so no firing may delete it (a one-shot schedule's
    firing, `Nats-Schedule-Next: purge`, owns its object)."""
    found = headers or {}
    return SCHEDULER in found and found.get(SCHEDULE_NEXT) != "purge"


def _context(*parts: str) -> bytes:
    return "\x00".join(parts).encode()


class Places:
    """The places of one prefix: which subjects hold sealed bodies, and their contexts."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        up = prefix.upper()
        self._buckets = {f"{up}_{name}": kind for name, kind in KV_KINDS.items()}
        self._names = Names(prefix)

    def at(self, subject: str, headers: Headers = None) -> Place | None:
        """The place of a body on `subject` (with `headers`); None when bodies there hold
        no users' data (worker heartbeats, cancels, flow-control records, counters), so stay
        clear."""
        if subject.startswith("$KV."):
            return self._kv(subject)
        head, _, rest = subject.partition(".")
        if head != self.prefix:
            return None
        root, _, rest = rest.partition(".")
        found = headers or {}
        if root in TASK_ROOTS or root == FIRED_ROOT:
            scheduler = found.get(SCHEDULER)
            if scheduler:
                return Place("schedule", _context("schedule", scheduler), scheduler)
            if root == FIRED_ROOT:
                return None  # only the server fires there: nothing else is opened as one
            queue = rest.partition(".")[0]
            return Place("task", _context("task", self.prefix, queue), found.get(MSG_ID) or None)
        if root in SCHEDULE_ROOTS:
            return Place("schedule", _context("schedule", subject), subject)
        if root == JOURNAL_ROOT:
            return Place("journal", _context("journal", subject), None)
        if rest.startswith(DEBOUNCE[len("limit.") :]) and root == "limit":
            return Place("debounce", _context("debounce", subject), None)
        if root == "dlq":
            context = _context("dead", subject, found.get(ID_HEADER, ""))
            return Place("dead", context, found.get(MSG_ID) or None)
        return None

    def _kv(self, subject: str) -> Place | None:
        parts = subject.split(".", 2)
        kind = self._buckets.get(parts[1]) if len(parts) == 3 else None
        if kind is None and len(parts) == 3 and self._names.is_results_bucket(parts[1]):
            kind = "result"  # a partitioned results layout's bucket
        if kind is None:
            return None
        return Place(kind, _context(kind, parts[1], parts[2]), subject)


def object_context(bucket: str, name: str) -> bytes:
    """The context of an object-store copy of a dead letter's original."""
    return _context("blob", bucket, name)


class Seals:
    """The sealer applied by place: seals what goes to a place holding users' data, opens
    what comes from one (for the connection, its readers and its deliveries)."""

    def __init__(self, sealer: Sealer, places: Places) -> None:
        self.sealer = sealer
        self.places = places

    @property
    def active(self) -> bool:
        return self.sealer.active

    def seal(self, subject: str, body: bytes, headers: Headers = None) -> bytes:
        """`body` sealed for its place when a key is set and the place is a sealed one
        (bytes sealed already, such as a requeued dead letter's original, go as they are,
        and so do claim-check references: the object holds the sealed body)."""
        if not self.sealer.active or is_sealed(body) or is_claim(body):
            return body
        place = self.places.at(subject, headers)
        return body if place is None else self.sealer.seal(body, place.context)

    def open(self, subject: str, headers: Headers, data: bytes) -> bytes:
        """The plaintext of a body read from `subject`; DecodeError when it does not open."""
        if not is_sealed(data):
            return data
        place = self.places.at(subject, headers)
        return self.sealer.open(data, place.context if place is not None else b"")

    def keep(self, subject: str, headers: Headers, data: bytes) -> bytes:
        """The plaintext when it opens here, else the bytes as they are (for readers that
        show or move stored messages rather than run them)."""
        if not is_sealed(data):
            return data
        place = self.places.at(subject, headers)
        return self.sealer.open_or_keep(data, place.context if place is not None else b"")
