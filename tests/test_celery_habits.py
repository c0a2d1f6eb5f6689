"""Celery habits get taskq answers (issue 39, 9): each Celery task option, `max_retries=None`,
`apply_async`, `.si()` and `|` are a ConfigError naming what taskq has instead."""

from __future__ import annotations

import pytest

from taskq import App, ConfigError

ANSWERS = {
    "bind": "taskq.current()",
    "autoretry_for": "retry_for=",
    "time_limit": "timeout=",
    "soft_time_limit": "remaining()",
    "acks_late": "always acknowledges after the task ends",
    "ignore_result": "store_result=False",
    "retry_backoff": "backoff=",
}


@pytest.mark.parametrize(("option", "answer"), sorted(ANSWERS.items()))
def test_a_celery_option_names_its_taskq_spelling(option: str, answer: str) -> None:
    app = App()
    with pytest.raises(ConfigError, match="Celery's") as refused:

        @app.task(**{option: True})
        def work() -> None: ...

    assert answer in str(refused.value) and option in str(refused.value)


def test_unlimited_retries_are_a_config_error() -> None:
    app = App()
    with pytest.raises(ConfigError, match="no unlimited retries"):

        @app.task(max_retries=None)
        def work() -> None: ...


def test_apply_async_si_and_pipes_point_to_taskq() -> None:
    app = App()

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(ConfigError, match=r"options\(countdown"):
        add.apply_async((1, 2), countdown=5)
    with pytest.raises(ConfigError, match="no immutable signatures"):
        add.si(1, 2)
    with pytest.raises(ConfigError, match=r"chain\(a.s\(\), b.s\(\)\)"):
        _ = add.s(1, 2) | add.s(3)
