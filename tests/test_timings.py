"""`Settings.timings` (taskq.Timings): production's delays by default, shortened for tests,
and from TASKQ_TIMINGS for worker processes; a delay that is no finite positive number of
seconds is a ConfigError, not a worker that overflows later."""

from __future__ import annotations

import pytest

from taskq import App, ConfigError, Timings


def test_timings_default_to_production_and_short_shortens_them() -> None:
    assert App().settings.timings == Timings()
    assert Timings().unknown_again == 5.0 and Timings.short().unknown_again < 1.0


@pytest.mark.parametrize(
    ("value", "unknown_again"),
    [("short", Timings.short().unknown_again), ('{"unknown_again": 1.5}', 1.5)],
)
def test_taskq_timings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, unknown_again: float
) -> None:
    monkeypatch.setenv("TASKQ_TIMINGS", value)
    assert App().settings.timings.unknown_again == unknown_again


@pytest.mark.parametrize(
    "value",
    ["fast", '{"unknown_again": Infinity}', '{"unknown_again": 0}', '{"nope": 1}', "[1]"],
)
def test_a_bad_taskq_timings_is_a_config_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TASKQ_TIMINGS", value)
    with pytest.raises(ConfigError, match="timings"):
        App()
