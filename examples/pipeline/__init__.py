"""A data pipeline on Spark: generate → clean/enrich (batch task) → report (job task).

See docs/spark.md; run with `taskq worker examples.pipeline.tasks:app` and
`python -m examples.pipeline`.
"""
