"""`taskq ...` as a process of its own, forked from a fork server that imported taskq once
per test process, for the tests about a worker process (its own PID, signals, SIGKILL, its
exit code and output) and about the command as a user runs it (its exit code, what it
prints on stdout and on stderr): a new interpreter paid ~0.6 s of CPU to import taskq
every time, ~90 times a run. The child runs `taskq.cli.main.main(argv)` as `python -m
taskq` would: in `cwd` (first on sys.path), with exactly `env`, stdin from /dev/null,
stdout and stderr into files, and at its end the interpreter's exit handlers. What only
a new interpreter shows (`python -m taskq` itself, the console script, imports) keeps a
subprocess: test_version_and_help, tests/test_packaging.py, `run_cli(..., fresh=True)`.

What an interpreter reads at its start is not read again in a fork: an `env` that differs
from this process's beyond taskq's own variables (TASKQ_*) and PYTHONFAULTHANDLER (turned
on here) gets a new interpreter instead, so the child sees what it was given.
"""

from __future__ import annotations

import atexit
import faulthandler
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from subprocess import CompletedProcess, Popen

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["taskq.cli.main"])
_FORKED_ONLY = ("TASKQ_", "PYTHONFAULTHANDLER")


def forkable(env: dict[str, str]) -> bool:
    """Whether a child with `env` can be forked: it differs from this process's environment
    only in variables read after the interpreter started."""
    keys = set(env) | set(os.environ)
    changed = {k for k in keys if env.get(k) != os.environ.get(k)}
    return all(k.startswith(_FORKED_ONLY) for k in changed)


def start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Popen[bytes] | Forked:
    """`python -m taskq ARGV` in `cwd` with `env`, its output added to the file `log`:
    forked when it can be, else a new interpreter."""
    if forkable(env):
        return Forked(argv, env, cwd, log, log)
    with log.open("ab") as out:
        return Popen(
            [sys.executable, "-m", "taskq", *argv],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def run(argv: list[str], cwd: Path, timeout: float = 60) -> CompletedProcess[str]:
    """`python -m taskq ARGV` in `cwd` run to its end, as `subprocess.run` with
    `capture_output` and no stdin gives it (killed at `timeout`: TimeoutExpired)."""
    with tempfile.TemporaryDirectory(prefix="taskq-run-") as folder:
        out, err = Path(folder, "out"), Path(folder, "err")
        child = Forked(argv, dict(os.environ), cwd, out, err)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
            raise
        said = out.read_text(errors="replace"), err.read_text(errors="replace")
    return CompletedProcess([sys.executable, "-m", "taskq", *argv], code, *said)


class Forked:
    """A forked `taskq` process with the part of `subprocess.Popen` the tests use."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: Path, out: Path, err: Path
    ) -> None:
        # the files by name: the child is the fork server's, which holds none of ours
        where = (str(cwd), str(out), str(err))
        self._process = _CONTEXT.Process(target=_main, args=(argv, env, *where), name="taskq")
        self._process.start()
        self.pid = self._process.pid or 0
        _RUNNING.add(self)

    @property
    def returncode(self) -> int | None:
        """The exit code (minus the signal's number when killed by one); None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"taskq (pid {self.pid})", timeout or 0)
        _RUNNING.discard(self)
        return code

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_RUNNING: set[Forked] = set()


@atexit.register
def _kill_leftovers() -> None:
    """A child a test left running is killed, not waited for: multiprocessing's own exit
    handler (which runs after this one) joins every child it started."""
    for child in list(_RUNNING):
        child.kill()
        child.wait(10)


def _main(argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """The child: set up as a new interpreter would be, then the `taskq` command."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path.insert(0, cwd)  # `python -m` puts the working directory first
    sys.argv = [sys.executable, *argv]
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    from taskq.cli.main import main

    try:
        main(argv)
    finally:
        atexit._run_exitfuncs()  # the child ends in os._exit, which skips them
