"""Task ids: ULIDs (time-ordered, 26 characters of Crockford base32), as on the wire, and
the safe form any id takes where it becomes a name on the server."""

from __future__ import annotations

import hashlib
import random
import re
import time

from taskq.errors import ConfigError

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# 10-bit chunks → two characters at a time: 13 lookups instead of 26 shifts
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))
# random.getrandbits is reseeded in forked children (os.register_at_fork), so worker
# processes never share a sequence; 80 random bits per millisecond make collisions moot.
_bits = random.getrandbits


def new_id() -> str:
    """A new ULID: 48 bits of milliseconds then 80 random bits."""
    value = ((time.time_ns() // 1_000_000) << 80) | _bits(80)
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def new_ids(count: int) -> list[str]:
    """`count` new ULIDs of one millisecond (a bulk enqueue's): the time's ten characters
    encoded once, the random part's sixteen for each."""
    stamp = (time.time_ns() // 1_000_000) << 80
    head = "".join([_PAIRS[(stamp >> shift) & 1023] for shift in _SHIFTS[:5]])
    tail = _SHIFTS[5:]  # the 80 random bits, two characters per 10 bits
    ids = []
    for _ in range(count):
        bits = _bits(80)
        ids.append(head + "".join([_PAIRS[(bits >> shift) & 1023] for shift in tail]))
    return ids


# What an id may be, as it is, wherever ids go: subjects (whole tokens, no wildcard, no
# white space), header values (no CR/LF), KV keys and object names (nats-py's key
# alphabet). Anything else, and anything long, is replaced by its digest. Plain ids never
# start with `h.` (digests) or `w.` (durable runs' result records, taskq.records.results),
# so a task's key never meets a digest's or a run's, whatever id a producer chooses.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
MAX_PLAIN_ID = 128
RESERVED = ("h.", "w.")  # what no plain id starts with
MAX_KEY = 1024  # the longest idempotency key `options(key=...)` takes


def safe_id(task_id: str) -> str:
    """The form of a task id that may stand in a subject, a header, a KV key or an object
    name: the id itself when it is short and plain (a ULID, `order-123`, a workflow step's
    `<id>.3`), else `h.` + the SHA-256 of its UTF-8 bytes. Distinct ids never share one."""
    if (
        len(task_id) <= MAX_PLAIN_ID
        and _PLAIN_ID.fullmatch(task_id)
        and not task_id.startswith(RESERVED)
    ):
        return task_id
    return "h." + hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()


def check_key(key: object, what: str = "key") -> str:
    """A key as given to `options(key=...)` (or `partition_key=`), or a ConfigError: a
    string of 1 to MAX_KEY characters (any characters: odd ones reach the server as a
    digest, never as they are)."""
    if not isinstance(key, str):
        raise ConfigError(f"{what} must be a string, not {type(key).__name__}")
    if not key:
        raise ConfigError(f"{what} must not be empty")
    if len(key) > MAX_KEY:
        raise ConfigError(f"{what} is {len(key)} characters long: at most {MAX_KEY}")
    return key
