"""Features plug into a delivery as stages (workers/stages.py): a plain task passes the
judge without any stage's code running, a delivery that carries a feature's mark is
checked by that feature's stage, and a stage a worker does not need is not wired."""

from __future__ import annotations

from collections import Counter
from typing import Any

from taskq import App
from taskq.workers import Worker
from taskq.workers.stages import RanAtThisSite, Stage, stages_for
from tests.conftest import running_worker


def counted(worker: Worker) -> Counter[str]:
    """Count each wired stage's `applies` and `check` calls from now on."""
    calls: Counter[str] = Counter()
    assert worker._parts is not None
    stages = worker._parts.judge._stages
    for stage in [*stages.on_arrival.stages, *stages.before_run.stages]:
        _count(stage, calls)
    return calls


def _count(stage: Stage, calls: Counter[str]) -> None:
    name = type(stage).__name__
    applies, check = stage.applies, stage.check

    def applies_counted(job: Any) -> bool:
        calls[f"{name}.applies"] += 1
        return applies(job)

    async def check_counted(job: Any) -> Any:
        calls[f"{name}.check"] += 1
        return await check(job)

    stage.applies = applies_counted  # type: ignore[method-assign]
    stage.check = check_counted  # type: ignore[method-assign]


async def test_a_plain_task_meets_no_stage_and_a_delayed_one_meets_its_own(app: App) -> None:
    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    async with running_worker(app, queues=["default"]) as worker:
        calls = counted(worker)
        handles = [await add.enqueue(n, 1) for n in range(5)]
        assert [await h.result(timeout=30) for h in handles] == [1, 2, 3, 4, 5]
        assert calls == Counter()  # no stage's code ran for a plain task
        delayed = await add.options(countdown=0.05).enqueue(10, 1)
        assert await delayed.result(timeout=30) == 11
    assert calls["DueLater.check"] >= 1  # its eta marked it for the one stage it concerns
    assert calls["BurstWakeUp.check"] == calls["StepInJournal.check"] == 0


def test_the_site_stage_is_wired_only_at_a_site(app: App) -> None:
    def wired(site: str | None) -> list[str]:
        stages = stages_for(app, site)
        return [type(s).__name__ for s in [*stages.on_arrival.stages, *stages.before_run.stages]]

    assert RanAtThisSite.__name__ not in wired(None)
    assert RanAtThisSite.__name__ in wired("s1")
    phase = stages_for(app, "s1").before_run
    assert "Nats-Stream-Source" in phase.headers and set(phase.fields) == {"workflow", "eta"}
