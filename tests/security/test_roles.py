"""Roles from deploy/nats/accounts.conf on a real server: each can do its job and is refused
what it must not do, with a clear PermissionDenied (not a hang)."""

from __future__ import annotations

import os
import re

import pytest

import taskq
from taskq import App, PermissionDenied
from taskq.records.heartbeats import list_workers
from taskq.server import EmbeddedServer
from tests.conftest import ROOT, finishes, running_worker, wait_until
from tests.roles import ROLES, provisioned, role, role_env


async def test_each_role_does_its_job_and_no_more(secure_server: EmbeddedServer) -> None:
    operator, producer, worker_app = (
        role(secure_server, u) for u in ("operator", "producer", "worker")
    )
    seen: list[int] = []

    for app in (producer, worker_app):

        @app.task(name="work")
        async def work(n: int) -> int:
            seen.append(n)
            return n

        @app.task(name="spread", queue="split", partitions=2)
        async def spread(n: int) -> int:
            seen.append(n)
            return n

    await provisioned(secure_server.url, worker_app)  # operator: streams and consumers
    async with running_worker(worker_app) as worker:  # worker: consume, settle
        handle = await producer.tasks["work"].enqueue(7)  # producer: enqueue
        await wait_until(lambda: worker.stats["succeeded"] == 1)
        assert await handle.result(timeout=10) == 7  # producer: read its result
        for n in (1, 2):  # and on both partitions of a partitioned queue
            await producer.tasks["spread"].enqueue(n)
        await wait_until(lambda: worker.stats["succeeded"] == 3)
        # the worker heartbeats into the registry (operators list it)
        assert [w.pid for w in await list_workers(operator)] == [os.getpid()]
    assert sorted(seen) == [1, 2, 7]

    from taskq.dlq.browse import count_stored
    from taskq.dlq.purge import purge_all

    with pytest.raises(PermissionDenied) as info:  # a producer must not purge the DLQ
        await finishes(purge_all(producer), "a refused DLQ purge")  # refused, not hung
    assert "permissions violation" in str(info.value).lower()
    await purge_all(operator)  # the operator may (the session's server is shared: its
    assert await count_stored(operator) == 0  # other tests' dead letters go too)
    for app in (operator, producer, worker_app):
        await app.aclose()


async def test_wrong_password_is_a_clear_error(secure_server: EmbeddedServer) -> None:
    app = App(url=secure_server.url, user="producer", password="wrong")
    with pytest.raises(PermissionDenied):
        await app.client()


def test_the_shipped_users_are_the_tested_roles_and_no_more() -> None:
    """Every user deploy/nats/accounts.conf ships is a role tests/security/ acts as: no
    other user (a system user with a known password could list and kick every client)."""
    shipped = (ROOT / "deploy" / "nats" / "accounts.conf").read_text()
    users = re.findall(r"\buser:\s*(\w+)", shipped)
    assert sorted(users) == sorted(ROLES), users


async def test_no_system_user_logs_in(secure_server: EmbeddedServer) -> None:
    """The system user an earlier accounts.conf shipped (`sys`/`sys-secret`) is gone."""
    app = App(url=secure_server.url, user="sys", password="sys-secret")
    with pytest.raises(PermissionDenied):
        await app.client()
    await app.aclose()


def test_cli_security_flags_reach_the_connection(secure_server: EmbeddedServer) -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "taskq", "--url", secure_server.url]
    ok = subprocess.run(
        [*base, "--user", "operator", "--password", "operator-secret", "queues", "--interval", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*base, "--user", "operator", "--password", "nope", "queues"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 1 and "refused the credentials" in bad.stderr


def test_a_worker_on_an_unprovisioned_queue_says_so_in_one_line(
    secure_server: EmbeddedServer,
) -> None:
    """The worker role may not create streams or consumers: on a queue no operator
    provisioned, `taskq worker` stops at once with one line naming what is missing and the
    command that makes it; after `taskq provision` (as the operator) it starts."""
    import subprocess
    import sys

    def taskq(user: str, *args: str, wait: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
        env.update(role_env(user), TASKQ_URL=secure_server.url)
        return subprocess.run(
            [sys.executable, "-m", "taskq", *args], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=wait, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    refused = taskq("worker", "worker", "tests.apps.ledger:app", "-q", "unprovisioned")
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "does not exist and this NATS user may not create it" in lines[0]
    assert "`taskq provision MODULE:APP`" in lines[0]
    made = taskq("operator", "provision", "tests.apps.ledger:app", "-q", "unprovisioned")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("provisioned queue(s) unprovisioned: ")


async def test_the_producer_role_s_every_use_works(secure_server: EmbeddedServer) -> None:
    """Everything a producer does with the shipped role, a worker (its role) running: a
    delayed call, a priority, unique/throttle/debounce, progress, a result too large for
    one message (claim-checked: read back); a task body that large is refused (the
    producer may not write the object store: docs/security.md)."""
    producer, worker_app = role(secure_server, "producer"), role(secure_server, "worker")
    for app in (producer, worker_app):

        @app.task(name="big", queue="roles")
        async def big(n: int) -> str:
            taskq.current().progress(0.5)
            return "r" * (2 * 1024 * 1024)

        @app.task(name="echo", queue="roles", priority=8)
        async def echo(text: str) -> str:
            return text

    large_result, echoed = producer.tasks["big"], producer.tasks["echo"]
    try:
        await provisioned(secure_server.url, worker_app, ["roles"])
        async with running_worker(worker_app, queues=["roles"]):
            handles = [
                await echoed.options(countdown=1).enqueue("later"),
                await echoed.options(priority=2).enqueue("low"),
                await echoed.options(unique_for=60, key="u").enqueue("unique"),
                await echoed.options(throttle=60, key="t").enqueue("throttled"),
                await echoed.options(debounce=0.5, key="d").enqueue("debounced"),
            ]
            texts = [await h.result(timeout=30) for h in handles]
            assert texts == ["later", "low", "unique", "throttled", "debounced"]
            large = await large_result.enqueue(1)
            assert len(await large.result(timeout=30)) == 2 * 1024 * 1024
            assert (await large.progress()) is not None
            with pytest.raises(PermissionDenied):
                await echoed.enqueue("b" * (2 * 1024 * 1024))
    finally:
        for app in (producer, worker_app):
            await app.aclose()
