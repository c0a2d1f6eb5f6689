"""Where a taskq worker's time goes: drains and enqueues beside floors that do the same
protocol work, in one process, on one server, in one run.

    python -m bench.breakdown [--runs 3] [--drain 20000] [--enqueue 5000]

The raw floor of `bench/run.py` fetches and acks bare 100-byte messages. A task engine that
keeps taskq's promises must do more per task on the wire: messages carry `Nats-Msg-Id` and a
JSON envelope, and each settled task writes its result record to a KV bucket and waits for
the server's ack before acking the message. "raw, same protocol work" is a plain nats-py loop
doing exactly that and nothing else; the taskq variants switch off, one at a time, the work
that is optional (the result record, the log line), so the table says what each costs.
Then `bench/profile.py` samples a drain with the defaults and names each part of what is
left, in µs per task (`--no-profile` skips it). Writes bench/results/breakdown.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import nats.errors

from bench.run import BODY, RESULTS, fresh_prefix, steady_rate
from taskq import App
from taskq.ids import new_id
from taskq.server import EmbeddedServer
from taskq.workers import Worker
from taskq.workers.logs import install

Measure = Callable[[], Awaitable[float]]


# -- drains ---------------------------------------------------------------------------------
async def backlog(url: str, n: int, store_result: bool) -> tuple[App, Any]:
    """An app whose `noop` task has `n` messages waiting (enqueued by taskq itself)."""
    app = App(url=url, prefix=fresh_prefix())

    @app.task(store_result=store_result)
    async def noop(n: int = 0) -> None:
        return None

    await noop.enqueue_many(range(n))
    return app, noop


async def taskq_drain(url: str, n: int, store_result: bool, level: int) -> float:
    logging.getLogger("taskq").setLevel(level)
    app, _ = await backlog(url, n, store_result)
    broker = (await app.client()).connection
    stream = app.names.queue_stream("default")
    worker = Worker(app, concurrency=16, sweeper=False)
    running = asyncio.create_task(worker.run())
    try:
        return await steady_rate(lambda: _left(broker, stream), n)
    finally:
        worker.stop()
        await running
        await app.aclose()


async def _left(broker: Any, stream: str) -> int:
    return int((await broker.streams.state(stream)).messages)


async def raw_drain(url: str, n: int, same_work: bool) -> float:
    """fetch(256) + ack of bare messages; or, with `same_work`, of taskq's own messages with
    a JSON decode and an acknowledged KV write per message before its ack."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    prefix = fresh_prefix()
    stream, subject = f"RAW_{prefix}", f"{prefix}.job"
    await js.add_stream(name=stream, subjects=[f"{prefix}.>"], retention="workqueue")
    if same_work:
        app, noop = await backlog(url, 0, True)
        body = noop.build_envelope((1,), {}, _options()).encode()
        bucket = f"R{prefix.upper()}"
        await js.create_key_value(bucket=bucket)
    for start in range(0, n, 2048):
        acks = [
            await js.publish_async(
                subject,
                body if same_work else BODY,
                headers={"Nats-Msg-Id": new_id()} if same_work else None,
            )
            for _ in range(min(2048, n - start))
        ]
        await asyncio.gather(*acks)
    await js.add_consumer(stream, durable_name="c", ack_policy="explicit")
    sub = await js.pull_subscribe_bind(durable="c", stream=stream)

    async def consume() -> None:
        while True:
            try:
                msgs = await sub.fetch(256, timeout=1)
            except nats.errors.TimeoutError:
                continue
            if same_work:
                writes = []
                for msg in msgs:
                    envelope = json.loads(msg.data)
                    record = json.dumps({"state": "succeeded", "task": envelope["task"]})
                    key = f"$KV.{bucket}.{envelope['id']}"
                    writes.append(await js.publish_async(key, record.encode()))
                await asyncio.gather(*writes)
            for msg in msgs:
                await msg.ack()

    consumer = asyncio.create_task(consume())
    try:
        return await steady_rate(lambda: _raw_left(js, stream), n)
    finally:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await nc.close()
        if same_work:
            await app.aclose()


async def _raw_left(js: Any, stream: str) -> int:
    return int((await js.stream_info(stream)).state.messages)


def _options() -> Any:
    from taskq.task import CallOptions

    return CallOptions()


# -- enqueues -------------------------------------------------------------------------------
async def taskq_enqueue(url: str, n: int) -> float:
    app, noop = await backlog(url, 0, True)
    await noop.enqueue(0)
    started = time.perf_counter()
    for i in range(n):
        await noop.enqueue(i)
    rate = n / (time.perf_counter() - started)
    await app.aclose()
    return rate


async def raw_enqueue(url: str, n: int, same_work: bool) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    prefix = fresh_prefix()
    await js.add_stream(name=f"RAW_{prefix}", subjects=[f"{prefix}.>"], retention="workqueue")
    app, noop = await backlog(url, 0, True)
    body = noop.build_envelope((1,), {}, _options()).encode()
    started = time.perf_counter()
    for _ in range(n):
        if same_work:
            headers = {"Nats-Msg-Id": new_id(), "Taskq-Task": "noop"}
            await js.publish(f"{prefix}.q.default.noop", body, headers=headers)
        else:
            await js.publish(f"{prefix}.job", BODY)
    rate = n / (time.perf_counter() - started)
    await nc.close()
    await app.aclose()
    return rate


# -- the run --------------------------------------------------------------------------------
async def run_all(url: str, args: argparse.Namespace) -> list[tuple[str, str, float]]:
    d, e, info, warn = args.drain, args.enqueue, logging.INFO, logging.WARNING
    plan: list[tuple[str, str, Measure]] = [
        (
            "drain",
            "raw nats-py: fetch(256) + ack, bare 100-byte messages",
            lambda: raw_drain(url, d, False),
        ),
        (
            "drain",
            "raw nats-py, same protocol work: taskq's messages, JSON decode, "
            "acknowledged KV write, ack",
            lambda: raw_drain(url, d, True),
        ),
        (
            "drain",
            "taskq worker, defaults (result record, a log line per task)",
            lambda: taskq_drain(url, d, True, info),
        ),
        (
            "drain",
            "taskq worker, no log line (--log-level warning)",
            lambda: taskq_drain(url, d, True, warn),
        ),
        ("drain", "taskq worker, store_result=False", lambda: taskq_drain(url, d, False, info)),
        (
            "drain",
            "taskq worker, store_result=False and no log line",
            lambda: taskq_drain(url, d, False, warn),
        ),
        (
            "enqueue",
            "raw nats-py: js.publish of 100 bytes, one at a time",
            lambda: raw_enqueue(url, e, False),
        ),
        (
            "enqueue",
            "raw nats-py, same protocol work: taskq's envelope + Nats-Msg-Id",
            lambda: raw_enqueue(url, e, True),
        ),
        ("enqueue", "taskq: await task.enqueue(i)", lambda: taskq_enqueue(url, e)),
    ]
    results = []
    for kind, name, measure in plan:
        value = statistics.median([await measure() for _ in range(args.runs)])
        print(f"{kind:8} {value:>10,.0f}/s  {name}", flush=True)
        results.append((kind, name, value))
    return results


def render(results: list[tuple[str, str, float]], runs: int) -> str:
    floors = {k: v for k, name, v in results if "bare" in name or "100 bytes" in name}
    same = {k: v for k, name, v in results if "same protocol" in name}
    lines = [
        f"{os.cpu_count()} cores · median of {runs} runs · "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| | variant | tasks/s | ÷ raw floor | ÷ same-work floor |",
        "|---|---|---|---|---|",
    ]
    for kind, name, value in results:
        lines.append(
            f"| {kind} | {name} | {value:,.0f} | {value / floors[kind]:.2f} | "
            f"{value / same[kind]:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--enqueue", type=int, default=5_000)
    parser.add_argument("--no-profile", action="store_true", help="skip the sampled profile")
    args = parser.parse_args()
    install(logging.INFO).setStream(open(os.devnull, "w"))  # the worker's handler, muted  # noqa: SIM115
    with EmbeddedServer(store_dir=tempfile.mkdtemp(prefix="taskq-bench-")) as server:
        try:
            import uvloop

            results = uvloop.run(run_all(server.url, args))
        except ImportError:
            results = asyncio.run(run_all(server.url, args))
    print()
    text = render(results, args.runs)
    if not args.no_profile:  # then each µs of the defaults' drain, named (bench/profile.py)
        from bench.profile import profile

        named, _, _ = profile(60_000, store_result=True)
        text += "\n\nWhere the defaults' drain spends its time, named (`bench/profile.py`):\n\n"
        text += named
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "breakdown.md").write_text(text)


if __name__ == "__main__":
    main()
