"""The `taskq` command run inside the test process, for tests about its output and exit code.

A fresh interpreter pays about 1.2 s of CPU to import taskq, once per command; here
`taskq.cli.main.main(argv)` runs in a thread of its own under click's `CliRunner` isolation
instead, and what it printed and its exit code come back as the `CompletedProcess` the
subprocess gave. What a new interpreter gives and this process does not is rebuilt around
each call: stdin with no terminal, the root logger `-v` sets, the app modules imported
afresh. Tests about processes, signals, terminals or a fresh interpreter keep a subprocess
(`run_cli(..., fresh=True)`, `cli_argv`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import os
import re
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
from click.testing import CliRunner

from taskq import App
from taskq.cli.main import cli, main
from taskq.workers.logs import awaiting

ROOT = Path(__file__).resolve().parent.parent
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as taskq/cli/main.py sets it
PROGRAM = [sys.executable, "-m", "taskq"]  # how tests/conftest.py `cli_argv` starts
# where the standard library and the virtualenv's packages live (not app modules)
_INSTALLED = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*|[A-Za-z_][\w.]*:")  # MODULE:APP

# One call at a time per process: CliRunner swaps sys.stdin/stdout/stderr process-wide.
_LANE = threading.Lock()
# Calls that outlived their timeout (a thread cannot be killed): while one still runs it
# holds the lane, and later calls go to a fresh interpreter at once instead of waiting.
_STUCK: list[threading.Thread] = []
# True in the command's thread and what copies its context (its event loop's tasks,
# asyncio.to_thread): its log records are the command's, a worker's in this process not.
_IN_CLI: contextvars.ContextVar[bool] = contextvars.ContextVar("in_cli", default=False)


def run_in_process(
    argv: list[str],
    stdin: str | None,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str] | None:
    """Run `argv` (a `cli_argv` command line) in this process as the subprocess would have
    in `cwd`; None when it cannot: this process's cwd is not ROOT (a command that resolves
    a path against it would see another), or an earlier call that timed out still holds
    the lane. A call past `timeout` raises TimeoutExpired. `env`: the variables set (over
    this process's) while it runs. Another `cwd` is where MODULE:APP modules are imported
    from (first on sys.path, as a new interpreter there has it): for commands that read no
    other file (a guide's `taskq enqueue tasks:app ...`, `taskq result ID`)."""
    assert argv[:3] == PROGRAM, argv
    if Path.cwd().resolve() != ROOT or any(thread.is_alive() for thread in _STUCK):
        return None
    if not _LANE.acquire(timeout=timeout):
        return None
    call = _Call(argv[3:], stdin, env or {}, cwd)
    before = _Process.now(env or {})
    # a thread of its own: the command runs its own event loop (asyncio.run / uvloop.run),
    # and the caller may be inside a running one
    thread = threading.Thread(target=call.run, name="taskq-cli", daemon=True)
    thread.start()  # it releases the lane when the command ends
    thread.join(timeout)
    if thread.is_alive():
        _STUCK.append(thread)
        waits = _waits()
        # the stuck command never leaves its isolation: put this process's environment and
        # streams back, or every later test here runs with its variables (a doctor run with
        # TASKQ_REPLICAS=3 that hung made 19 later tests ask a 1-node server for R3)
        before.restore()
        raise subprocess.TimeoutExpired(argv, timeout, output=call.stdout, stderr=waits)
    return subprocess.CompletedProcess(argv, call.code, call.stdout, call.stderr)


def _waits() -> str:
    """Where the event loops running in this process wait: every task's stack (what a
    command stuck past its timeout awaits, for the failing test's report)."""
    lines = []
    for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
        if not loop.is_running():
            continue
        for task in asyncio.all_tasks(loop):
            lines.append(f"task {task.get_name()}:")
            lines += awaiting(task.get_coro())
    return "\n".join(lines)


class _Process:
    """What a command's isolation changes in this process: the variables it sets and the
    standard streams, as they were before it ran."""

    def __init__(self, env: dict[str, str | None], streams: tuple[Any, Any, Any]) -> None:
        self.env = env
        self.streams = streams

    @classmethod
    def now(cls, names: dict[str, str]) -> _Process:
        return cls(
            {name: os.environ.get(name) for name in names}, (sys.stdin, sys.stdout, sys.stderr)
        )

    def restore(self) -> None:
        for name, value in self.env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.stdin, sys.stdout, sys.stderr = self.streams


class _Call:
    """One command: its arguments and stdin, then its exit code and what it printed."""

    def __init__(self, args: list[str], stdin: str | None, env: dict[str, str], cwd: Path) -> None:
        self.args = args
        self.stdin = stdin
        self.env = env
        self.cwd = cwd
        self.code = -1
        self.stdout = ""
        self.stderr = ""

    def run(self) -> None:
        """The thread's body: the command, isolated; then the lane is free again."""
        _IN_CLI.set(True)
        try:
            # stdin "" rather than None: no terminal and nothing to read, like DEVNULL
            with CliRunner().isolation(input=self.stdin or "", env=self.env) as (out, err, _mixed):
                with (
                    _logging_to(sys.stderr, _log_level(self.args)),
                    _app_imports_undone(self.args),
                ):
                    if self.cwd != ROOT:  # sys.path is put back by _app_imports_undone
                        sys.path.insert(0, str(self.cwd))
                    self.code = _exit_code(self.args)
                sys.stdout.flush()
                sys.stderr.flush()
                self.stdout = _text(out.getvalue())
                self.stderr = _text(err.getvalue())
        finally:
            _LANE.release()


def _exit_code(args: list[str]) -> int:
    """`main(args)` with the exit code the interpreter would end with (an exception that
    escapes it: its traceback on stderr and 1, as Python prints and exits)."""
    try:
        main(args)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # any of them: the interpreter would print it and exit 1
        traceback.print_exc()
        return 1
    return 0


def _text(data: bytes) -> str:
    """Output bytes as `subprocess.run(text=True)` gives them (universal newlines)."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _log_level(args: list[str]) -> int:
    """The root level the `cli` group's `logging.basicConfig` sets for these arguments:
    WARNING, INFO with `-v`, DEBUG with `-vv` (the group's own -v only, not a command's)."""
    try:
        with cli.make_context("taskq", list(args), resilient_parsing=True) as ctx:
            verbose = int(ctx.params.get("verbose") or 0)
    except click.ClickException:  # main() will say what is wrong with them
        verbose = 0
    return logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG


@contextlib.contextmanager
def _logging_to(stream: TextIO, level: int) -> Iterator[None]:
    """The command's log records on `stream` in the CLI's format, as `basicConfig` gives a
    new interpreter (in this one it does nothing: the root logger has pytest's handlers,
    and this one, added first). The root level is the command's while it runs, so what it
    checks with `isEnabledFor` is as in a new interpreter; restored after."""
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(lambda _record: _IN_CLI.get())
    kept = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(kept)


@contextlib.contextmanager
def _app_imports_undone(args: list[str]) -> Iterator[None]:
    """Undo what loading MODULE:APP leaves behind in this process, as the end of a new
    interpreter would: the cwd `load_app` puts on sys.path, the app modules it imported
    (the next call imports them afresh, e.g. a module rewritten in tmp_path) and the
    settings the global options configure on an App a test had imported already. A module
    the command names that this process imported already is set aside while it runs, so
    the command imports it afresh, as a new interpreter would (its App reads TASKQ_*
    then), and put back after."""
    path = list(sys.path)
    named = [m for m in _named_modules(args) if _is_app_module(sys.modules.get(m))]
    aside = {name: sys.modules[name] for name in named}
    for name in aside:
        _forget(name)
    before = dict(sys.modules)
    settings = [(app, app.settings) for app in _apps_in(before.values())]
    try:
        yield
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - set(before):
            if _is_app_module(sys.modules[name]):
                _forget(name)
        for app, kept in settings:
            app.settings = kept
        for name, module in aside.items():
            _restore(name, module)


def _named_modules(args: list[str]) -> list[str]:
    """The modules of the MODULE:APP arguments of a command line."""
    return [arg.split(":", 1)[0] for arg in args if _SPEC.fullmatch(arg)]


def _restore(name: str, module: object) -> None:
    """Put module `name` back (and its parent's attribute), as it was before the call."""
    sys.modules[name] = module  # type: ignore[assignment]
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is not None:
        setattr(parent, child, module)


def _is_app_module(module: object) -> bool:
    """A module of the tests' or a user's (tests.apps.*, one written to tmp_path): not
    taskq's own, not one installed in the virtualenv or the standard library."""
    name = getattr(module, "__name__", "")
    file = getattr(module, "__file__", None)
    if not file or name == "taskq" or name.startswith("taskq."):
        return False
    return not file.startswith(_INSTALLED)


def _apps_in(modules: Iterable[object]) -> list[App]:
    """The Apps that app modules hold as module attributes (what `load_app` can name)."""
    found: dict[int, App] = {}
    for module in modules:
        if _is_app_module(module):
            for value in list(vars(module).values()):
                if isinstance(value, App):
                    found[id(value)] = value
    return list(found.values())


def _forget(name: str) -> None:
    """Drop module `name` so the next import runs it again (its parent's attribute too,
    or `from package import name` would still find the old one)."""
    module = sys.modules.pop(name, None)
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is not None and getattr(parent, child, None) is module:
        delattr(parent, child)
