"""Logging set-up for `taskq worker`: one line per settled task, without a flush per line.

`logging.StreamHandler` flushes after every record, a system call per task that costs a
noticeable share of a short task's time. This handler writes into the stream's buffer and
flushes at most every `interval` seconds, plus at exit and from the worker's idle ticker,
so lines are never more than a fraction of a second late.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import sys
import time
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# under `taskq worker -p N` the processes share one stderr: the pid says which one wrote
FORMAT_IN_PROCESS = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
BUFFERED = "taskq_buffered"  # LogRecord attribute: this line may wait for the next flush
MAY_WAIT = {BUFFERED: True}  # `extra=` for such lines


class CachedTimeFormatter(logging.Formatter):
    """The standard format, with the date-time text made once per second rather than once
    per record: with a line per settled task, `time.strftime` is a visible share."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created))
        return f"{self._text},{int(record.msecs):03d}"


class BufferedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that flushes on a time budget instead of after every record."""

    def __init__(self, stream: TextIO | None = None, interval: float = 0.25) -> None:
        super().__init__(stream or sys.stderr)
        self.interval = interval
        self._flushed = time.monotonic()
        atexit.register(self.flush_now)

    def emit(self, record: logging.LogRecord) -> None:
        # only the per-task success lines wait; anything else (start-up, retries, dead
        # letters, errors) is written at once, so a crash never hides it
        self._urgent = not getattr(record, BUFFERED, False)
        super().emit(record)

    def flush(self) -> None:
        now = time.monotonic()
        if getattr(self, "_urgent", True) or now - self._flushed >= self.interval:
            self.flush_now(now)

    def flush_now(self, now: float | None = None) -> None:
        self._flushed = now if now is not None else time.monotonic()
        self.acquire()
        try:
            with contextlib.suppress(OSError, ValueError):  # a closed pipe at exit
                self.stream.flush()
        finally:
            self.release()


def buffered_stderr() -> TextIO:
    """A buffered text stream on stderr's file descriptor.

    `sys.stderr` itself is write-through when PYTHONUNBUFFERED is set (common in
    containers), which would turn every log line into a system call again.
    """
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced by something file-less
        return sys.stderr
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw, 1 << 16),
        encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
        errors="backslashreplace",
        write_through=False,
    )


def install(level: int = logging.INFO, fmt: str = FORMAT) -> BufferedStreamHandler:
    """Route the `taskq` logger to a buffered stderr handler at `level`."""
    handler = BufferedStreamHandler(buffered_stderr())
    handler.setFormatter(CachedTimeFormatter(fmt))
    logger = logging.getLogger("taskq")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return handler
