"""How the settler chooses to write a group's result records (`RecordBatches` in workers/writes.py):
each way measured once, then the one that cost less per record lately, the other tried
again every EXPLORE-th group; a lone record always goes alone."""

from __future__ import annotations

from taskq.workers.writes import EXPLORE, RecordBatches


def test_each_way_is_measured_once_then_the_cheaper_is_kept_and_the_other_explored() -> None:
    choice = RecordBatches()
    assert choice.pick(1) is False  # one record: nothing to batch
    first = choice.pick(50)
    choice.observe(first, 50, 0.050)  # 1 ms a record
    second = choice.pick(50)
    assert {first, second} == {True, False}
    choice.observe(second, 50, 0.005)  # 0.1 ms a record: the cheaper way
    picks = [choice.pick(50) for _ in range(4 * EXPLORE)]
    assert picks.count(second) == 4 * EXPLORE - 4 and picks.count(first) == 4


def test_a_way_that_grew_dear_is_left_for_the_other() -> None:
    choice = RecordBatches()
    choice.observe(True, 10, 0.001)
    choice.observe(False, 10, 0.002)
    assert choice.pick(10) is True
    for _ in range(20):  # the server began to take longer for batches (say, a new disk)
        choice.observe(True, 10, 0.010)
    assert choice.pick(10) is False
