"""Encryption at rest (taskq.records.sealing): what the server stores holds no plaintext; a worker
without the key dead-letters as `undecodable` and carries on; old keys still open their
tasks; plaintext task messages are refused unless the app allows them."""

from __future__ import annotations

import asyncio
import base64
import json
import os

import nats
import pytest

import taskq
from taskq import App, ConfigError, Reject
from taskq.dlq.browse import list_dead
from taskq.dlq.record import RawOriginal
from taskq.errors import DecodeError
from taskq.records.results import fetch, wait
from taskq.records.sealing import MAGIC, is_sealed, new_key, sealed_with
from taskq.settings import Settings
from tests.conftest import cli, run_cli, running_worker, wait_until
from tests.stored import MARKER, stored_bodies


async def test_nothing_stored_holds_plaintext(keyed: App, app: App) -> None:
    @keyed.task(max_retries=0)
    async def echo(text: str, fail: bool = False) -> str:
        taskq.current().progress(0.5, f"half of {text}")
        if fail:
            raise ValueError(f"refused {text}")
        return f"{text}!"

    waiting = await echo.enqueue(MARKER)
    bodies = await stored_bodies(app)  # the queued task, before any worker ran it
    assert bodies and all(is_sealed(b) for b in bodies)
    dead = await echo.enqueue(MARKER, fail=True)
    async with running_worker(keyed) as worker:
        assert await waiting.result(timeout=10) == f"{MARKER}!"
        await wait_until(lambda: worker.stats["dead"] == 1)
    assert await dead.status() == "dead"
    bodies = await stored_bodies(app)
    assert len(bodies) >= 4  # results, progress, the dead letter (and the registry's last)
    assert not [b for b in bodies if MARKER.encode() in b]
    # the app with the key reads it all back: the DLQ record, the result, the progress
    [record] = await list_dead(keyed)
    assert record.message.args == [MARKER] and MARKER in record.error.message
    assert (await waiting.progress()).message == f"half of {MARKER}"


async def test_a_worker_without_the_key_dead_letters_it_and_carries_on(
    keyed: App, app: App
) -> None:
    @keyed.task
    async def hidden(text: str) -> str:
        return text

    @app.task
    async def plain(n: int) -> int:
        return n

    handle = await hidden.enqueue(MARKER)
    async with running_worker(app) as worker:  # no key: cannot open it
        await wait_until(lambda: worker.stats["dead"] == 1)
        assert await (await plain.enqueue(5)).result(timeout=10) == 5  # still working
    [record] = await list_dead(keyed)
    assert isinstance(record.message, RawOriginal)  # kept sealed, as it came
    key = sealed_with(record.message.decoded())
    assert record.reason == "undecodable"
    assert f"sealed with encryption key {key}" in record.error.message
    assert "no encryption key" in record.error.message
    assert handle.id  # the producer's handle is fine; the task never ran


async def test_the_cli_without_the_key_lists_sealed_dead_letters_as_sealed(
    keyed: App, nats_url: str, prefix: str
) -> None:
    """`taskq dlq ls` (text and `--json`) and `dlq show` without the key, over dead letters a
    keyed worker sealed: one row per letter, saying it is sealed and with which key, and
    nothing on stderr (each letter printed pydantic's validation error, and none was
    listed). A requeue without the key refuses each, naming why, and leaves them."""

    @keyed.task(max_retries=0)
    async def bad(i: int) -> None:
        raise Reject(f"bad {i}")

    async with running_worker(keyed) as worker:
        handles = await bad.enqueue_many(range(2))
        await wait_until(lambda: worker.stats["dead"] == 2)
    sealed = f"sealed with encryption key {sealed_with(keyed.settings.sealer().seal(b'{}'))}"
    table = await cli(nats_url, prefix, "dlq", "ls")
    listed = await cli(nats_url, prefix, "dlq", "ls", "--json")
    for done in (table, listed):
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no UserWarning, no PydanticSerializationUnexpectedValue
    rows = json.loads(listed.stdout)
    assert sorted(r["id"] for r in rows) == sorted(h.id for h in handles)
    for row in rows:
        assert (row["task"], row["queue"], row["reason"]) == ("bad", "default", "permanent")
        assert row["error"]["message"].startswith(sealed), row
        assert row["failed_at"] > "2000", row  # when it was stored, from the stream
    header, *lines = table.stdout.splitlines()
    assert "ERROR" in header and len(lines) == 2
    assert all(sealed in line and " bad " in line and "permanent" in line for line in lines)
    shown = await cli(nats_url, prefix, "dlq", "show", str(rows[0]["seq"]))
    assert shown.returncode == 0 and shown.stderr == "" and sealed in shown.stdout
    refused = await cli(nats_url, prefix, "dlq", "requeue", "--all")
    assert refused.returncode == 1 and "requeued 0 dead letter(s)" in refused.stdout
    assert refused.stderr.count(sealed) == 2, refused.stderr
    assert len(await list_dead(keyed)) == 2  # still there, and the keyed app reads them


async def test_rotation_old_key_tasks_still_run(nats_url: str, prefix: str) -> None:
    old, new = new_key(), new_key()
    before = App(url=nats_url, prefix=prefix, encryption_key=old)
    after = App(url=nats_url, prefix=prefix, encryption_key=new, old_keys=[old])
    for application in (before, after):

        @application.task(name="double")
        async def double(n: int) -> int:
            return 2 * n

    try:
        handle = await before.tasks["double"].enqueue(21)  # sealed with the old key
        async with running_worker(after):
            assert (await wait(after, handle.id, timeout=10)).result == 42
            fresh = await after.tasks["double"].enqueue(4)
            assert await fresh.result(timeout=10) == 8
        # the old key's holder cannot read what the new key sealed
        with pytest.raises(DecodeError, match="neither this process's key"):
            await fetch(before, fresh.id)
    finally:
        await before.aclose()
        await after.aclose()


async def test_plaintext_tasks_are_refused_unless_allowed(
    keyed: App, nats_url: str, prefix: str
) -> None:
    @keyed.task(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    subject = keyed.names.queue_subject("default", "add")
    async with running_worker(keyed) as worker:
        # a foreign producer's plaintext body (nats-py alone, no taskq)
        await _publish_plain(nats_url, subject, b'{"args": [1, 2]}')
        await wait_until(lambda: worker.stats["dead"] == 1)
    [record] = await list_dead(keyed)
    assert record.reason == "undecodable" and "plaintext task message" in record.error.message

    key = keyed.settings.encryption_key
    lenient = App(url=nats_url, prefix=prefix, encryption_key=key, allow_plaintext=True)

    @lenient.task(name="add")
    async def add2(a: int, b: int) -> int:
        return a + b

    try:
        async with running_worker(lenient) as worker:
            await _publish_plain(nats_url, subject, b'{"args": [1, 2]}')
            await wait_until(lambda: worker.stats["succeeded"] == 1)
    finally:
        await lenient.aclose()


async def _publish_plain(url: str, subject: str, body: bytes) -> None:
    """Publish `body` as it is, as a producer without taskq would."""
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, body)
    finally:
        await nc.close()


def test_keys_are_checked_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = os.urandom(32)
    assert Settings.load(encryption_key=raw).sealer().active
    with pytest.raises(ConfigError, match="not 32"):
        Settings.load(encryption_key=base64.urlsafe_b64encode(b"short").decode())
    with pytest.raises(ConfigError, match="base64"):
        Settings.load(encryption_key="not base64 at all!")
    text = new_key()
    monkeypatch.setenv("TASKQ_ENCRYPTION_KEY", text)
    monkeypatch.setenv("TASKQ_OLD_KEYS", f"{new_key()},{new_key()}")
    settings = Settings.load()
    assert settings.encryption_key == text and len(settings.old_keys) == 2
    assert text not in repr(settings) and text not in str(settings)
    sealed = settings.sealer().seal(b'{"args": []}')
    assert sealed.startswith(MAGIC) and b"args" not in sealed
    assert settings.sealer().open(sealed) == b'{"args": []}'


async def test_stored_bodies_helper_sees_plaintext_without_a_key(app: App) -> None:
    """The check above can fail: without a key the same bodies hold the marker."""

    @app.task
    async def echo(text: str) -> str:
        return text

    await echo.enqueue(MARKER)
    await asyncio.sleep(0)
    assert [b for b in await stored_bodies(app) if MARKER.encode() in b]


def test_new_key_prints_a_key_the_settings_take(nats_url: str, prefix: str) -> None:
    done = run_cli(nats_url, prefix, "new-key", "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    settings = Settings.load(encryption_key=printed["key"])
    assert sealed_with(settings.sealer().seal(b"{}")) == printed["id"]
