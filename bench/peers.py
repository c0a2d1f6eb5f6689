"""taskq beside the raw nats-py floor and two peers, PgQueuer and taskiq-nats, in one run.

    python -m bench.peers [--runs 3] [--tasks 10000] [--enqueue N] [--latency 1000]
                          [--durable-only | --default-only] [--only taskq,raw,pgqueuer,taskiq]

Two server configurations, each with its own nats-server (temporary store, same disk):
"default" (nats-server's default sync_interval, 2 minutes) and "durable" (nats-server with
`jetstream { sync_interval: always }`: an fsync per write before the ack). PgQueuer runs on
one throwaway Postgres for the whole run (bench/peer_pgqueuer.py), measured again in each
configuration's minutes; its defaults are the durable ones already (`synchronous_commit=on`,
`fsync=on`: each commit is flushed to the WAL on disk before it returns).

Per system and configuration: enqueue one by one, bulk enqueue, drain with one worker
process (rate over the 90%→10% stretch of the backlog, bench/run.py's `steady_rate`, for
every system) and end-to-end latency (enqueue → the task body runs, sequential round trips,
worker running). Median of `--runs`; the runs of the systems alternate within each metric.
Writes bench/results/peers.md and bench/results/peers.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

import uvloop

from bench import peer_pgqueuer, peer_taskiq
from bench import run as floor
from bench.peer_apps import PGQ_BATCH, PGQ_MANAGERS
from taskq.server import EmbeddedServer, find_binary
from tests.postgres import PgServer  # one throwaway Postgres, as the outbox tests start it

SYSTEMS = ("taskq", "raw", "pgqueuer", "taskiq")
PEERS = ("pgqueuer", "taskiq")
LABELS = {"taskq": "taskq", "raw": "raw nats-py", "pgqueuer": "PgQueuer", "taskiq": "taskiq-nats"}
METRICS = {  # key: (label, unit, higher is better)
    "one": ("enqueue one-by-one", "tasks/s", True),
    "bulk": ("bulk enqueue", "tasks/s", True),
    "drain": ("drain, 1 worker process", "tasks/s", True),
    "p50": ("latency p50", "ms", False),
    "p99": ("latency p99", "ms", False),
}
CONFIGS = {  # name: (nats-server sync_interval, what it is)
    "default": (
        None,
        "nats-server default sync (sync_interval 2m); Postgres defaults "
        "(synchronous_commit=on, fsync=on: every commit flushed before it returns)",
    ),
    "durable": (
        "always",
        "nats-server `jetstream { sync_interval: always }` (fsync per write before the ack); "
        "Postgres defaults, which already flush every commit (synchronous_commit=on, fsync=on)",
    ),
}
PEER_SETUP = {
    "taskq": "`taskq worker bench.apps:app` (defaults: result records, a log line per task) for "
    "the drain; an in-process `Worker(app, concurrency=16)` for latency (bench/run.py)",
    "raw": "nats-py: `js.publish` one by one; `js.publish_async` x 2048 then gather the acks; "
    "bench/raw_consumer.py (`fetch(256)` + ack) for the drain; an in-process pull loop "
    "(`fetch(16)`) for latency (bench/run.py)",
    "pgqueuer": f"PgQueuer, asyncpg driver, Postgres over TCP loopback, schema from "
    f"`Queries.install()` (durability `durable`, no `pgq autovac`); enqueue: "
    f"`queries.enqueue('noop', payload)`; bulk: one `queries.enqueue([...] * n, ...)` call; "
    f"worker (drain: a process of its own; latency: in the benchmark's process): uvloop, "
    f"{PGQ_MANAGERS} `PgQueuer` instances (QueueManager + SchedulerManager), one asyncpg "
    f"connection each, `run(batch_size={PGQ_BATCH})`, continuous mode, as its "
    f"tools/benchmark.py",
    "taskiq": "taskiq-nats `PullBasedJetStreamBroker` (durable pull consumer, its defaults: "
    "`pull_consume_batch=1`, limits retention), no result backend (taskiq's default "
    "`DummyResultBackend`); enqueue: `await task.kiq(i)`; no bulk API; worker: "
    "`taskiq worker bench.peer_apps:broker --workers 1`, other options default (uvloop, "
    "100 async tasks, ack when saved); latency: the body answers over core NATS (one "
    "hop more than the other columns' in-process loops)",
}


@dataclass(frozen=True)
class Target:
    """One target of the peer comparison: taskq's `metric` against `factor` x `other`'s."""

    text: str
    metric: str
    other: str  # a system, or "peer": the best peer with a value
    factor: float


TARGETS = {  # what taskq aims for beside the raw loop and PgQueuer, per configuration
    "durable": [
        Target("taskq drain ≥ 0.8x raw drain", "drain", "raw", 0.8),
        Target("taskq bulk enqueue ≥ PgQueuer bulk enqueue", "bulk", "pgqueuer", 1.0),
    ],
    "default": [
        Target("taskq drain ≥ 0.5x raw drain", "drain", "raw", 0.5),
        Target("taskq drain ≥ 1.5x PgQueuer drain", "drain", "pgqueuer", 1.5),
        Target("taskq p50 ≤ 1.05x raw p50", "p50", "raw", 1.05),
        Target("taskq enqueue one-by-one ≥ 0.95x raw", "one", "raw", 0.95),
        Target("taskq bulk enqueue ≥ 0.8x raw bulk", "bulk", "raw", 0.8),
    ],
}

RATIOS = (
    "Ratios are taskq's median over the other's: above 1 is better for rates, below 1 for "
    "latency; the best peer is the faster of PgQueuer and taskiq-nats on that row. "
    "`-`: no such API (taskiq-nats has no bulk enqueue) or not measured."
)

Measure = Callable[[int], Awaitable[Any]]


@dataclass
class ConfigResult:
    """One configuration's samples (per metric, per system, one per run) and medians."""

    name: str
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # measurements that raised

    def add(self, metric: str, system: str, value: float) -> None:
        self.samples.setdefault(metric, {}).setdefault(system, []).append(value)

    def median(self, metric: str, system: str) -> float | None:
        values = self.samples.get(metric, {}).get(system)
        return statistics.median(values) if values else None


# -- what each system runs ------------------------------------------------------------------
def plans(url: str, dsn: str) -> dict[str, dict[str, Measure | None]]:
    """Per system, per measurement ("one", "bulk", "drain", "latency"): a coroutine taking
    the task count. None: the system has no such API."""
    return {
        "taskq": {
            "one": lambda n: floor.taskq_enqueue_one_by_one(url, n),
            "bulk": lambda n: floor.taskq_enqueue_bulk(url, n),
            "drain": lambda n: floor.drain_rate(url, n, False),
            "latency": lambda n: floor.taskq_latency(url, n),
        },
        "raw": {
            "one": lambda n: floor.raw_enqueue_one_by_one(url, n),
            "bulk": lambda n: floor.raw_enqueue_bulk(url, n),
            "drain": lambda n: floor.drain_rate(url, n, True),
            "latency": lambda n: floor.raw_latency(url, n),
        },
        "pgqueuer": {
            "one": lambda n: peer_pgqueuer.enqueue_one_by_one(dsn, n),
            "bulk": lambda n: peer_pgqueuer.enqueue_bulk(dsn, n),
            "drain": lambda n: peer_pgqueuer.drain(dsn, n),
            "latency": lambda n: peer_pgqueuer.latency(dsn, n),
        },
        "taskiq": {
            "one": lambda n: peer_taskiq.enqueue_one_by_one(url, n),
            "bulk": None,
            "drain": lambda n: peer_taskiq.drain(url, n),
            "latency": lambda n: peer_taskiq.latency(url, n),
        },
    }


def sizes(args: argparse.Namespace) -> dict[str, int]:
    """Task count per measurement."""
    return {
        "one": args.enqueue or args.tasks,
        "bulk": args.tasks,
        "drain": args.tasks,
        "latency": args.latency,
    }


# -- measuring ------------------------------------------------------------------------------
async def measure_config(
    name: str, url: str, dsn: str, systems: list[str], args: argparse.Namespace
) -> ConfigResult:
    """Every measurement of every system, `args.runs` times, the systems alternating within
    each run so a busy minute on the shared machine hits them all alike."""
    result = ConfigResult(name)
    plan, n = plans(url, dsn), sizes(args)
    for key in ("one", "bulk", "drain", "latency"):
        for run in range(args.runs):
            for system in systems:
                measure = plan[system][key]
                if measure is not None:
                    await attempt(result, key, system, run, measure(n[key]))
    return result


async def attempt(
    result: ConfigResult, key: str, system: str, run: int, job: Awaitable[Any]
) -> None:
    """Run one measurement and record it; one that raises is noted (its cell stays empty)
    and the run goes on, so one broken peer does not cost the others' figures."""
    try:
        record(result, key, system, await job)
    except Exception as exc:
        note = f"{key} {system} run {run + 1}: {type(exc).__name__}: {exc}"
        result.errors.append(note)
        print(f"[{result.name}] FAILED {note}", file=sys.stderr)
        return
    progress(result, key, system, run)


def record(result: ConfigResult, key: str, system: str, value: Any) -> None:
    """A rate as it is; a latency run's samples as its p50 and p99 in ms."""
    if key == "latency":
        result.add("p50", system, floor.percentile(value, 0.5) * 1000)
        result.add("p99", system, floor.percentile(value, 0.99) * 1000)
    else:
        result.add(key, system, value)


def progress(result: ConfigResult, key: str, system: str, run: int) -> None:
    """One line on stderr per measurement: a long run shows where it is."""
    metric = "p50" if key == "latency" else key
    value = result.samples[metric][system][-1]
    print(f"[{result.name}] {key} {system} run {run + 1}: {value:,.2f}", file=sys.stderr)


def run_config(
    name: str, pg: PgServer | None, systems: list[str], args: argparse.Namespace
) -> ConfigResult:
    """A nats-server in `name`'s configuration (fresh store), the measurements on it (and on
    the run's Postgres), the server stopped and its store removed."""
    sync = CONFIGS[name][0]
    dsn = pg.dsn if pg else ""
    with (
        tempfile.TemporaryDirectory(prefix=f"peers-nats-{name}-") as store,
        EmbeddedServer(store_dir=store, sync=sync) as server,
    ):
        return uvloop.run(measure_config(name, server.url, dsn, systems, args))


# -- the comparison -------------------------------------------------------------------------
def best_peer(result: ConfigResult, metric: str) -> tuple[str, float] | None:
    """The best peer's median for `metric` (highest rate, lowest latency), if any has one."""
    found = [(p, v) for p in PEERS if (v := result.median(metric, p)) is not None]
    if not found:
        return None
    higher = METRICS[metric][2]
    return (max if higher else min)(found, key=lambda pv: pv[1])


def ratio(result: ConfigResult, metric: str, other: str) -> float | None:
    """taskq's median over `other`'s ("peer": the best peer's)."""
    ours = result.median(metric, "taskq")
    if other == "peer":
        best = best_peer(result, metric)
        theirs = best[1] if best else None
    else:
        theirs = result.median(metric, other)
    return ours / theirs if ours is not None and theirs else None


def judge(target: Target, result: ConfigResult) -> dict[str, Any]:
    """A target's ratio (taskq over the other) and whether it is met (None: not measured)."""
    value = ratio(result, target.metric, target.other)
    met = None
    if value is not None:
        higher = METRICS[target.metric][2]
        met = value >= target.factor if higher else value <= target.factor
    return {"target": target.text, "ratio": value, "met": met}


# -- output ---------------------------------------------------------------------------------
def cell(value: float | None, unit: str) -> str:
    """A table cell: rates as whole numbers, ms and ratios with two decimals, "-" if none."""
    if value is None:
        return "-"
    return f"{value:,.2f}" if unit in ("ms", "x") else f"{value:,.0f}"


def table(result: ConfigResult) -> list[str]:
    """The configuration's markdown table: medians, taskq/raw and taskq/best peer."""
    head = " | ".join(LABELS[s] for s in SYSTEMS)
    lines = [
        f"| metric | unit | {head} | taskq/raw | taskq/best peer |",
        "|---|---|" + "---|" * (len(SYSTEMS) + 2),
    ]
    for metric, (label, unit, _) in METRICS.items():
        values = [cell(result.median(metric, s), unit) for s in SYSTEMS]
        best = best_peer(result, metric)
        vs_peer = cell(ratio(result, metric, "peer"), "x")
        vs_peer += f" ({LABELS[best[0]]})" if best and vs_peer != "-" else ""
        lines.append(
            f"| {label} | {unit} | {' | '.join(values)} | "
            f"{cell(ratio(result, metric, 'raw'), 'x')} | {vs_peer} |"
        )
    return lines


def targets_table(judged: list[dict[str, Any]]) -> list[str]:
    """The configuration's targets as a markdown table: ratio, met or not."""
    lines = ["| target | taskq / other | met |", "|---|---|---|"]
    for row in judged:
        met = {True: "met", False: "**not met**", None: "n/a (not measured)"}[row["met"]]
        lines.append(f"| {row['target']} | {cell(row['ratio'], 'x')} | {met} |")
    return lines


def render(meta: dict[str, Any], results: list[ConfigResult]) -> str:
    """The whole report: metadata, setups, and per configuration its table and targets."""
    lines = ["# taskq beside raw nats-py, PgQueuer and taskiq-nats (`python -m bench.peers`)", ""]
    lines += [f"* **{k}**: {v}" for k, v in meta["about"].items()]
    lines += ["", "Setups:", ""] + [f"* **{LABELS[s]}**: {PEER_SETUP[s]}" for s in SYSTEMS]
    for result in results:
        lines += ["", f"## {result.name}: {CONFIGS[result.name][1]}", ""]
        lines += [*table(result), "", RATIOS, ""]
        lines += [f"* failed: {e}" for e in result.errors] + ([""] if result.errors else [])
        lines += targets_table([judge(t, result) for t in TARGETS[result.name]])
    return "\n".join(lines) + "\n"


def versions(pg: PgServer | None) -> dict[str, str]:
    """Versions of everything measured."""
    import taskq

    server = subprocess.run([find_binary(), "--version"], capture_output=True, text=True)
    found = {"taskq": taskq.__version__, "nats-server": server.stdout.strip().split(": ")[-1]}
    for name in ("nats-py", "pgqueuer", "asyncpg", "taskiq", "taskiq-nats", "uvloop"):
        found[name] = metadata.version(name)
    found["postgres"] = pg.version().removeprefix("postgres (PostgreSQL) ") if pg else "-"
    return found


def about(args: argparse.Namespace, load: tuple[float, float, float], pg: Any) -> dict[str, Any]:
    """The run's metadata: versions, machine, date, load at the start, sizes."""
    sizes_ = sizes(args)
    return {
        "versions": ", ".join(f"{k} {v}" for k, v in versions(pg).items()),
        "machine": f"{os.cpu_count()} cores, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "sizes": f"median of {args.runs} run(s) each; {sizes_['one']:,} tasks one by one, "
        f"{sizes_['bulk']:,} bulk and drained, {sizes_['latency']:,} latency round trips "
        "(+20 warm-up)",
        "drain rate": "tasks/s while the backlog goes from 90% to 10% (bench/run.py's "
        "steady_rate), all systems",
    }


# -- the run --------------------------------------------------------------------------------
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `--only` becomes a list of known system names."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000, help="bulk enqueue and drain")
    parser.add_argument("--enqueue", type=int, default=0, help="one by one (default: --tasks)")
    parser.add_argument("--latency", type=int, default=1_000, help="latency round trips")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated systems")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--durable-only", action="store_true")
    which.add_argument("--default-only", action="store_true")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(args.only) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    """Postgres (if PgQueuer runs), each configuration's measurements, the report."""
    args = parse(argv)
    load = os.getloadavg()
    systems = [s for s in SYSTEMS if s in args.only]
    names = [c for c in CONFIGS if not (args.durable_only and c == "default")]
    names = [c for c in names if not (args.default_only and c == "durable")]
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(PgServer()) if "pgqueuer" in systems else None
        pg_settings = uvloop.run(prepare(pg)) if pg else {}
        results = [run_config(name, pg, systems, args) for name in names]
        meta = {"about": about(args, load, pg), "postgres settings": pg_settings}
    write(meta, results, args)


async def prepare(pg: PgServer) -> dict[str, str]:
    """PgQueuer's schema installed; the Postgres settings that make it durable, read back."""
    await peer_pgqueuer.install(pg.dsn)
    return await peer_pgqueuer.settings(pg.dsn)


def write(meta: dict[str, Any], results: list[ConfigResult], args: argparse.Namespace) -> None:
    """Print the report; write bench/results/peers.md and peers.json."""
    if meta["postgres settings"]:
        shown = ", ".join(f"{k}={v}" for k, v in meta["postgres settings"].items())
        meta["about"]["postgres settings"] = shown
    report = render(meta, results)
    print(report)
    floor.RESULTS.mkdir(exist_ok=True)
    (floor.RESULTS / "peers.md").write_text(report)
    payload = {
        "meta": meta,
        "args": vars(args),
        "setups": PEER_SETUP,
        "configs": {r.name: dump(r) for r in results},
    }
    (floor.RESULTS / "peers.json").write_text(json.dumps(payload, indent=2) + "\n")


def dump(result: ConfigResult) -> dict[str, Any]:
    """A configuration's samples, medians and judged targets, for peers.json."""
    medians = {m: {s: result.median(m, s) for s in SYSTEMS} for m in METRICS}
    return {
        "description": CONFIGS[result.name][1],
        "medians": medians,
        "samples": asdict(result)["samples"],
        "errors": result.errors,
        "targets": [judge(t, result) for t in TARGETS[result.name]],
    }


if __name__ == "__main__":
    main()
