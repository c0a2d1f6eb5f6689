"""`taskq worker -p N`: a supervisor that keeps N worker processes running (and `--reload`).

Each worker process runs this same command line again (`python -m taskq <the arguments>`,
global options included) with `TASKQ_WORKER_PROCESS` set, which makes `taskq worker` run one
plain worker (`taskq.workers.tether`). The supervisor itself never connects to NATS. Each
process starts in its own process group, so a terminal's Ctrl-C reaches the supervisor only
and every worker gets exactly one SIGTERM from it.

Rules:

- **Restart.** A worker process that exits while the supervisor is not stopping is started
  again: at once after exit status 0 once it had been ready (a recycle: `--max-tasks-per-child`,
  `--max-memory-per-child`); otherwise after a backoff of 1 s, doubling up to 30 s, and back
  to 1 s once a process has run 30 s. The exit status or signal is logged.
- **Give up.** A worker process that exits with a status (not by a signal) before it was
  ready, while no worker process of this supervisor has been ready yet, shows the command
  cannot work as given (status 2: a usage error such as a bad MODULE:APP; 1: a failing start
  hook, no server): the supervisor stops the others and exits with that status instead of
  restarting forever. With `--reload` it waits for the next file change instead.
- **Stop.** The first SIGTERM/SIGINT is forwarded as SIGTERM to every worker process, which
  drain within `--grace`; the supervisor exits 0 once all have exited. A second signal is
  forwarded too (the workers exit at once) and the supervisor then exits 1, as does a stop
  where a process still running `grace + 5` s after its SIGTERM had to be killed.
- **Reload.** With `--reload`, a change to a `.py` file under the working directory restarts
  every worker process the same graceful way (SIGTERM, up to `grace + 5` s, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from taskq.errors import ended
from taskq.workers.tether import READY_FD, SUPERVISOR_PID, WORKER_PROCESS

log = logging.getLogger("taskq.worker")

FIRST_DELAY = 1.0  # seconds before restarting a failed worker process, doubling ...
MAX_DELAY = 30.0  # ... up to this
STABLE_AFTER = 30.0  # a process that ran this long resets the backoff
KILL_AFTER_GRACE = 5.0  # extra seconds past --grace before a stopping process is killed


@dataclass(frozen=True)
class Plan:
    """What to supervise: `processes` copies of `command`, each stopping within `grace`."""

    command: tuple[str, ...]
    processes: int
    grace: float
    reload: bool = False
    watch: Path = field(default_factory=Path.cwd)  # what --reload watches


def worker_command() -> tuple[str, ...]:
    """This process's command line again, as a worker process runs it.

    `sys.argv` is the command line as typed (the `taskq` script or `python -m taskq`), so a
    `main(argv)` called from Python with other arguments is not what gets repeated.
    """
    return (sys.executable, "-m", "taskq", *sys.argv[1:])


def supervise(plan: Plan) -> int:
    """Run the supervisor until it is stopped; its exit status."""
    return asyncio.run(Supervisor(plan).run())


@dataclass(eq=False)
class Slot:
    """One of the N worker processes: its current process and its restart state."""

    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    ready: bool = False
    delay: float = FIRST_DELAY
    reloading: bool = False  # terminated for --reload: start again at once
    signalled: bool = False  # sent its SIGTERM: a second one would make it exit at once
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # ends a backoff early

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0


class Supervisor:
    """Starts, restarts, reloads and stops the worker processes of one `taskq worker`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.slots = [Slot(index) for index in range(1, plan.processes + 1)]
        self.stopping = False
        self._ever_ready = False
        self._give_up_code: int | None = None
        self._forced = False  # a second signal, or a kill at the deadline
        self._signals = 0
        self._timers: set[asyncio.Task[None]] = set()

    async def run(self) -> int:
        """Keep the worker processes running until a signal; the exit status."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        log.info(
            "supervisor (pid %d): starting %d worker process(es)%s",
            os.getpid(),
            len(self.slots),
            f", reloading on .py changes under {self.plan.watch}" if self.plan.reload else "",
        )
        watcher = asyncio.create_task(self._reload_on_change()) if self.plan.reload else None
        try:
            await asyncio.gather(*(self._keep(slot) for slot in self.slots))
        finally:
            for job in [*self._timers, *([watcher] if watcher else [])]:
                job.cancel()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        log.info("supervisor: all worker processes stopped")
        if self._give_up_code is not None:
            return self._give_up_code
        return 1 if self._forced else 0

    # -- one worker process ----------------------------------------------------------------
    async def _keep(self, slot: Slot) -> None:
        """Run worker process `slot.index` again and again until the supervisor stops."""
        while not self.stopping:
            code = await self._run_once(slot)
            if self.stopping:
                return
            pause = self._pause_after(slot, code)
            if pause is None:
                self._give_up(slot, code)
                return
            if pause > 0:
                timeout = None if math.isinf(pause) else pause
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(slot.wake.wait(), timeout)

    async def _run_once(self, slot: Slot) -> int:
        """Start worker process `slot.index`, wait for it to exit; its return code."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        slot.wake.clear()  # from here on, a wake-up is for the backoff after this run
        slot.proc, slot.started, slot.ready, slot.signalled = None, time.monotonic(), False, False
        try:
            slot.proc = await asyncio.create_subprocess_exec(
                *self.plan.command,
                env=self._env(slot, write_fd),
                pass_fds=(write_fd,),
                process_group=0,  # a terminal's Ctrl-C reaches the supervisor only
                stdin=asyncio.subprocess.DEVNULL,  # a background process group may not read it
            )
        except OSError as exc:
            os.close(read_fd)
            log.error("supervisor: cannot start worker process %d: %s", slot.index, exc)
            return 1
        finally:
            os.close(write_fd)  # the child holds the only write end: EOF once it is gone
        log.info("supervisor: started worker process %d (pid %d)", slot.index, slot.pid)
        if self.stopping:  # a signal arrived while it was being started
            self._terminate(slot)
        loop = asyncio.get_running_loop()
        loop.add_reader(read_fd, self._read_ready, slot, read_fd)
        try:
            return await slot.proc.wait()
        finally:
            loop.remove_reader(read_fd)
            self._read_ready(slot, read_fd)  # a byte that came just before the exit
            os.close(read_fd)

    def _env(self, slot: Slot, ready_fd: int) -> dict[str, str]:
        return {
            **os.environ,
            WORKER_PROCESS: str(slot.index),
            SUPERVISOR_PID: str(os.getpid()),
            READY_FD: str(ready_fd),
        }

    def _read_ready(self, slot: Slot, fd: int) -> None:
        """Read the worker's ready byte, if it has written it."""
        try:
            data = os.read(fd, 1)
        except (BlockingIOError, OSError):
            return
        if not data:  # end of file: exited before ready; stop watching the pipe
            asyncio.get_running_loop().remove_reader(fd)
        elif not slot.ready:
            slot.ready = self._ever_ready = True
            log.debug("supervisor: worker process %d (pid %d) is ready", slot.index, slot.pid)

    def _pause_after(self, slot: Slot, code: int) -> float | None:
        """Seconds to wait before starting `slot` again (inf: until a file changes), or
        None: give up, the command cannot work."""
        if slot.reloading:
            slot.reloading, slot.delay = False, FIRST_DELAY
            return 0.0
        if code == 0 and slot.ready:
            log.info(
                "supervisor: worker process %d (pid %d) recycled; starting a new one",
                slot.index,
                slot.pid,
            )
            return 0.0
        if code > 0 and not slot.ready:
            if self.plan.reload:
                log.error(
                    "supervisor: worker process %d (pid %d) %s before it was ready; "
                    "waiting for a .py file to change",
                    *(slot.index, slot.pid, ended(code)),
                )
                return math.inf
            if not self._ever_ready:
                return None
        return self._backoff(slot, code)

    def _backoff(self, slot: Slot, code: int) -> float:
        """The next restart delay of `slot`: 1 s doubling to 30 s, reset by a 30 s run."""
        if time.monotonic() - slot.started >= STABLE_AFTER:
            slot.delay = FIRST_DELAY
        pause, slot.delay = slot.delay, min(MAX_DELAY, slot.delay * 2)
        log.warning(
            "supervisor: worker process %d (pid %d) %s; restarting in %.1fs",
            *(slot.index, slot.pid, ended(code), pause),
        )
        return pause

    def _give_up(self, slot: Slot, code: int) -> None:
        log.error(
            "supervisor: worker process %d (pid %d) %s before it was ready, and no worker "
            "process has been ready yet: giving up (restarting would fail the same way)",
            *(slot.index, slot.pid, ended(code)),
        )
        self._give_up_code = code
        self._stop_all()

    # -- stopping and reloading ------------------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info(
                "supervisor: %s received: stopping %d worker process(es) (grace %.0fs)",
                *(name, len(self.slots), self.plan.grace),
            )
            self._stop_all()
            return
        log.warning("supervisor: second signal: forwarding %s, the workers exit now", name)
        self._forced = True
        for slot in self.slots:
            if slot.running and slot.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.send_signal(signum)

    def _stop_all(self) -> None:
        self.stopping = True
        for slot in self.slots:
            slot.wake.set()
            self._terminate(slot)

    def _terminate(self, slot: Slot) -> None:
        """SIGTERM `slot`'s process (a graceful stop); SIGKILL it if still running after
        grace + 5 s."""
        if not slot.running or slot.proc is None or slot.signalled:
            return
        slot.signalled = True
        with contextlib.suppress(ProcessLookupError):
            slot.proc.terminate()
        timer = asyncio.create_task(self._kill_late(slot, slot.proc))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _kill_late(self, slot: Slot, proc: asyncio.subprocess.Process) -> None:
        deadline = self.plan.grace + KILL_AFTER_GRACE
        try:
            await asyncio.wait_for(proc.wait(), deadline)
        except TimeoutError:
            log.warning(
                "supervisor: worker process %d (pid %d) still running %.0fs after SIGTERM: "
                "killing it",
                *(slot.index, proc.pid, deadline),
            )
            self._forced = self._forced or self.stopping
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def _reload_on_change(self) -> None:
        """With --reload: restart every worker process when a .py file under `watch` changes."""
        from watchfiles import PythonFilter, awatch

        async for changes in awatch(self.plan.watch, watch_filter=PythonFilter()):
            if self.stopping:
                return
            files = sorted({os.path.relpath(path, self.plan.watch) for _, path in changes})
            log.info(
                "supervisor: %s changed: restarting %d worker process(es)",
                *(", ".join(files), len(self.slots)),
            )
            for slot in self.slots:
                if slot.running:
                    slot.reloading = True
                    self._terminate(slot)
                else:  # in a backoff, or waiting for a fix after a failed start
                    slot.delay = FIRST_DELAY
                    slot.wake.set()
