"""A data pipeline as a durable workflow: generate → clean/enrich (a Spark batch fan-out) →
report (a Spark job), resumable after a crash without redoing finished stages.

See docs/spark.md; run with `taskq worker examples.pipeline.tasks:app` and
`python -m examples.pipeline`.
"""
