"""The guides run as written (issue 27): docs/tutorial.md end to end, as a reader types it,
against its own `taskq server`; docs/from-celery.md's module, fragments and commands
against a real server with a worker of the module. A snippet that stops working fails here;
a python block the runner does not know how to run fails too (tests/guides.py)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
import shlex
import sys
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from taskq import App
from taskq.ports import lease_port, release_port
from taskq.records.schedules import list_schedules
from taskq.testing import worker
from tests.conftest import ROOT
from tests.guides import (
    BIN,
    BLOCKING,
    DOCS,
    Background,
    Block,
    Project,
    Shell,
    check_output,
    compiled,
    environment,
    parse_only,
    read_blocks,
    run_fragment,
)

TUTORIAL = DOCS / "tutorial.md"
FROM_CELERY = DOCS / "from-celery.md"
GUIDES = (TUTORIAL, FROM_CELERY)


# -- the guides are linked, and their links lead somewhere ------------------------------------
def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_relative_link_of_a_guide_resolves(guide: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", guide.read_text()):
        if "://" in target:
            continue
        name, _, anchor = target.partition("#")
        path = (guide.parent / name) if name else guide
        if not path.exists() or (anchor and anchor not in _anchors(path)):
            broken.append(target)
    assert broken == []


def test_the_guides_are_linked_from_the_readme_tutorial_first_and_from_concepts() -> None:
    readme = (ROOT / "README.md").read_text()
    docs = readme.split("## Documentation", 1)[1]
    links = re.findall(r"^\* \[([^\]]+)\]", docs, re.MULTILINE)
    assert links[:2] == ["docs/tutorial.md", "docs/from-celery.md"]
    concepts = (DOCS / "concepts.md").read_text()
    assert "(tutorial.md)" in concepts and "(from-celery.md)" in concepts


# -- the runner fails where a reader would ----------------------------------------------------
def _guide(tmp_path: Path, text: str) -> list[Block]:
    path = tmp_path / "guide.md"
    path.write_text(text)
    return read_blocks(path)


async def test_the_runner_fails_on_a_broken_snippet(tmp_path: Path) -> None:
    """Given blocks that do not do what they say, then running them fails, naming the
    guide's line."""
    fence = "```"
    blocks = _guide(
        tmp_path,
        f"{fence}python\n# in async code\nimport asyncio\n\nawait asyncio.sleep(0)\n"
        f"assert 1 + 1 == 3\n{fence}\n\n{fence}python\nprint('no marker')\n{fence}\n\n"
        f"{fence}sh\nfalse\ntrue   # exits 1\n{fence}\n\n{fence}text\nfour\n{fence}\n",
    )
    fragment, unmarked, shell, output = blocks
    with pytest.raises(AssertionError) as failed:
        await run_fragment(fragment)
    assert failed.traceback[-1].lineno + 1 == 6  # the guide's own line number
    with pytest.raises(AssertionError, match="head it with"):
        _ = unmarked.kind
    terminal = Shell(tmp_path, environment())
    for line in shell.commands():
        with pytest.raises(AssertionError, match="exited"):
            terminal.run(line, shell.where)
    with pytest.raises(AssertionError, match="no line of the output matches 'four'"):
        check_output(output, "one\nfourteen\n")


# -- the tutorial, as a reader types it -------------------------------------------------------
class Tutorial:
    """A reader's three terminals: the server and the worker (running), and the shell."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.project = root / "shop"
        self.project.mkdir()
        self.files = Project(self.project)
        self.env = environment(
            # a pytest the reader runs keeps its temporary files inside this test's
            PYTEST_ADDOPTS=f"--basetemp={root / 'pytest'} -p no:cacheprovider"
        )
        self.shell = Shell(self.project, self.env)
        self.running: dict[str, Background] = {}  # by role: server, worker, dashboard
        self.started: list[Background] = []  # every process, killed at the end if need be
        self.port = 0
        self.workers = 0  # started so far
        self.output = ""  # what the last command block printed
        self.last: Background | None = None  # the last command, when it runs on
        self.aliases: dict[str, str] = {}  # port actually used -> the default the guide shows

    async def step(self, block: Block) -> None:
        kind = block.kind
        if kind in ("file", "continued", "changed"):
            self.files.apply(block)
        elif kind == "text":
            self.check(block)
        elif kind == "sh":
            await self.commands(block)
        else:
            raise AssertionError(f"{block.where}: a tutorial has files and commands only")

    def check(self, block: Block) -> None:
        produced = self.last.output() if self.last is not None else self.output
        for real, shown in self.aliases.items():
            produced = produced.replace(real, shown)
        check_output(block, produced)

    async def commands(self, block: Block) -> None:
        lines = block.commands()
        first = shlex.split(lines[0], comments=True)
        if first[:3] == ["python3", "-m", "venv"]:  # the install: the README's command
            assert lines[0] in (ROOT / "README.md").read_text(), block.where
            self.output, self.last = "", None
        elif first[0] == "taskq" and first[1] in BLOCKING:
            assert len(lines) == 1, f"{block.where}: a command that blocks stands alone"
            await getattr(self, f"start_{first[1]}")(first)
        else:
            outputs = [await asyncio.to_thread(self.shell.run, ln, block.where) for ln in lines]
            self.output, self.last = "".join(outputs), None

    async def start_server(self, argv: list[str]) -> None:
        self.port = lease_port()  # 4222 may be taken on this machine
        self.aliases[f"127.0.0.1:{self.port}"] = "127.0.0.1:4222"
        server = self.background("server", [*argv, "--port", str(self.port)])
        await server.wait_for("Server is ready")
        self.env["TASKQ_URL"] = f"nats://127.0.0.1:{self.port}"

    async def start_worker(self, argv: list[str]) -> None:
        old = self.running.pop("worker", None)
        if old is not None:  # the reader stops it with Ctrl-C first
            assert await old.stop() == 0, old.output()
        self.workers += 1
        worker_ = self.background("worker", argv, name=f"worker{self.workers}")
        await worker_.wait_for("worker ready")

    async def start_dashboard(self, argv: list[str]) -> None:
        dashboard = self.background("dashboard", [*argv, "--port", "0"])
        await dashboard.wait_for("taskq dashboard at")
        url = re.search(r"http://[\d.:]+/", dashboard.output())
        assert url, dashboard.output()
        self.aliases[url.group(0)] = "http://127.0.0.1:8787/"
        overview = await _get_json(url.group(0) + "api/")
        assert [q["queue"] for q in overview["queues"]] == ["default"]
        assert len(overview["workers"]) == 1
        names = [s["name"] for s in await _get_json(url.group(0) + "api/schedules")]
        assert "periodic.stock_check" in names
        kiwi = await _get_json(url.group(0) + f"api/tasks/{self.shell.variables['KIWI']}")
        assert kiwi["state"] == "succeeded", kiwi
        assert await self.running.pop("dashboard").stop() == 0

    def background(self, role: str, argv: list[str], name: str = "") -> Background:
        process = Background(
            [str(BIN / argv[0]), *argv[1:]],
            self.project,
            self.env,
            self.root / f"{name or role}.log",
        )
        self.running[role] = self.last = process
        self.started.append(process)
        return process

    async def finish(self) -> None:
        """What the reader saw in the worker's terminal, then Ctrl-C in each."""
        worker_ = self.running.pop("worker")
        await worker_.wait_for("stock checked", timeout=30)  # the periodic task ran
        assert await worker_.stop() == 0, worker_.output()
        assert await self.running.pop("server").stop() == 0

    def close(self) -> None:
        for process in self.started:
            process.kill()
        if self.port:
            release_port(self.port)


async def _get_json(url: str) -> Any:
    def get() -> Any:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)

    return await asyncio.to_thread(get)


@pytest.mark.heavy
@pytest.mark.timeout(300)  # ~25 s alone; 120 s was passed once at the suite's busy start
async def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """Given a fresh directory, when every file of the tutorial is written and every
    command run in order (the server, the worker and the dashboard as processes of their
    own), then each prints what the tutorial shows and the periodic task runs."""
    tutorial = Tutorial(tmp_path)
    try:
        for block in read_blocks(TUTORIAL):
            await tutorial.step(block)
        await tutorial.finish()
    finally:
        tutorial.close()


# -- from Celery: the module, the fragments and the commands ----------------------------------
@pytest.fixture
def shop(tmp_path: Path, nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The guide's `shop.py`, written from its blocks and imported, on this test's server
    and prefix; other-library blocks compiled."""
    files = Project(tmp_path)
    for block in read_blocks(FROM_CELERY):
        if block.kind in ("file", "continued", "changed"):
            files.apply(block)
        elif block.kind == "foreign":
            compiled(block)
    monkeypatch.setenv("TASKQ_URL", nats_url)
    monkeypatch.setenv("TASKQ_PREFIX", prefix)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop", raising=False)
    module = importlib.import_module("shop")
    yield module
    module.app.close()  # the connection `delay()` opened on the app's own loop
    sys.modules.pop("shop", None)


@pytest.mark.heavy
@pytest.mark.timeout(300)  # as the tutorial: a hang, not a loaded machine, is what it catches
async def test_from_celery_runs_as_written(
    shop: ModuleType, tmp_path: Path, nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Given shop.py as the guide builds it and a worker of it, when every fragment and
    command of the guide runs in order, then each does what it asserts, and the dead
    letters, schedules, middleware and hooks are the guide's."""
    caplog.set_level(logging.INFO, logger="shop")
    env = environment(
        TASKQ_URL=nats_url,
        TASKQ_PREFIX=prefix,
        PYTEST_ADDOPTS=f"--basetemp={tmp_path / 'pytest'} -p no:cacheprovider",
    )
    shell, printed = Shell(tmp_path, env), {}
    async with worker(shop.app) as w:
        assert shop.RATES == {"EUR": 1.0, "USD": 1.1}  # the start hook ran
        for block in read_blocks(FROM_CELERY):
            if block.kind in ("async", "sync"):
                await run_fragment(block)
            elif block.kind == "sh":
                printed |= await _commands(shell, block)
        await w.drain()
    assert shop.RATES == {}  # the stop hook ran
    dead = {(d.task, d.reason, d.error.type) for d in w.dead.values()}
    assert dead == {("charge", "permanent", "Reject"), ("fetch_rate", "permanent", "ValueError")}
    assert all(d.message.meta == {"source": "shop"} for d in w.dead.values())  # middleware
    assert any("add succeeded in" in r.getMessage() for r in caplog.records)
    assert "charge" in printed["taskq dlq ls --task charge"]
    assert "2 passed" in printed["pytest -q test_shop.py"]
    await _check_schedules(shop.app)


async def _commands(shell: Shell, block: Block) -> dict[str, str]:
    """Run a block's `taskq` and `pytest` lines (parse those that block); what each printed."""
    printed = {}
    for line in block.commands():
        argv = shlex.split(line, comments=True)
        if argv[0] == "taskq" and argv[1] in BLOCKING:
            parse_only(line)
        else:
            assert argv[0] in ("taskq", "pytest"), f"{block.where}: {line}"
            printed[" ".join(argv)] = await asyncio.to_thread(shell.run, line, block.where)
    return printed


async def _check_schedules(app: App) -> None:
    """The periodic tasks are registered; the delayed calls (countdown, eta) are held as
    schedules (the cancelled one too: it fires, and is not run)."""
    client = await app.client()
    try:
        found = {s.name: s.expression for s in await list_schedules(client)}
    finally:
        await app.aclose()
    assert found.pop("periodic.nightly_report") == "0 0 3 * * *"
    assert found.pop("periodic.refresh_rate") == "@every 30s"
    # the eta five minutes ahead is still waiting (countdowns may have fired by now)
    assert found and all(name.startswith("task.") for name in found), found
