"""Spark tasks for `taskq worker tests.spark.apps:app` in a subprocess (the cluster test).

The executors of a standalone cluster cannot import `tests`: this module reaches them by
value, which is what the test proves.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from taskq import App

app = App(spark_conf={"spark.cores.max": "2", "spark.executor.memory": "512m"})


@app.task(executor="spark")
def count_words(spark: Any, text: str, out: str) -> int:
    """A job task: counts words with an RDD job and writes the answer where it is told."""
    words = spark.sparkContext.parallelize(text.split(), 2)
    total = int(words.map(lambda _: 1).sum())
    Path(out).write_text(str(total))
    return total


@app.batch_task(batch_size=100, max_wait=0.5)
def double(x: int, out: str) -> int:
    """A batch item: leaves a marker naming the process that ran it."""
    Path(out, str(x)).write_text(str(os.getpid()))
    return 2 * x
