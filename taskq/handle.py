"""Handles to enqueued tasks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskHandle:
    """An enqueued task: its id, where it went, and whether the server saw it before.

    `duplicate` is True when the server's dedup window already held a message with the
    same id (an idempotency key reused): nothing new was stored.
    """

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool = False
