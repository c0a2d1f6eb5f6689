"""Turning keys (a customer id, a call's arguments) into subject tokens and digests.

A key becomes one subject token: itself when it is short and plain (so `taskq limits` can
show it), else a digest marked with `~`, a character plain keys cannot hold, so the two
kinds never collide.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ALL = "_all"  # the token of a limit shared by every call of a task (no key)


def token(key: str) -> str:
    """A subject token for `key`: the key itself if plain, else `~` + a digest."""
    if _PLAIN.fullmatch(key) and key != ALL:
        return key
    return "~" + hashlib.sha256(key.encode()).hexdigest()[:32]


def is_token(value: str) -> bool:
    """Whether `value` is a token `token` makes (a plain key, `_all`, or a digest): what
    a key read back from a message must be before it goes into a subject."""
    return _TOKEN.fullmatch(value) is not None


_TOKEN = re.compile(r"~[0-9a-f]{32}|[A-Za-z0-9_-]{1,64}")


def call_digest(args: list[Any], kwargs: dict[str, Any]) -> str:
    """A token naming a call's arguments (as sent on the wire): same arguments, same token."""
    canonical = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"), default=repr)
    return "~" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def task_token(task: str) -> str:
    """A task name as one token (dots become `/`), for names that must be one token."""
    return task.replace(".", "/")
