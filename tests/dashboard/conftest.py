"""Dashboard fixtures: `taskq dashboard` as a user runs it (on a free port, against the
test's server and prefix; in a thread of the test process, or a subprocess), plain HTTP to
it, and a real headless Chromium (Debian's, installed by the project when missing) driven
by Playwright."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright

from taskq.cli.main import main
from taskq.dashboard import serve
from tests.conftest import ROOT, cli_argv
from tests.dashboard.browser import FLAGS, ensure_chromium
from tests.dashboard.http import Http
from tests.system_packages import Prerequisite

IMAGES = ROOT / "docs" / "images"
CHROMIUM = Prerequisite("chromium", ensure_chromium, "browser tests need Chromium")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    CHROMIUM.collected(items)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The Chromium binary; the test FAILS (never skips) when there is none."""
    CHROMIUM.require()
    return str(ensure_chromium())


@pytest.fixture(scope="session")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One Chromium per test process, which each test's `page` reaches over CDP."""
    running = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield running
    running.stop()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh browser context (its own cookies, storage and cache, as a new profile) and
    one page, laptop-sized, in this test process's Chromium."""
    async with async_playwright() as playwright:
        connected = await playwright.chromium.connect_over_cdp(browser.endpoint())
        context = await connected.new_context(viewport={"width": 1280, "height": 800})
        tab = await context.new_page()
        tab.set_default_timeout(15_000)
        yield tab
        await context.close()
        await connected.close()


class Browser:
    """Chromium with its DevTools endpoint open on a free loopback port, started again if
    it died. A launch per test cost ~2 s of CPU (the browser, its GPU, utility and zygote
    processes); a context per test isolates as well."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def endpoint(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        return self.url

    def _start(self) -> None:
        argv = [self.binary, *FLAGS, "--hide-scrollbars", "--remote-debugging-port=0"]
        self.proc = subprocess.Popen(
            [*argv, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        said: list[str] = []
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # ends when Chromium exits
            said.append(line)
            if line.startswith("DevTools listening on "):
                self.url = line.split(" on ", 1)[1].strip()
                break
        else:
            raise AssertionError("Chromium did not start:\n" + "".join(said))
        # its later output is read (and dropped) so that a full pipe never blocks it
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


async def shoot(tab: Page, name: str) -> Path:
    """A screenshot for docs/dashboard.md: docs/images/dashboard-<name>.png."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / f"dashboard-{name}.png"
    await tab.screenshot(path=str(path), full_page=True)
    return path


class DashboardProcess:
    """`taskq --url URL --prefix P dashboard --port 0 ARGS...` in a subprocess (for a test
    about the process itself: its memory, its signals)."""

    def __init__(self, nats_url: str, prefix: str, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            cli_argv(nats_url, prefix, "dashboard", "--port", "0", *args),
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        self.url = self._announced()
        self.http = Http(self.url)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _announced(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if " at http://" in line:
                    return line.split(" at ", 1)[1].split()[0].rstrip("/")
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise AssertionError("the dashboard did not start:\n" + "".join(self.lines))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        if len(self.lines) > 1:  # shown with a failing test's captured output
            print(f"dashboard output (exit {code}):\n" + "".join(self.lines))
        return code


class Dashboard:
    """`taskq --url URL --prefix P dashboard --port 0 ARGS...` run by `taskq.cli.main` in a
    thread of this process (its own event loop), as the command runs it: its options and
    `env` parsed by click, its connection and server made by `taskq.dashboard.serve.run`.
    A new interpreter would cost ~1.5 s of CPU per dashboard for nothing these tests are
    about; stopping cancels the served coroutine (the command's `finally` closes its
    connection and socket) instead of sending SIGTERM."""

    def __init__(self, nats_url: str, prefix: str, *args: str, env: dict[str, str]) -> None:
        self.argv = cli_argv(nats_url, prefix, "dashboard", "--port", "0", *args)[3:]
        self.serving: Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None], str]] = Future()
        self.ended: Future[int] = Future()
        self.lines: list[str] = []
        with _environment(env):  # read while the command parses and connects
            threading.Thread(target=self._run, name="taskq-dashboard", daemon=True).start()
            try:
                self.loop, self.task, url = self.serving.result(30)
            except Exception as exc:
                raise AssertionError(f"the dashboard did not start: {exc!r}") from None
        self.url = url.rstrip("/")
        self.http = Http(self.url)

    def _run(self) -> None:
        code = 0
        try:
            with _SERVING.recording(self):
                main(self.argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # cancelled by stop(), or a failure to start
            # (the served task is read from `serving`: __init__ may not have unpacked it yet)
            served = self.serving.done() and self.serving.result()[1].cancelled()
            code = 0 if served else 1
            if not self.serving.done():
                self.serving.set_exception(exc)
        if not self.serving.done():
            self.serving.set_exception(RuntimeError(f"the command exited {code}"))
        self.ended.set_result(code)

    def stop(self) -> int:
        with contextlib.suppress(RuntimeError):  # its loop closed: the command ended
            self.loop.call_soon_threadsafe(self.task.cancel)
        return self.ended.result(15)


class _Recorder:
    """What `taskq.dashboard.serve.run` is wrapped with while these tests run: the call in
    a Dashboard's thread reports its loop, task and announced URL to that Dashboard."""

    def __init__(self) -> None:
        self.boards: dict[int, Dashboard] = {}
        self.run = serve.run

    @contextlib.contextmanager
    def recording(self, board: Dashboard) -> Iterator[None]:
        self.boards[threading.get_ident()] = board
        try:
            yield
        finally:
            del self.boards[threading.get_ident()]

    async def wrapped(self, config: Any, announce: Callable[[str], None]) -> None:
        board = self.boards.get(threading.get_ident())
        if board is None:  # a command run otherwise (run_cli): as it is
            return await self.run(config, announce)

        def announced(url: str) -> None:
            said = io.StringIO()  # the line the command prints, for tests that read it
            with contextlib.redirect_stdout(said):
                announce(url)
            board.lines.append(said.getvalue())
            task = asyncio.current_task()
            assert task is not None
            board.serving.set_result((asyncio.get_running_loop(), task, url))

        return await self.run(config, announced)


_SERVING = _Recorder()
serve.run = _SERVING.wrapped  # type: ignore[assignment]


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """`env` set over this process's environment, restored after."""
    kept = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def start_dashboard(nats_url: str, prefix: str) -> Iterator[Callable[..., Dashboard]]:
    """Start dashboards on the test's server and prefix (stopped after the test)."""
    started: list[Dashboard | DashboardProcess] = []

    def start(
        *args: str, env: dict[str, str] | None = None, url: str = "", process: bool = False
    ) -> Any:
        kind = DashboardProcess if process else Dashboard
        board = kind(url or nats_url, prefix, *args, env=env or {})
        started.append(board)
        return board

    yield start
    for board in started:
        board.stop()


@pytest.fixture
def dashboard(start_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """One dashboard with the default options."""
    return start_dashboard()
