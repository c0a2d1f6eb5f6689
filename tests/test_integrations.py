"""The framework examples run for real: uvicorn serving examples/fastapi_app and Django's
runserver serving examples/django_app, each beside a `taskq worker` process, on the
session's nats-server, driven over HTTP as a browser or a client would."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq.ports import lease_port
from taskq.server import port_open
from tests.conftest import ROOT

DJANGO = ROOT / "examples" / "django_app"


class Services:
    """Processes started by one test (stopped, ours only, by pid at its end)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *argv: str, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - the child's output
        proc = subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT
        )
        self.procs.append(proc)
        return proc

    def output(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_port(self, port: int, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not port_open("127.0.0.1", port):
            assert time.monotonic() < deadline, self.output(name)
            assert all(p.poll() is None for p in self.procs), self.output(name)
            time.sleep(0.05)

    def wait_log(self, name: str, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output(name):
            assert time.monotonic() < deadline, self.output(name)
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def services(nats_url: str, prefix: str, tmp_path: Path) -> Iterator[Services]:
    env = {**os.environ, "TASKQ_URL": nats_url, "TASKQ_PREFIX": prefix}
    env["SHOP_DB"] = str(tmp_path / "shop.sqlite3")  # examples/django_app/mysite/settings.py
    running = Services(env, tmp_path)
    yield running
    running.stop()


def http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def outbox_emptied(path: str, timeout: float = 20) -> None:
    """Wait for the relay to delete what it published (it does so after the server's ack,
    so a task can finish first)."""
    deadline = time.monotonic() + timeout
    while True:
        with sqlite3.connect(path) as db:
            if db.execute("SELECT count(*) FROM taskq_outbox").fetchone() == (0,):
                return
        assert time.monotonic() < deadline, "outbox rows left"
        time.sleep(0.05)


@pytest.mark.heavy
def test_fastapi_app(services: Services) -> None:
    port = lease_port()
    outbox = f"sqlite+aiosqlite:///{services.env['SHOP_DB']}"  # the orders' database
    services.env["ORDERS_DB"] = outbox  # the API's: the same URL
    api = services.start(
        "api", "-m", "uvicorn", "examples.fastapi_app.main:api", "--port", str(port)
    )
    services.wait_port(port, "api")  # its lifespan made the tables
    services.start(
        "worker", "-m", "taskq", "worker", "examples.fastapi_app.tasks:app", "--outbox", outbox
    )
    services.wait_port(port, "api")
    services.wait_log("worker", "worker ready")
    base = f"http://127.0.0.1:{port}"
    # an endpoint that enqueues and awaits the result
    status, body = http("POST", f"{base}/add", {"a": 2, "b": 40})
    assert status == 200 and body["result"] == 42, body
    # one whose task outlasts the wait: 504 with the task's id, the task still runs
    status, body = http("POST", f"{base}/reports/2026-10?pause=1.5")
    assert status == 202
    report = body["id"]
    status, body = http("GET", f"{base}/tasks/{report}")
    assert status == 200 and body["state"] == "queued", body
    status, body = http("GET", f"{base}/tasks/{report}?wait=10")
    assert body == {"id": report, "state": "succeeded", "result": "report for 2026-10"}
    status, body = http("POST", f"{base}/add?wait=0", {"a": 1, "b": 1})
    assert status in (200, 504) and "id" in body.get("detail", body)
    # an order and its receipt task, in one transaction: both, or (it fails) neither
    status, placed = http("POST", f"{base}/orders", {"item": "book"})
    assert status == 201, placed
    status, failed = http("POST", f"{base}/orders?fail=true", {"item": "pen"})
    assert status == 409 and failed["detail"]["saved"] is False
    status, body = http("GET", f"{base}/tasks/{placed['id']}?wait=10")
    assert body == {"id": placed["id"], "state": "succeeded", "result": placed["order"]}
    with sqlite3.connect(services.env["SHOP_DB"]) as db:
        assert db.execute("SELECT id FROM orders").fetchall() == [(placed["order"],)]
    outbox_emptied(services.env["SHOP_DB"])  # the failed order's task: never written
    # the lifespan closes the connection at shutdown, cleanly
    api.send_signal(signal.SIGTERM)
    # uvicorn re-raises the signal once shut down (so -SIGTERM is its clean exit)
    assert api.wait(15) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in services.output("api")
    assert "Traceback" not in services.output("api")


@pytest.mark.heavy
def test_django_app(services: Services) -> None:
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=DJANGO,
        env=services.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    port = lease_port()
    services.start("web", "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}", cwd=DJANGO)
    # the worker runs against the Django project, from its directory, as documented, and
    # relays the shop's outbox (its orders' receipts)
    outbox = f"sqlite:///{services.env['SHOP_DB']}"
    services.start(
        "worker", "-m", "taskq", "worker", "shop.tasks:app", "--outbox", outbox, cwd=DJANGO
    )
    services.wait_port(port, "web")
    services.wait_log("worker", "worker ready")
    base = f"http://127.0.0.1:{port}"
    ids = [http("GET", f"{base}/visit?path=/p{i}")[1]["id"] for i in range(3)]
    results = [http("GET", f"{base}/tasks/{task_id}") for task_id in ids]
    assert [status for status, _ in results] == [200, 200, 200], results
    assert http("GET", f"{base}/visits") == (200, {"count": 3})
    # each task found no connection left open by the ones before it
    enqueued = subprocess.run(
        [sys.executable, "-m", "taskq", "enqueue", "shop.tasks:app", "connection_was_open"],
        cwd=DJANGO,
        env=services.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    status, body = http("GET", f"{base}/tasks/{enqueued.stdout.strip()}")
    assert (status, body["result"]) == (200, False), body
    # an order and its receipt task, in one transaction: both, or (it fails) neither
    status, placed = http("GET", f"{base}/order?item=book")
    assert status == 201, placed
    status, failed = http("GET", f"{base}/order?item=pen&fail=1")
    assert status == 409 and failed["saved"] is False
    status, body = http("GET", f"{base}/tasks/{placed['id']}")
    assert (status, body["result"]) == (200, placed["order"]), body
    assert http("GET", f"{base}/orders") == (200, {"count": 1, "receipts_sent": [placed["order"]]})
    outbox_emptied(services.env["SHOP_DB"])  # the failed order's task: never written
