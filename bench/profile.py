"""Where a worker's time goes per task, named: a sampled profile of a drain, by part.

    python -m bench.profile [--tasks 60000] [--store-result | --no-store-result]

Runs a worker in a child process of this one (`bench.profile_target`): it bulk-enqueues
`--tasks` no-op tasks, drains them with one in-process Worker (taskq's defaults, the log line
included, written to a file), and prints its rate. py-spy samples it during the drain
(500 Hz, the event loop's thread); each sample is attributed to the innermost frame that
belongs to a named part below, and a part's share of the samples times the CPU time per task
gives its microseconds per task. Writes bench/results/profile-drain.md (the table, then the
twenty hottest functions by own time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.run import RESULTS, ROOT

# (part, what marks it in a stack frame: a substring of "function (file)"), innermost wins
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("log line", ("workers/logs.py", "workers/settled_log.py", "logging/")),
    (
        "result record: build and encode",
        ("result_record (", "record_fields (", "taskq/records/results.py", "_encoded"),
    ),
    (
        "publish pipeline (records): send, await, acks read",
        ("taskq/nats/pipeline.py", "taskq/nats/kv.py", "publish_nowait", "workers/writes.py"),
    ),
    ("message acks", ("Delivery.ack", "Msg.ack", "Connection.ack_all", "acked_by_write")),
    (
        "decode the envelope",
        (
            "decode (taskq/records/envelope.py",
            "_json_object",
            "_slow_json",
            "_check_",
            "_flow (taskq/records/envelope.py",
            "Judge._decode",
            "parse_queue_subject",
        ),
    ),
    ("validate arguments", ("taskq/arguments.py",)),
    ("middleware and telemetry", ("taskq/middleware.py", "taskq/telemetry.py")),
    ("run the task (the no-op itself, timeout scope)", ("workers/execute.py", "noop (")),
    (
        "judge and bookkeeping (context, leases, progress, verdict)",
        (
            "workers/judge.py",
            "taskq/context.py",
            "workers/lease.py",
            "workers/control.py",
            "workers/progress.py",
            "taskq/policy.py",
            "workers/settle.py",
        ),
    ),
    (
        "fetch loop: pull requests, Delivery, a task per delivery",
        ("workers/worker.py", "taskq/nats/pull.py", "workers/slots.py", "create_task"),
    ),
    (
        "nats-py: read and parse what arrives",
        (
            "nats/protocol/parser.py",
            "_read_loop",
            "_process_msg",
            "_parse_header_lines",
            "_build_message",
            "nats/aio/msg.py",
        ),
    ),
    (
        "nats-py: publish and write to the socket",
        ("nats/aio/client.py", "asyncio/streams.py", "nats/aio/transport.py"),
    ),
]
OTHER = "event loop and the rest"
LOOP = "Runner.run (asyncio/runners.py)"  # in every stack of the event loop's thread


def part_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, marks in PARTS:
            if any(mark in frame for mark in marks):
                return name
    return OTHER


def frame_name(frame: str) -> str:
    """`function (file)` without line numbers and site-packages paths."""
    name, _, where = frame.strip().partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for cut in ("site-packages/", str(ROOT) + "/"):
        where = where.split(cut)[-1]
    return f"{name} ({where})"


def read_raw(path: Path) -> tuple[Counter[str], Counter[str], int]:
    parts: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [frame_name(f) for f in stack.split(";")]
        if not any(LOOP in frame for frame in frames):
            continue  # another thread's (an idle pool thread waiting on its queue looks busy)
        n = int(count)
        total += n
        parts[part_of(frames)] += n
        own[frames[-1]] += n
    return parts, own, total


def profile(tasks: int, store_result: bool) -> tuple[str, float, float]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory() as scratch:
        ready, raw = Path(scratch) / "ready", Path(scratch) / "drain.raw"
        cmd = [sys.executable, "-m", "bench.profile_target", str(tasks), str(ready)]
        cmd += [] if store_result else ["--no-store-result"]
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not ready.exists():
            if time.monotonic() > deadline or child.poll() is not None:
                raise RuntimeError("the profiled worker did not start")
            time.sleep(0.05)
        spied = subprocess.run(
            [spy, "record", "--pid", str(child.pid), "-r", "500", "-f", "raw", "-o", str(raw)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        out, _ = child.communicate(timeout=600)
        if not raw.exists():
            raise RuntimeError(f"py-spy wrote nothing: {spied.stderr.strip()}")
        parts, own, total = read_raw(raw)
    rate, cpu_us = (float(v) for v in out.split())
    return table(parts, own, total, rate, cpu_us, tasks, store_result), rate, cpu_us


def table(
    parts: Counter[str],
    own: Counter[str],
    total: int,
    rate: float,
    cpu_us: float,
    tasks: int,
    store_result: bool,
) -> str:
    setting = "defaults" if store_result else "store_result=False"
    lines = [
        f"{tasks} no-op tasks, one in-process worker ({setting}, log line on) · "
        f"{rate:,.0f} tasks/s · {cpu_us:.1f} µs of CPU per task · {total} samples · "
        f"{os.cpu_count()} cores · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| part | share of samples | µs per task |",
        "|---|---|---|",
    ]
    for name in [n for n, _ in PARTS] + [OTHER]:
        share = parts[name] / total if total else 0.0
        lines.append(f"| {name} | {share:.1%} | {share * cpu_us:.1f} |")
    lines += ["", "Hottest functions by own time:", "", "| function | own share |", "|---|---|"]
    lines += [f"| {name} | {n / total:.1%} |" for name, n in own.most_common(20)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=60_000)
    parser.add_argument("--no-store-result", action="store_true")
    args = parser.parse_args()
    text, _, _ = profile(args.tasks, not args.no_store_result)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    suffix = "-lean" if args.no_store_result else ""
    (RESULTS / f"profile-drain{suffix}.md").write_text(text)


if __name__ == "__main__":
    main()
