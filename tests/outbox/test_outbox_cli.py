"""`taskq outbox init | status | relay` and `taskq worker --outbox`, as a user runs them;
the relay's report on the dashboard's overview and in `taskq exporter`'s gauges."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, update

from taskq import App
from taskq.cli.exporter import QueueCollector
from taskq.outbox.table import outbox
from taskq.records.relays import list_relays
from tests.apps import outboxed
from tests.conftest import WorkerProcess, run_cli, wait_until
from tests.outbox.test_relay_faults import no_rows_left
from tests.test_failure_branches import dashboard


def test_init_status_and_bad_input(nats_url: str, prefix: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    # Before init: status names the missing table and how to make it (exit 1, one line)
    missing = run_cli(nats_url, prefix, "outbox", "status", "--db", url)
    assert missing.returncode == 1 and "taskq outbox init" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    for _ in range(2):  # init, and init again: nothing to do
        made = run_cli(nats_url, prefix, "outbox", "init", "--db", url)
        assert made.returncode == 0, made.stderr
    engine = create_engine(url)
    with engine.begin() as connection:
        for order in range(3):
            outboxed.receipt.options(queue="default").enqueue_in(connection, order)
    shown = run_cli(nats_url, "taskq", "outbox", "status", "--db", url, "--json")
    [backlog] = json.loads(shown.stdout)
    assert (backlog["prefix"], backlog["rows"], backlog["beyond_dedup"]) == ("taskq", 3, False)
    assert 0 <= backlog["oldest_age"] < 3600
    table = run_cli(nats_url, "other", "outbox", "status", "--db", url)
    assert table.stdout.splitlines()[1].split() == ["other", "0", "0.0s"]
    # a row older than the dedup window (2 min by default): status warns, in both forms
    with engine.begin() as connection:
        connection.execute(update(outbox).values(created_at=datetime.now(UTC) - timedelta(hours=1)))
    old = run_cli(nats_url, "taskq", "outbox", "status", "--db", url, "--json")
    assert json.loads(old.stdout)[0]["beyond_dedup"] is True
    warned = run_cli(nats_url, "taskq", "outbox", "status", "--db", url)
    assert "beyond the 120s dedup window" in warned.stdout
    engine.dispose()
    # a database taskq does not run on, a URL that is none, a server that does not answer
    for db, code, words in [
        ("mysql://root@127.0.0.1/app", 2, "Postgres or SQLite"),
        ("not a url", 2, "not a database URL"),
        ("postgresql://nobody:secret@127.0.0.1:1/app", 1, "cannot reach the outbox database"),
    ]:
        done = run_cli(nats_url, prefix, "outbox", "status", "--db", db)
        assert done.returncode == code and words in done.stderr, (db, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "secret" not in done.stderr


async def test_a_worker_relays_its_outbox_and_reports_it(
    nats_url: str, prefix: str, pg_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    outboxed.app.configure(url=nats_url, prefix=prefix)
    spec = "tests.apps.outboxed:app"
    worker = WorkerProcess(
        nats_url, prefix, spec, "--outbox", pg_url, env={"TASKQ_TEST_LEDGER": str(ledger)}
    )
    try:
        await worker.wait_ready()
        engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.begin() as connection:
            handles = [outboxed.receipt.enqueue_in(connection, n) for n in range(5)]
        engine.dispose()
        assert [await h.result(timeout=30) for h in handles] == list(range(5))
        # deleted after the server's ack: a task may finish first
        await wait_until(lambda: no_rows_left(pg_url, prefix), timeout=30)
        # its relay's report: on the overview (and its JSON twin), and in the exporter
        await wait_until(lambda: _reported(outboxed.app, 5), timeout=30)
        async with dashboard(outboxed.app) as http:
            page = await http.get("/", headers={"accept": "text/html"})
            data = (await http.get("/", headers={"accept": "application/json"})).json()
        assert "Outbox" in page.text and data["outbox"][0]["published"] == 5
        client = await outboxed.app.client()
        loop = asyncio.get_running_loop()
        families = await asyncio.to_thread(
            lambda: list(QueueCollector(client, loop, None).collect())
        )
        gauges = {f.name: f.samples for f in families}
        assert [s.value for s in gauges["taskq_outbox_backlog"]] == [0.0]
    finally:
        worker.close()
        await outboxed.app.aclose()


async def _reported(app: App, published: int) -> bool:
    reports = await list_relays(app)
    return bool(reports) and reports[0].published == published


def test_worker_outbox_with_an_unreachable_database_is_one_line(nats_url: str, prefix: str) -> None:
    done = run_cli(
        nats_url,
        prefix,
        "worker",
        "tests.apps.outboxed:app",
        "--outbox",
        "postgresql://x:secret@127.0.0.1:1/app",
        fresh=True,
        timeout=60,
    )
    assert done.returncode == 1 and "cannot reach the outbox database" in done.stderr
    assert "secret" not in done.stderr
