"""Run the pipeline: `python -m examples.pipeline [--records N] [--out DIR] [--run NAME]`.

Needs a server (`taskq server`) and a worker (`taskq worker examples.pipeline.tasks:app`).
Starts one durable workflow run for the run folder (its id comes from the folder, so running
this again with `--run NAME` follows the same run instead of starting another), waits for its
result and prints the report's summary.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from examples.pipeline.tasks import app, pipeline
from taskq import TaskFailed, WorkflowRun
from taskq.errors import ResultTimeout


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--out", default=".taskq/pipeline")
    parser.add_argument(
        "--run", metavar="NAME", help="the run folder under --out (default: a new run-<time>)"
    )
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for it")
    args = parser.parse_args()
    run_dir = Path(args.out).resolve() / (args.run or time.strftime("run-%Y%m%d-%H%M%S"))
    following = bool(args.run) and run_dir.exists()
    sys.exit(asyncio.run(_run(run_dir, args.records, args.wait, following)))


def run_key(run_dir: Path) -> str:
    """The run's id for this folder: starting it again is the same run (idempotent)."""
    return "pipeline-" + hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]


async def _run(run_dir: Path, records: int, wait: float, following: bool) -> int:
    """Start the folder's run (or find it: the same key is the same run, its own arguments
    kept) and follow it to its end; the exit code."""
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        run = await pipeline.options(key=run_key(run_dir)).start(str(run_dir), records)
        told = "following it" if following else f"{records:,} orders"
        print(f"workflow run {run.id}: {told} into {run_dir}")
        print(f"  its steps: taskq workflows show {run.id}; follow it again: --run {run_dir.name}")
        summary = await _follow(run, run_dir, wait)
    except TaskFailed as exc:  # a stage dead-lettered: fix it, then resume from that stage
        print(f"\nthe run failed: {exc}\nafter a fix: taskq workflows retry {run.id}")
        return 1
    finally:
        await app.aclose()
    if summary is None:
        print(f"\nno result after {wait:.0f}s: is a worker running?", file=sys.stderr)
        return 1
    print(f"\nreport ready: {run_dir / 'report'}")
    print(json.dumps(summary, indent=2))
    return 0


async def _follow(run: WorkflowRun, run_dir: Path, wait: float) -> Any:
    """The run's result (raises if it failed), or None after `wait` seconds."""
    began = time.monotonic()
    while time.monotonic() - began < wait:
        try:
            return await run.result(timeout=1.0)
        except ResultTimeout:
            cleaned = len(list((run_dir / "clean").glob("part-*.jsonl")))
            took = time.monotonic() - began
            print(f"\r{took:6.1f}s  {await run.status():9}  chunks cleaned: {cleaned}", end="")
            sys.stdout.flush()
    return None


if __name__ == "__main__":
    main()
