"""The `taskq` command as a user runs it: exit codes, one-line errors, enqueue, server, demo."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from taskq import __version__ as taskq_version
from taskq.ports import lease_port
from taskq.server import port_open
from tests import forked
from tests.conftest import HANG, ROOT

APP = "tests.apps.ledger:app"


def taskq(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`taskq ARGS` as a process of its own (forked: tests/forked.py)."""
    return forked.run(list(args), ROOT, timeout)


def fresh_taskq(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m taskq ARGS` in a new interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "taskq", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_missing_server_is_one_line_exit_1() -> None:
    url = f"nats://127.0.0.1:{lease_port()}"
    result = taskq("--url", url, "enqueue", APP, "quick", '["x"]')
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"taskq: cannot reach NATS at {url}: start one with `taskq server`"
    ]


def test_missing_server_for_worker_too() -> None:
    url = f"nats://127.0.0.1:{lease_port()}"
    result = taskq("--url", url, "worker", APP)
    assert result.returncode == 1 and "cannot reach NATS at" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("worker",),
        ("enqueue", APP),
        ("enqueue", APP, "no_such_task"),
        ("enqueue", "no_such_module:app", "quick"),
        ("enqueue", "tests.apps.ledger:nothing", "quick"),
        ("enqueue", APP, "quick", "{not json"),
        ("worker", APP, "-c", "0"),
        ("no-such-command",),
        ("--prefix", "bad.prefix", "enqueue", APP, "quick", '["x"]'),
    ],
)
def test_bad_usage_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    result = taskq(*args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_arguments_not_fitting_the_signature_exit_2(nats_url: str, prefix: str) -> None:
    result = taskq("--url", nats_url, "--prefix", prefix, "enqueue", APP, "slow", '["a", "x"]')
    assert result.returncode == 2 and "seconds" in result.stderr


def test_enqueue_prints_id_and_honours_key(nats_url: str, prefix: str) -> None:
    base = ("--url", nats_url, "--prefix", prefix, "enqueue", APP, "quick")
    plain = taskq(*base, '["t1"]')
    assert plain.returncode == 0 and len(plain.stdout.strip()) == 26  # a ULID
    first = json.loads(taskq(*base, '{"token": "t2"}', "--key", "k-1", "--json").stdout)
    again = json.loads(taskq(*base, '{"token": "t2"}', "--key", "k-1", "--json").stdout)
    assert first["id"] == again["id"] == "k-1"
    assert first["duplicate"] is False and again["duplicate"] is True


def test_server_command_runs_in_foreground_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = lease_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskq",
            "server",
            "--port",
            str(port),
            "--store-dir",
            str(tmp_path / "store"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + HANG  # only catches a server that never listens
        while not port_open("127.0.0.1", port):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, f"`taskq server` not listening after {HANG:g} s"
            time.sleep(0.05)
        assert (tmp_path / "store").is_dir()
        # by default the server fsyncs every write (docs/operations.md#durability)
        (nats,) = psutil.Process(proc.pid).children()
        config = nats.cmdline()[nats.cmdline().index("-c") + 1]
        assert 'sync_interval: "always"' in Path(config).read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not Path(config).exists()  # the generated config is removed
    finally:
        if proc.poll() is None:
            proc.kill()


def test_server_sync_must_be_always_or_a_duration() -> None:
    result = taskq("server", "--sync", "sometimes")
    assert result.returncode == 2
    assert "sync must be 'always' or a duration" in result.stderr


@pytest.mark.heavy
# a JVM and 1,204 tasks: ~40 s alone, past 120 s once at the suite's busy start (the
# deadline catches a hang, not a loaded machine)
@pytest.mark.timeout(300)
def test_demo_runs_end_to_end() -> None:
    result = taskq("demo", "--tasks", "200", timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "succeeded      1204" in out and "dead-lettered  1" in out  # 1,001 on Spark
    assert "doomed: exhausted" in out
    assert "sum_of_range(1,000,000) = 499,999,500,000" in out and "word_score" in out
    assert_workflow_run(out)
    store = re.search(r"\(store (\S+)\)", out)
    assert store and not Path(store.group(1)).exists()  # its data went with it


def assert_workflow_run(out: str) -> str:
    """The demo ran one durable workflow to success and told its steps; its run id."""
    started = re.search(r"workflow fulfil\('A-1002'\) started as run (\S+):", out)
    assert started, out
    run_id = started.group(1)
    assert "fulfil('A-1002') succeeded in " in out and f"run {run_id}, as " in out
    steps = re.findall(r"^ +(\d+)  (run|sleep) +(reserve|ship)? +(\w+)$", out, re.MULTILINE)
    assert steps == [
        ("0", "run", "reserve", "succeeded"),
        ("1", "sleep", "", "fired"),
        ("2", "run", "ship", "succeeded"),
    ], out
    return run_id


@pytest.mark.heavy
def test_demo_without_spark_serves_its_dashboard_and_workflow_run_until_ctrl_c() -> None:
    demo = ["demo", "--no-spark", "--tasks", "5", "--dashboard", "--dashboard-port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskq", *demo],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        told: list[str] = []
        deadline = time.monotonic() + 90
        while not (told and told[-1].startswith("workflows ")) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "the demo ended before serving the dashboard:\n" + "".join(told)
            told.append(line)
        text = "".join(told)
        assert "succeeded      8" in text and "spark    skipped" in text, text
        # the system keeps running under the dashboard it names
        url = next(line.split()[1] for line in told if line.startswith("dashboard "))
        with urllib.request.urlopen(url + "api/", timeout=10) as reply:
            assert b'"queue": "default"' in reply.read()
        run_id = assert_workflow_run(text)
        # `workflows  taskq --url URL --prefix demo workflows ls`: the command it names works
        command = told[-1].split()[1:]
        listed = taskq(*command[1:])
        assert listed.returncode == 0, listed.stderr
        assert re.search(rf"succeeded +fulfil +{run_id}", listed.stdout), listed.stdout
        shown = taskq(*command[1:-1], "show", run_id)
        assert shown.returncode == 0, shown.stderr
        assert f"run {run_id}  fulfil  succeeded" in shown.stdout
        assert "reserve" in shown.stdout and "ship" in shown.stdout, shown.stdout
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        store = re.search(r"\(store (\S+)\)", text)
        assert store and not Path(store.group(1)).exists()  # Ctrl-C took its data too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_version_and_help() -> None:
    version = fresh_taskq("--version")
    assert version.returncode == 0 and taskq_version in version.stdout, version.stdout
    assert "worker" in fresh_taskq("--help").stdout
