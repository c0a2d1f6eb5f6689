"""Dashboard fixtures: `taskq dashboard` as a user runs it (a subprocess on a free port,
against the test's server and prefix), plain HTTP to it, and a real headless Chromium
(Debian's, installed by the project when missing) driven by Playwright."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright

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


@pytest.fixture
async def page(chromium: str) -> AsyncIterator[Page]:
    """A fresh browser (its own empty profile) and one page, laptop-sized."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=list(FLAGS))
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        tab = await context.new_page()
        tab.set_default_timeout(15_000)
        yield tab
        await browser.close()


async def shoot(tab: Page, name: str) -> Path:
    """A screenshot for docs/dashboard.md: docs/images/dashboard-<name>.png."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / f"dashboard-{name}.png"
    await tab.screenshot(path=str(path), full_page=True)
    return path


class Dashboard:
    """`taskq --url URL --prefix P dashboard --port 0 ARGS...` in a subprocess."""

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


@pytest.fixture
def start_dashboard(nats_url: str, prefix: str) -> Iterator[Callable[..., Dashboard]]:
    """Start dashboards on the test's server and prefix (stopped after the test)."""
    started: list[Dashboard] = []

    def start(*args: str, env: dict[str, str] | None = None, url: str = "") -> Dashboard:
        board = Dashboard(url or nats_url, prefix, *args, env=env or {})
        started.append(board)
        return board

    yield start
    for board in started:
        board.stop()


@pytest.fixture
def dashboard(start_dashboard: Callable[..., Dashboard]) -> Dashboard:
    """One dashboard with the default options."""
    return start_dashboard()
