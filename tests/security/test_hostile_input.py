"""Hostile or careless input against a real server and worker: long and odd ids and keys,
wildcard keys, a body naming another task. Each was a finding: a 5,000-character key
stopped every worker, `--key '>' --countdown 900` purged every schedule of its queue,
`--key periodic.<name>` replaced a periodic schedule, `a\\nb`/`a b`/`a\\rb` were one key,
the body's task name overrode the subject's, a lone surrogate escape in a body was handed
back until max_deliver (and then ended every worker's sweeper), and a header value with a
bare LF made a delayed task's every copy unpublishable (it never ran)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import nats
import pytest

from taskq import App
from taskq.dlq import sweeper
from taskq.dlq.browse import list_dead
from taskq.dlq.record import RawOriginal
from taskq.nats import StoredMessage
from taskq.records.clock import format_time
from taskq.records.heartbeats import list_workers
from taskq.records.results import fetch
from taskq.records.schedules import list_schedules
from taskq.topology.names import Names
from tests.conftest import run_cli, running_worker, wait_until
from workers.judge import SUBJECTS_KEPT, Judge

APP = "tests.apps.ledger:app"


def test_a_key_over_the_limit_is_one_line_and_exit_2(nats_url: str, prefix: str) -> None:
    out = run_cli(nats_url, prefix, "enqueue", APP, "quick", '["x"]', "--key", "k" * 5000)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "taskq enqueue: key is 5000 characters long: at most 1024"
    ]


async def test_a_message_with_a_huge_id_is_settled_and_the_worker_goes_on(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def echo(text: str) -> str:
        return text

    huge = "k" * 5000
    nc = await nats.connect(nats_url)
    try:
        async with running_worker(app) as worker:
            body = json.dumps({"id": huge, "args": ["big"]}).encode()
            await nc.jetstream().publish(f"{prefix}.q.default.echo", body)
            await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=20)
            # the worker is still connected and listed, and runs what comes next
            after = await echo.enqueue("after")
            assert await after.result(timeout=20) == "after"
            assert [w.pid for w in await list_workers(app)]
    finally:
        await nc.close()
    record = await fetch(app, huge)  # read back by its id, on a connection that stays up
    assert record is not None and record.result == "big"
    assert (await app.client()).connection.connected


async def test_odd_keys_are_distinct_and_each_handle_gets_its_own_result(app: App) -> None:
    @app.task
    async def echo(text: str) -> str:
        return text

    keys = ["a\nb", "a b", "a\rb", "x\r\nNats-Rollup: all", "é/😀", "k" * 1024]
    async with running_worker(app):
        handles = [await echo.options(key=k).enqueue(f"for {i}") for i, k in enumerate(keys)]
        assert [h.duplicate for h in handles] == [False] * len(keys)
        results = [await h.result(timeout=20) for h in handles]
    assert results == [f"for {i}" for i in range(len(keys))]


async def test_wildcard_and_schedule_like_keys_touch_no_other_schedule(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def later(n: int) -> None: ...

    @app.periodic(every=3600, name="nightly")
    async def nightly() -> None: ...

    @app.task(name="quick")  # what the CLI enqueues below (tests.apps.ledger's task)
    async def quick(token: str) -> None: ...

    async with running_worker(app) as worker:
        await later.options(countdown=900).enqueue(1)
        for key in (">", "*", "periodic.nightly", "a b", "periodic"):
            out = run_cli(
                nats_url, prefix, "enqueue", "tests.apps.ledger:app", "quick", '["x"]',
                "--key", key, "--countdown", "900",
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
        await wait_until(lambda: worker.stats["held"] == 6, timeout=30)
    listed = await list_schedules(app)
    periodic = [s for s in listed if s.name == "periodic.nightly"]
    assert len(listed) == 7 and len(periodic) == 1  # six delayed tasks and the periodic
    assert periodic[0].expression == "@every 3600s"


async def test_the_subject_decides_which_task_runs(app: App, nats_url: str, prefix: str) -> None:
    ran: list[str] = []

    @app.task
    async def echo(text: str) -> None:
        ran.append(f"echo {text}")

    @app.task
    async def wipe(text: str) -> None:
        ran.append(f"wipe {text}")

    nc = await nats.connect(nats_url)
    try:
        async with running_worker(app) as worker:
            # permission to publish echo must not run wipe
            body = json.dumps({"task": "wipe", "args": ["all"]}).encode()
            await nc.jetstream().publish(f"{prefix}.q.default.echo", body)
            await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
            # the same subject again (its parse now kept by the judge), with an honest body
            honest = json.dumps({"task": "echo", "args": ["hi"]}).encode()
            await nc.jetstream().publish(f"{prefix}.q.default.echo", honest)
            await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=20)
    finally:
        await nc.close()
    assert ran == ["echo hi"]
    [letter] = await list_dead(app)
    assert letter.reason == "undecodable" and "its subject 'echo'" in letter.error.message


def test_a_judge_keeps_a_bounded_number_of_subjects() -> None:
    # any number of distinct subjects may reach a worker (a producer picks them)
    judge = object.__new__(Judge)
    judge._names, judge._subjects = Names("p"), {}
    for number in range(SUBJECTS_KEPT + 100):
        assert judge._task_of(f"p.q.default.t{number}") == ("default", f"t{number}")
    assert 0 < len(judge._subjects) <= SUBJECTS_KEPT
    assert judge._task_of("p.q.default.t1") == ("default", "t1")
    assert judge._task_of("other.q.default.t1") is None


async def test_a_lone_surrogate_anywhere_is_dead_lettered_undecodable_once(
    app: App, nats_url: str, prefix: str
) -> None:
    """A JSON-escaped lone surrogate has no UTF-8 encoding: such a body was accepted, its
    dead letter could not be written, and it came back every 5 s until max_deliver."""

    @app.task
    async def echo(text: str) -> str:
        return text

    poisons = [
        (f"{prefix}.q.default.nosuch", b'{"id":"\\ud800","task":"nosuch","args":[]}'),
        (f"{prefix}.q.default.echo", b'{"args":["a\\udfffb"]}'),
        (f"{prefix}.q.default.echo", b'{"args":[],"kwargs":{"\\udc00":1}}'),
        (f"{prefix}.q.default.echo", b'{"args":["x"],"meta":{"trace":["\\ud83d"]}}'),
    ]
    nc = await nats.connect(nats_url)
    try:
        async with running_worker(app) as worker:
            for subject, body in poisons:
                await nc.jetstream().publish(subject, body)

            async def all_dead() -> bool:
                return len(await list_dead(app)) == len(poisons)

            await wait_until(all_dead, timeout=20)
            after = await echo.enqueue("after")
            assert await after.result(timeout=20) == "after"
            assert worker.stats["dead"] == len(poisons) and worker.stats["retried"] == 0
    finally:
        await nc.close()
    letters = await list_dead(app)
    assert [letter.reason for letter in letters] == ["undecodable"] * len(poisons)
    assert all("lone surrogate" in letter.error.message for letter in letters)
    assert all(letter.attempts == 1 for letter in letters)  # at the first delivery
    originals = [letter.message for letter in letters]
    assert all(isinstance(m, RawOriginal) for m in originals)
    assert sorted(m.decoded() for m in originals if isinstance(m, RawOriginal)) == sorted(
        body for _, body in poisons
    )
    connection = (await app.client()).connection
    queue = await connection.streams.state(app.names.queue_stream("default"))
    assert queue.messages == 0  # each settled: none left to come back


async def test_the_sweeper_goes_on_after_an_advisory_whose_handling_raises(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An untyped exception moving one crash-looped message (as the lone surrogate's record
    once raised) ended `run_sweeper`, on every worker in turn (they share its consumer).
    Now that advisory is retried, then terminated, and the next one is swept."""
    app = App(url=nats_url, prefix=prefix, max_deliver=2)
    runs: list[str] = []

    @app.task(max_retries=5, backoff=0.05, jitter=0)
    async def stubborn(tag: str) -> None:
        runs.append(tag)
        raise ValueError("again")

    real_move = sweeper._move
    faults: list[int] = []

    async def failing_on_poison(client: Any, stream: str, stored: StoredMessage, n: int) -> None:
        if b"poison" in stored.data:  # the fault is around the real component, for one
            faults.append(stored.seq)
            raise RuntimeError("injected: writing this dead letter fails")
        await real_move(client, stream, stored, n)

    monkeypatch.setattr(sweeper, "_move", failing_on_poison)
    monkeypatch.setattr(sweeper, "RETRY_DELAY", 0.1)  # the retries, without their pause
    nc = await nats.connect(nats_url)
    connection = (await app.client()).connection
    try:
        async with running_worker(app):
            await nc.jetstream().publish(f"{prefix}.q.default.stubborn", b'{"args":["poison"]}')
            await wait_until(lambda: len(faults) == sweeper.GIVE_UP_AFTER, timeout=30)
            await nc.jetstream().publish(f"{prefix}.q.default.stubborn", b'{"args":["fine"]}')

            async def swept() -> bool:
                return len(await list_dead(app)) == 1

            await wait_until(swept, timeout=30)

            async def advisories_settled() -> bool:
                state = await connection.streams.consumer_state(
                    app.names.events_stream, app.names.events_consumer
                )
                return state.ack_pending == 0 and state.pending == 0

            await wait_until(advisories_settled, timeout=20)  # the failing one is not NAKed
    finally:
        await nc.close()
    [letter] = await list_dead(app)
    assert letter.reason == "crashed" and letter.message.model_dump()["args"] == ["fine"]
    assert len(set(faults)) == 1 and len(faults) == sweeper.GIVE_UP_AFTER
    assert sorted(runs) == ["fine", "fine", "poison", "poison"]
    await app.aclose()


async def raw_hpub(url: str, subject: str, header_block: bytes, body: bytes) -> dict[str, Any]:
    """Publish as a raw client does: an HPUB written by hand (nats-py's `publish` turns CR
    and LF in header values into spaces), on its own socket; the JetStream ack."""
    where = urlparse(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    try:
        await reader.readline()  # INFO
        inbox = f"_INBOX.{uuid.uuid4().hex}"
        writer.write(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n')
        writer.write(f"SUB {inbox} 1\r\n".encode())
        total = len(header_block) + len(body)
        writer.write(f"HPUB {subject} {inbox} {len(header_block)} {total}\r\n".encode())
        writer.write(header_block + body + b"\r\n")
        await writer.drain()
        while True:  # PING/PONG and INFO may come first
            line = await asyncio.wait_for(reader.readline(), 10)
            if line.startswith(b"PING"):
                writer.write(b"PONG\r\n")
            elif line.startswith(b"MSG"):
                size = int(line.split()[-1])
                ack = await reader.readexactly(size + 2)
                reply: dict[str, Any] = json.loads(ack[:size])
                return reply
            elif line.startswith(b"-ERR"):
                raise AssertionError(line.decode())
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_header_value_with_a_bare_lf_does_not_stop_a_delayed_task(
    app: App, nats_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The header was copied onto the held copy, the hand-backs and the fired copy, which
    the outbound check refused: handed back every 5 s, then dead-lettered `crashed`. Now it
    is dropped from the copies and the task runs once, at its time."""
    ran: list[str] = []

    @app.task
    async def note(text: str) -> None:
        ran.append(text)

    name = f"X-Note-{uuid.uuid4().hex[:8]}"
    # due past the worker's SOON (2 s), so it is held as a schedule rather than waited for
    eta = format_time(datetime.now(UTC) + timedelta(seconds=3))
    body = json.dumps({"args": ["later"], "eta": eta}).encode()
    headers = f"NATS/1.0\r\nNats-Msg-Id: lf-{name}\r\n{name}: a\nb\r\n\r\n".encode()
    caplog.set_level(logging.WARNING, logger="taskq")
    async with running_worker(app) as worker:
        ack = await raw_hpub(nats_url, f"{prefix}.q.default.note", headers, body)
        assert "seq" in ack, ack
        # stored as a schedule (its held copy was refused, and handed back, before the fix)
        await wait_until(lambda: worker.stats["held"] == 1, timeout=20)
        await wait_until(lambda: ran == ["later"], timeout=30)
        await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=10)
        assert worker.stats["held"] == 1 and worker.stats["dead"] == 0
        assert worker.stats["retried"] == 0 and worker.stats["interrupted"] == 0
    assert ran == ["later"]
    assert await list_dead(app) == []
    connection = (await app.client()).connection
    for stream in (app.names.queue_stream("default"), app.names.timer_stream("default")):
        assert (await connection.streams.state(stream)).messages == 0, stream
    drops = [r.getMessage() for r in caplog.records if "dropping header" in r.getMessage()]
    assert len(drops) == 1 and name in drops[0]
