"""The pipeline's tasks. One enqueue of `generate` runs it all:

generate (Spark job task)  synthetic orders → raw Parquet, then one `clean` message per
                           chunk of orders, then `report`
clean    (Spark batch task) each chunk cleaned and enriched on the executors, written as
                           JSON lines; many chunks run as one Spark job
report   (Spark job task)  waits (Retry) until every chunk is clean, then aggregates to
                           Parquet and CSV and writes summary.json
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from examples.pipeline.records import SYNTHETIC_ORDERS, clean_order
from taskq import App, Retry

app = App()  # TASKQ_URL, TASKQ_SPARK_MASTER (default local[*]) from the environment
QUEUE = "pipeline"


@app.task(executor="spark", queue=QUEUE, max_retries=2)
def generate(spark: Any, run_dir: str, records: int = 300_000, chunk: int = 1000) -> int:
    """Write `records` synthetic orders to Parquet, then enqueue their cleaning and the report."""
    raw = str(Path(run_dir, "raw"))
    spark.range(records).selectExpr(*SYNTHETIC_ORDERS).write.mode("overwrite").parquet(raw)
    rows = (row.asDict() for row in spark.read.parquet(raw).toLocalIterator())
    chunks = 0
    for number, orders in enumerate(_batched(rows, chunk)):
        # keyed per chunk: a retried `generate` does not enqueue a chunk twice
        clean.options(key=f"{Path(run_dir).name}.clean.{number}").delay(run_dir, number, orders)
        chunks += 1
    report.options(key=f"{Path(run_dir).name}.report").delay(run_dir, chunks)
    return chunks


@app.batch_task(batch_size=16, max_wait=1.0, queue=QUEUE, max_retries=3)
def clean(run_dir: str, number: int, orders: list[dict[str, Any]]) -> dict[str, int]:
    """Clean one chunk on an executor; written atomically, so a rerun just rewrites it."""
    kept = [c for c in (clean_order(o) for o in orders) if c is not None]
    folder = Path(run_dir, "clean")
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f"part-{number:05d}.jsonl"
    temp = folder / f".{part.name}.{os.getpid()}"
    temp.write_text("".join(json.dumps(c) + "\n" for c in kept))
    os.replace(temp, part)
    return {"kept": len(kept), "dropped": len(orders) - len(kept)}


@app.task(executor="spark", queue=QUEUE, max_retries=600)
def report(spark: Any, run_dir: str, chunks: int) -> dict[str, Any]:
    """Aggregate the clean orders once all `chunks` are there (until then: retry in 1 s)."""
    folder = Path(run_dir, "clean")
    done = len(list(folder.glob("part-*.jsonl"))) if folder.exists() else 0
    if done < chunks:
        raise Retry(delay=1.0, reason=f"{done}/{chunks} chunks cleaned")
    from pyspark.sql import functions as F

    orders = spark.read.schema(
        "order_id LONG, customer STRING, country STRING, region STRING, month STRING,"
        " amount_eur DOUBLE, size STRING"
    ).json(str(folder))  # Spark skips the ".part-*" files of a clean still writing
    out = Path(run_dir, "report")
    by_month = (
        orders.groupBy("region", "country", "month")
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount_eur"), 2).alias("revenue_eur"))
        .orderBy("region", "country", "month")
    )
    by_month.write.mode("overwrite").parquet(str(out / "by_country_month.parquet"))
    by_month.coalesce(1).write.mode("overwrite").option("header", True).csv(
        str(out / "by_country_month.csv")
    )
    top = (
        orders.groupBy("customer")
        .agg(F.round(F.sum("amount_eur"), 2).alias("revenue_eur"), F.count("*").alias("orders"))
        .orderBy(F.desc("revenue_eur"))
        .limit(10)
    )
    totals = orders.agg(F.count("*").alias("n"), F.sum("amount_eur").alias("eur")).first()
    summary = {
        "clean_orders": int(totals["n"]),
        "revenue_eur": round(float(totals["eur"] or 0.0), 2),
        "raw_orders": spark.read.parquet(str(Path(run_dir, "raw"))).count(),
        "top_customers": [r.asDict() for r in top.collect()],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))  # last: the done signal
    return summary


def _batched(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    it = iter(rows)
    while batch := list(islice(it, size)):
        yield batch
