"""Logging set-up for `taskq worker`: one line per settled task, without a flush per line,
as text or as one JSON object per line (`--log-format json`).

`logging.StreamHandler` flushes after every record, a system call per task that costs a
noticeable share of a short task's time. This handler writes into the stream's buffer and
flushes at most every `interval` seconds, plus at exit and from the worker's idle ticker,
so lines are never more than a fraction of a second late.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import faulthandler
import io
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# under `taskq worker -p N` the processes share one stderr: the pid says which one wrote
FORMAT_IN_PROCESS = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
BUFFERED = "taskq_buffered"  # LogRecord attribute: this line may wait for the next flush
MAY_WAIT = {BUFFERED: True}  # `extra=` for such lines
# LogRecord attribute of a settled-task line (workers/settle.py): one tuple rather than seven
# extras, so the text format pays a single attribute per line for what only JSON reads
SETTLED = "taskq_settled"
SETTLED_KEYS = ("task", "id", "attempt", "queue", "duration", "outcome", "reason")
Settled = tuple[str, str, int, str, float, str, str]  # in SETTLED_KEYS order
# LogRecord attribute of a dead letter's (and, with -v, a retry's) line: its traceback,
# the user's frames first and taskq's folded, shown under the line (a `traceback` field in
# JSON lines)
TRACE = "taskq_traceback"
# what `taskq.current().logger` attaches to a task's own lines
TASK_EXTRAS = (("taskq_task", "task"), ("taskq_id", "id"), ("taskq_attempt", "attempt"))


class CachedTimeFormatter(logging.Formatter):
    """The standard format, with the date-time text made once per second rather than once
    per record: with a line per settled task, `time.strftime` is a visible share."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._second = -1
        self._text = ""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        trace: str | None = getattr(record, TRACE, None)
        return f"{line}\n{trace}" if trace else line

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(record.created))
        return f"{self._text},{int(record.msecs):03d}"

    def direct(self, created: float, name: str, message: str) -> str | None:
        """The INFO line `format` would make of `message` from logger `name` at `created`,
        made without a LogRecord; None when this formatter's format is not one of ours."""
        if self._fmt == FORMAT:
            where = name
        elif self._fmt == FORMAT_IN_PROCESS:
            where = f"{name}[{os.getpid()}]"
        else:
            return None
        second = int(created)
        if second != self._second:
            self._second = second
            self._text = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(created))
        msecs = int((created - second) * 1000)
        return f"{self._text},{msecs:03d} INFO {where}: {message}\n"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the task's
    fields when the line is about one (task, id, attempt, queue, duration, outcome, reason),
    worker (`host:pid`, as in its heartbeat record), and error (a traceback) if any.

    Written field by field with the json module's C string encoder: a line per settled task
    is on the worker's hot path, and `json.dumps` of a dict costs about twice as much."""

    def __init__(self) -> None:
        super().__init__()
        self._host = socket.gethostname()
        self._second: tuple[int, str] = (-1, "")  # one tuple: swapped whole, thread-safe

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            f'{{"time":"{self._time(record)}","level":"{record.levelname}","logger":',
            _text(record.name),
            ',"message":',
            _text(record.getMessage()),
        ]
        settled: Settled | None = getattr(record, SETTLED, None)
        if settled is not None:
            task, task_id, attempt, queue, seconds, outcome, reason = settled
            parts += [',"task":', _text(task), ',"id":', _text(task_id)]
            parts.append(f',"attempt":{int(attempt)},"queue":')
            parts += [_text(queue), f',"duration":{round(seconds, 6)!r},"outcome":"{outcome}"']
            if reason:
                parts += [',"reason":', _text(reason)]
        else:
            for attribute, key in TASK_EXTRAS:
                if (value := getattr(record, attribute, None)) is not None:
                    parts.append(f',"{key}":{_value(value)}')
        parts.append(f',"worker":{_text(f"{self._host}:{record.process}")}')
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            parts += [',"error":', _text(record.exc_text)]
        if trace := getattr(record, TRACE, None):
            parts += [',"traceback":', _text(trace)]
        parts.append("}")
        return "".join(parts)

    def _time(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        cached, text = self._second
        if second != cached:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        return f"{text}.{int(record.msecs):03d}Z"


_text: Callable[[str], str] = json.encoder.encode_basestring  # quotes and escapes, in C


def _value(value: object) -> str:
    """Any extra's value as JSON (what is not JSON-able, as its text)."""
    return _text(value) if isinstance(value, str) else json.dumps(value, default=str)


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

    def buffered(self) -> None:
        """A line that may wait was written (by `write_direct`): flush on the time budget."""
        self._urgent = False
        self.flush()

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


def write_direct(logger: logging.Logger, message: str) -> bool:
    """Write `message` as an INFO line of `logger` straight into taskq's buffered handler,
    when that handler alone would print it, unchanged (set up by `install`, text format, no
    filter or other handler on the way): a settled task's line costs about a fifth of a
    LogRecord's way through `logging`. False: nothing written, log it the usual way."""
    parent = logger.parent
    if logger.handlers or logger.filters or parent is None or parent.name != "taskq":
        return False
    if parent.propagate or parent.filters or len(parent.handlers) != 1:
        return False
    handler = parent.handlers[0]
    formatter = handler.formatter
    if type(handler) is not BufferedStreamHandler or handler.filters or handler.level > 20:
        return False
    if type(formatter) is not CachedTimeFormatter:
        return False
    line = formatter.direct(time.time(), logger.name, message)
    if line is None:
        return False
    handler.acquire()
    try:
        handler.stream.write(line)
        handler.buffered()
    finally:
        handler.release()
    return True


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


def install(
    level: int = logging.INFO, fmt: str = FORMAT, *, json_lines: bool = False
) -> BufferedStreamHandler:
    """Route the `taskq` logger to a buffered stderr handler at `level`, in `fmt`, or as
    JSON lines (then the root logger's handlers too: every line on stderr is JSON)."""
    handler = BufferedStreamHandler(buffered_stderr())
    formatter = JsonFormatter() if json_lines else CachedTimeFormatter(fmt)
    handler.setFormatter(formatter)
    if json_lines:
        for other in logging.getLogger().handlers:
            other.setFormatter(formatter)
    logger = logging.getLogger("taskq")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return handler


def dump_stacks_on(signum: int | None = getattr(signal, "SIGUSR1", None)) -> None:
    """On `signum` (`kill -USR1 PID`), write where this process waits to stderr: every
    thread's stack, then every asyncio task's (what a worker that seems stuck awaits). It
    goes on running. Nothing without SIGUSR1 (Windows), nor off the main thread (`main()`
    called from a thread: only the main thread may set a handler)."""
    if signum is None or threading.current_thread() is not threading.main_thread():
        return

    def dump(_signum: int, _frame: object) -> None:
        faulthandler.dump_traceback(all_threads=True)
        try:
            tasks = asyncio.all_tasks(asyncio.get_running_loop())
        except RuntimeError:  # no loop running in this thread
            tasks = set()
        for task in tasks:
            print(f"task {task.get_name()}, awaiting:", file=sys.stderr)
            print("\n".join(awaiting(task.get_coro())), file=sys.stderr)
        sys.stderr.flush()

    signal.signal(signum, dump)


def awaiting(coro: object, depth: int = 40) -> list[str]:
    """The chain of awaits under a task's coroutine, outermost first, one line per frame
    (`Task.print_stack` shows a suspended coroutine's own frame only, not what it awaits)."""
    lines = []
    while coro is not None and depth:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        code = getattr(frame, "f_code", None)
        if frame is not None and code is not None:
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
        else:
            lines.append(f"  {coro!r}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        depth -= 1
    return lines
