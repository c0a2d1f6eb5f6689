"""Tracebacks led by the user's code (issue 27): the exception and the user's frames first,
taskq's own frames (files inside the installed taskq package: taskq/, taskq.workers,
taskq.dlq) folded: in `taskq dlq show` and `taskq task` one line says how many are hidden
and `-v` shows them. Pure tests of the folding, then the commands on a real dead letter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import taskq
import taskq.dlq
import taskq.workers
from taskq import App
from taskq.operate.tracebacks import fold, is_taskq_file
from tests.conftest import run_cli, running_worker, wait_until

OWN = str(Path(taskq.__file__).parent)
WORKERS = str(Path(taskq.workers.__file__).parent)

TRACE = f'''Traceback (most recent call last):
  File "{WORKERS}/execute.py", line 34, in run_attempt
    value = await chain.process(ctx, call)
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{OWN}/middleware.py", line 75, in process
    return await hooks[0](ctx, run)
  File "/srv/app/billing.py", line 17, in charge
    return gateway(n)
  File "/srv/app/gateway.py", line 8, in gateway
    raise ValueError(f"bad {{n}}")
ValueError: bad 1
'''

CHAINED = """Traceback (most recent call last):
  File "/srv/app/billing.py", line 21, in charge
    return lookup(n)
KeyError: 'n'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/taskq/workers/execute.py", line 34, in run_attempt
    value = await chain.process(ctx, call)
  File "/srv/app/billing.py", line 23, in charge
    raise LookupError("no such order") from e
  File "/venv/lib/python3.12/site-packages/taskq/context.py", line 40, in progress
    raise
LookupError: no such order
  with a second line
"""


def test_the_exception_and_the_users_frames_come_first() -> None:
    folded = fold(TRACE)
    assert folded is not None
    (section,) = folded.sections
    assert section.exception == "ValueError: bad 1"
    assert section.shown() == [
        '  File "/srv/app/billing.py", line 17, in charge',
        "    return gateway(n)",
        '  File "/srv/app/gateway.py", line 8, in gateway',
        '    raise ValueError(f"bad {n}")',
    ]
    assert len(section.hidden()) == 2 and section.modules() == ["execute", "middleware"]
    assert "execute.py" in "\n".join(section.hidden_lines())
    assert section.hidden_lines()[2] == "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"


def test_chained_exceptions_last_first_and_other_installs_are_taskq_too() -> None:
    folded = fold(CHAINED)
    assert folded is not None
    last, cause = folded.sections
    assert last.exception == "LookupError: no such order\n  with a second line"
    assert last.link == "" and cause.link == "cause"
    # a taskq frame after the user's is marked where it was, not dropped silently
    assert last.shown() == [
        '  File "/srv/app/billing.py", line 23, in charge',
        '    raise LookupError("no such order") from e',
        "  … 1 taskq frame folded",
    ]
    assert [len(s.hidden()) for s in folded.sections] == [2, 0]
    assert cause.exception == "KeyError: 'n'" and len(cause.shown()) == 2
    lines = folded.text_lines(hint="-v shows them")
    assert lines[0] == "LookupError: no such order"
    assert "  2 taskq frames hidden (-v shows them)" in lines
    assert "The direct cause: KeyError: 'n'" in lines


def test_what_is_not_a_traceback_is_left_alone() -> None:
    assert fold("") is None and fold("Traceback...\nValueError: 3") is None
    assert is_taskq_file(f"{OWN}/story.py") and is_taskq_file(f"{WORKERS}/worker.py")
    assert is_taskq_file(str(Path(taskq.dlq.__file__).parent / "write.py"))
    assert not is_taskq_file("/srv/app/workers/tasks.py")  # a user's own `workers` folder
    assert not is_taskq_file(f"{OWN}-extras/thing.py")


def failing(n: int) -> None:
    raise ValueError(f"card declined for order {n}")


async def test_dlq_show_and_task_fold_taskqs_frames(app: App, nats_url: str, prefix: str) -> None:
    @app.task(max_retries=0)
    async def charge(n: int) -> None:
        failing(n)

    async with running_worker(app) as worker:
        handle = await charge.enqueue(7)
        await wait_until(lambda: worker.stats["dead"] == 1)
    for args in (("dlq", "show", "1"), ("task", handle.id)):
        shown = await asyncio.to_thread(run_cli, nats_url, prefix, *args)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        trace = out[out.rindex("ValueError: card declined for order 7\n") :].splitlines()
        assert trace[1].strip() == "Traceback (most recent call last):", out
        assert trace[2].strip().startswith('File "') and "test_tracebacks.py" in trace[2], out
        assert "in charge" in trace[2] and "in failing" in out
        assert "execute.py" not in out and "middleware.py" not in out, out
        hidden = [line for line in trace if "taskq frames hidden" in line]
        assert len(hidden) == 1 and hidden[0].endswith("(-v shows them)"), out
        everything = await asyncio.to_thread(run_cli, nats_url, prefix, *args, "-v")
        assert "workers/execute.py" in everything.stdout, everything.stdout
        assert "taskq frames hidden" not in everything.stdout
