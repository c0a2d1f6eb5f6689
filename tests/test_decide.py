"""`decide()` is pure: a table of (policy, attempt, outcome) → decision."""

from __future__ import annotations

import pytest

from taskq.errors import ArgumentsError, Reject, Retry, TaskTimeout
from taskq.policy import Ack, Dead, Failure, Nak, RetryPolicy, Success, decide

P = RetryPolicy(max_retries=3, backoff=1.0, backoff_max=10.0, jitter=0.0)
ONLY_IO = RetryPolicy(max_retries=3, retry_for=(OSError,), jitter=0.0)
GIVE_UP = RetryPolicy(max_retries=3, give_up_on=(KeyError,), jitter=0.0)


@pytest.mark.parametrize(
    ("policy", "attempt", "outcome", "expected"),
    [
        (P, 1, Success(42), Ack()),
        (P, 4, Success(None), Ack()),
        (P, 1, Failure(ValueError()), Nak(1.0)),
        (P, 2, Failure(ValueError()), Nak(2.0)),
        (P, 3, Failure(ValueError()), Nak(4.0)),
        (P, 4, Failure(ValueError()), Dead("exhausted")),
        (P, 9, Failure(ValueError()), Dead("exhausted")),
        (P, 1, Failure(Reject("no")), Dead("permanent")),
        (P, 1, Failure(ArgumentsError("t", "bad")), Dead("permanent")),
        (P, 1, Failure(Retry(delay=7.5)), Nak(7.5)),
        (P, 1, Failure(Retry()), Nak(1.0)),
        (P, 4, Failure(Retry(delay=1)), Dead("exhausted")),
        (P, 1, Failure(TaskTimeout("t", 1.0)), Nak(1.0)),
        (ONLY_IO, 1, Failure(ConnectionError()), Nak(1.0)),
        (ONLY_IO, 1, Failure(ValueError()), Dead("permanent")),
        (GIVE_UP, 1, Failure(KeyError("k")), Dead("permanent")),
        (GIVE_UP, 1, Failure(ValueError()), Nak(1.0)),
        (RetryPolicy(max_retries=0), 1, Failure(ValueError()), Dead("exhausted")),
    ],
)
def test_decide_table(policy: RetryPolicy, attempt: int, outcome: object, expected: object) -> None:
    decision = decide(policy, attempt, outcome)  # type: ignore[arg-type]
    assert type(decision) is type(expected)
    if isinstance(expected, Nak):
        assert isinstance(decision, Nak) and decision.delay == pytest.approx(expected.delay)
    if isinstance(expected, Dead):
        assert isinstance(decision, Dead) and decision.reason == expected.reason


def test_delay_is_capped_and_jittered() -> None:
    policy = RetryPolicy(backoff=1.0, backoff_max=5.0, jitter=0.5)
    for attempt in range(1, 20):
        delay = policy.delay(attempt)
        assert 0 < delay <= 5.0 + 1e-9
    assert all(1.0 <= policy.delay(1) <= 1.5 for _ in range(50))
