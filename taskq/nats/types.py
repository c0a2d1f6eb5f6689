"""Plain values that cross the NATS boundary: what the server answered, as taskq's own types."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class PubAck:
    """The server stored a published message (`duplicate`: its id was already in the
    stream's dedup window, so nothing new was stored)."""

    stream: str
    seq: int
    duplicate: bool


@dataclass(frozen=True)
class StoredMessage:
    """A message read directly from a stream by sequence."""

    subject: str
    seq: int
    data: bytes
    headers: dict[str, str]
    time: datetime | None


@dataclass(frozen=True)
class StreamState:
    """A stream's counts and configured subjects (`subjects`: counts per subject when asked
    for with a filter)."""

    name: str
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    consumers: int
    subjects: dict[str, int]
    config_subjects: tuple[str, ...]
    replicas: int = 1
    msg_ttl: bool = False  # per-message TTLs (`Nats-TTL`) allowed


@dataclass(frozen=True)
class ConsumerState:
    """A durable consumer's counts: what waits, what is in flight."""

    name: str
    pending: int  # not yet delivered
    ack_pending: int  # delivered, not yet acked: in flight
    redelivered: int
    waiting: int  # pull requests waiting: a rough count of idle workers
    ack_wait: float
    max_deliver: int
    paused: bool = False  # the server holds deliveries back (consumer pause, ADR-48)
    pause_until: datetime | None = None  # when that pause ends by itself (None: not paused)


@dataclass(frozen=True)
class ConsumerPause:
    """A consumer's pause after a pause or resume request: `until` is set while paused."""

    paused: bool
    until: datetime | None


@dataclass(frozen=True)
class KVEntry:
    """One value of a key-value bucket (`deleted`: a delete marker, or expired)."""

    key: str
    value: bytes
    revision: int
    created: datetime | None
    deleted: bool = False
