"""The pipeline as a durable workflow: one start runs it all, and it resumes after any crash
without redoing a finished stage (docs/spark.md, docs/workflows.md).

pipeline (workflow)         journals each stage as a step; a step that completed is never
                            run again for its run
generate (task)             synthetic orders → raw/part-*.jsonl, one file per chunk
clean    (Spark batch task) `wf.map` fans the chunks out: each cleaned and enriched on the
                            executors, many chunks per Spark job → clean/part-*.jsonl
report   (Spark job task)   aggregates the clean orders → report/ (Parquet, CSV, summary.json)

Every stage writes atomically and is keyed by its step id (`outputs.py`), so the step that was
in flight at a crash, which runs again, finds its own output or starts over cleanly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import taskq
from examples.pipeline.outputs import note, publish, published, staging, write_atomic
from examples.pipeline.records import clean_order, synthetic_orders
from taskq import App, Workflow

app = App()  # TASKQ_URL, TASKQ_SPARK_MASTER (default local[*]) from the environment
QUEUE = "pipeline"
CLEAN_SCHEMA = (
    "order_id LONG, customer STRING, country STRING, region STRING, month STRING,"
    " amount_eur DOUBLE, size STRING"
)


@app.workflow(queue=QUEUE)
async def pipeline(
    wf: Workflow, run_dir: str, records: int = 300_000, chunk: int = 1000
) -> dict[str, Any]:
    """generate → clean every chunk (a Spark batch fan-out) → report; the report's summary."""
    raw = await wf.run(generate, run_dir, records, chunk)
    cleaned = await wf.map(clean, [str(Path(run_dir, name)) for name in raw["chunks"]])
    summary: dict[str, Any] = await wf.run(report, run_dir, len(cleaned))
    return summary


@app.task(queue=QUEUE, max_retries=2)
def generate(run_dir: str, records: int = 300_000, chunk: int = 1000) -> dict[str, Any]:
    """Write `records` synthetic orders as JSON lines, `chunk` orders a file, under raw/."""
    step = taskq.current()
    note(run_dir, "generate", f"{step.id}#{step.attempt}", "start")
    final = Path(run_dir, "raw")
    made = published(final)
    if made is None:
        temp = staging(final, step.id)
        names = []
        for number, first in enumerate(range(0, records, chunk)):
            orders = synthetic_orders(first, min(chunk, records - first), seed=number)
            (temp / f"part-{number:05d}.jsonl").write_text(_lines(orders))
            names.append(f"raw/part-{number:05d}.jsonl")
        made = {"step": step.id, "orders": records, "chunks": names}
        publish(temp, final, made)
    note(run_dir, "generate", f"{step.id}#{step.attempt}", "done")
    return made


@app.batch_task(batch_size=16, max_wait=1.0, queue=QUEUE, max_retries=3)
def clean(chunk: str) -> dict[str, int]:
    """Clean one raw chunk on an executor into clean/<same name>, atomically: a rerun
    rewrites the same file (executors have no task context: the chunk is the key)."""
    raw = Path(chunk)
    run_dir = raw.parent.parent
    note(run_dir, "clean", raw.name, "start")
    orders = [json.loads(line) for line in raw.read_text().splitlines()]
    kept = [c for c in (clean_order(o) for o in orders) if c is not None]
    folder = run_dir / "clean"
    folder.mkdir(exist_ok=True)
    write_atomic(folder / raw.name, _lines(kept))
    note(run_dir, "clean", raw.name, "done")
    return {"kept": len(kept), "dropped": len(orders) - len(kept)}


@app.task(executor="spark", queue=QUEUE, max_retries=2)
def report(spark: Any, run_dir: str, chunks: int) -> dict[str, Any]:
    """Aggregate the `chunks` clean chunks: revenue per region, country and month (Parquet
    and CSV), the top customers, and summary.json."""
    step = taskq.current()
    note(run_dir, "report", f"{step.id}#{step.attempt}", "start")
    final = Path(run_dir, "report")
    summary = published(final, "summary.json")
    if summary is None:
        parts = sorted(Path(run_dir, "clean").glob("part-*.jsonl"))
        if len(parts) != chunks:  # the workflow runs report only after every clean step
            raise RuntimeError(f"{len(parts)} of {chunks} chunks are clean")
        temp = staging(final, step.id)
        summary = _aggregate(spark, run_dir, temp)
        publish(temp, final, summary, "summary.json")
    note(run_dir, "report", f"{step.id}#{step.attempt}", "done")
    return summary


def _aggregate(spark: Any, run_dir: str, out: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    # Spark skips hidden files: a clean cut short by a crash left at most a `.part-*` there
    orders = spark.read.schema(CLEAN_SCHEMA).json(str(Path(run_dir, "clean"))).cache()
    by_month = (
        orders.groupBy("region", "country", "month")
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount_eur"), 2).alias("revenue_eur"))
        .coalesce(1)  # a few hundred rows at most: one sorted file each
        .sortWithinPartitions("region", "country", "month")
        .cache()
    )
    by_month.write.parquet(str(out / "by_country_month.parquet"))
    by_month.write.option("header", True).csv(str(out / "by_country_month.csv"))
    top = (
        orders.groupBy("customer")
        .agg(F.round(F.sum("amount_eur"), 2).alias("revenue_eur"), F.count("*").alias("orders"))
        .orderBy(F.desc("revenue_eur"), "customer")
        .limit(10)
        .collect()
    )
    totals = orders.agg(F.count("*").alias("n"), F.sum("amount_eur").alias("eur")).first()
    raw = spark.read.option("pathGlobFilter", "part-*.jsonl").text(str(Path(run_dir, "raw")))
    summary = {
        "raw_orders": raw.count(),
        "clean_orders": int(totals["n"]),
        "revenue_eur": round(float(totals["eur"] or 0.0), 2),
        "top_customers": [r.asDict() for r in top],
    }
    orders.unpersist()
    by_month.unpersist()
    return summary


def _lines(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)
