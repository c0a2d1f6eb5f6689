"""Task ids: ULIDs (time-ordered, 26 characters of Crockford base32), as on the wire."""

from __future__ import annotations

import random
import time

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
