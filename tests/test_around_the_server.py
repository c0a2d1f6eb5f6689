"""Around the server (issue 39, 10): a worker started before its server waits for it with
`--wait-for-server`; an outage's reconnect errors are told less and less often; `taskq
server --monitor-port` lets `taskq doctor` pass every check; `taskq dlq show 0` is no dead
letter, exit 2 (the dashboard's page for it is a 404: tests/dashboard/test_dlq_pages.py)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from taskq import App
from taskq.ports import lease_port, release_port
from taskq.server import EmbeddedServer
from tests.conftest import ROOT, WorkerProcess, run_cli, running_worker, wait_until


async def test_a_worker_started_before_its_server_waits_for_it(tmp_path: Path, prefix: str) -> None:
    port = lease_port()
    url = f"nats://127.0.0.1:{port}"
    release_port(port)
    waiting = WorkerProcess(url, prefix, "tests.apps.deploy_new:app", "--wait-for-server", "60")
    server = None
    try:
        await wait_until(lambda: "waiting for NATS at" in waiting.output(), timeout=30)
        assert waiting.proc.poll() is None  # still waiting, not exited
        server = EmbeddedServer(port=port, store_dir=tmp_path / "store").start()
        await waiting.wait_ready(60)
    finally:
        waiting.close()
        if server is not None:
            server.stop()
    # without it, one line and exit 1 at once, as before
    # fresh: "cannot reach NATS" as a real interpreter ends with it (and a worker's start)
    gone = run_cli(url, prefix, "worker", "tests.apps.deploy_new:app", fresh=True)
    assert gone.returncode == 1 and "cannot reach NATS" in gone.stderr


async def test_an_outage_s_reconnect_errors_are_told_less_and_less_often(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedServer(store_dir=tmp_path / "store").start()
    app = App(url=server.url, prefix="outage")
    caplog.set_level(logging.INFO, logger="taskq")
    try:
        async with running_worker(app):
            server.kill()
            await wait_until(lambda: _said(caplog, "disconnected, reconnecting"), timeout=30)
            await asyncio.sleep(8.0)  # the outage: nats-py retries every half second
            errors = [r for r in caplog.records if r.getMessage().startswith("NATS: ")]
            server = EmbeddedServer(port=server.port, store_dir=tmp_path / "store").start()
            await wait_until(lambda: _said(caplog, "NATS: reconnected after"), timeout=30)
        told = [r for r in errors if "reconnect" not in r.getMessage()]
        # 1 s, 2 s, 4 s apart: at most 4 in 8 s (before, one every half second: 16)
        assert 1 <= len(told) <= 5, [r.getMessage() for r in told]
    finally:
        await app.aclose()
        server.stop()


def _said(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in r.getMessage() for r in caplog.records)


def test_taskq_server_with_a_monitor_port_passes_every_doctor_check(tmp_path: Path) -> None:
    port, monitor = lease_port(), lease_port()
    release_port(port)
    release_port(monitor)
    argv = [sys.executable, "-m", "taskq", "server", "--port", str(port)]
    argv += ["--store-dir", str(tmp_path), "--monitor-port", str(monitor)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "monitoring on" in proc.stdout.readline() + proc.stdout.readline()
        url, monitored = f"nats://127.0.0.1:{port}", f"http://127.0.0.1:{monitor}"
        for _ in range(100):  # bounded: the server listens within seconds
            done = run_cli(url, "taskq", "doctor", "--monitor", monitored)
            if "cannot reach" not in done.stdout:
                break
        assert done.returncode == 0, done.stdout
        assert done.stdout.splitlines()[-1] == "doctor: 10 ok, 0 warn, 0 fail", done.stdout
    finally:
        proc.terminate()
        proc.wait(20)


def test_dlq_show_of_sequence_0_is_no_dead_letter(nats_url: str, prefix: str) -> None:
    done = run_cli(nats_url, prefix, "dlq", "show", "0")
    assert done.returncode == 2
    assert "no dead letter '0'" in done.stderr and "bad request" not in done.stderr
