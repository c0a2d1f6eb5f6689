"""Run the pipeline: `python -m examples.pipeline [--records N] [--out DIR]`.

Needs a server (`taskq server`) and a worker (`taskq worker examples.pipeline.tasks:app`).
Enqueues `generate` once, then waits for the report and prints its summary.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from examples.pipeline.tasks import app, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--out", default=".taskq/pipeline")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for it")
    args = parser.parse_args()
    run_dir = Path(args.out).resolve() / time.strftime("run-%Y%m%d-%H%M%S")
    began = time.monotonic()
    handle = generate.delay(str(run_dir), args.records)
    print(f"enqueued generate {handle.id}: {args.records} orders into {run_dir}")
    summary = run_dir / "report" / "summary.json"
    while not summary.exists():
        if time.monotonic() - began > args.wait:
            raise SystemExit(f"no report after {args.wait:.0f}s: is a worker running?")
        cleaned = len(list((run_dir / "clean").glob("part-*.jsonl")))
        print(f"\r{time.monotonic() - began:6.1f}s  chunks cleaned: {cleaned}", end="", flush=True)
        time.sleep(1.0)
    print(f"\nreport ready in {time.monotonic() - began:.1f}s: {summary.parent}")
    print(json.dumps(json.loads(summary.read_text()), indent=2))
    app.close()


if __name__ == "__main__":
    main()
