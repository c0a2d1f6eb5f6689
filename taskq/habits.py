"""Celery's spellings, and what a Celery user writes in taskq instead: the ConfigError an
unknown `@app.task` option raises names it (docs/from-celery.md)."""

from __future__ import annotations

# Celery's task options, and what a Celery user writes in taskq instead
CELERY_OPTIONS = {
    "bind": "taskq passes no `self`: call taskq.current() in the task for its id, attempt "
    "and retries",
    "autoretry_for": "retry_for=(...) (every exception retries by default)",
    "time_limit": "timeout=SECONDS (the task is stopped then)",
    "soft_time_limit": "timeout=SECONDS, and taskq.current().remaining() in the task",
    "acks_late": "nothing: taskq always acknowledges after the task ends, its lease extended "
    "while it runs",
    "reject_on_worker_lost": "nothing: a task whose worker died runs again",
    "ignore_result": "store_result=False",
    "retry_backoff": "backoff=SECONDS (exponential), backoff_max=, jitter=",
    "retry_backoff_max": "backoff_max=SECONDS",
    "retry_jitter": "jitter=",
    "default_retry_delay": "backoff=SECONDS",
    "serializer": "nothing: arguments are JSON, checked against the signature",
}


def unknown_options(name: str, unknown: list[str]) -> str:
    """The ConfigError for options `@app.task` does not take: Celery's named with their
    taskq spelling."""
    celery = [
        f"{option}: {CELERY_OPTIONS[option]}" for option in unknown if option in CELERY_OPTIONS
    ]
    if celery:
        return f"task {name!r}: Celery's " + "; ".join(celery) + " (docs/from-celery.md)"
    return (
        f"task {name!r}: unknown option(s) {unknown} (a middleware accepts its own options "
        "when it names them in `task_options`)"
    )
