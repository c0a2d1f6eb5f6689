"""Property tests: whatever text an id, key, task or queue name holds, what taskq makes of
it for a subject, a header, a KV key or an object name is valid there and never collides
with what another one makes (the finding: a 5,000-character key closed the connection, a
`>` key purged every schedule, `a\\nb` and `a b` were one idempotency key)."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from taskq.dlq.write import _subject_safe as dlq_task_token
from taskq.dlq.write import dead_letter_id
from taskq.errors import ConfigError, UnsafeName
from taskq.flowcontrol.keys import call_digest, token
from taskq.ids import MAX_KEY, check_key, safe_id
from taskq.nats.outbound import check
from taskq.schedules import delayed_name
from taskq.topology.names import Names, check_queue, check_task

# nats-py's own key alphabet (nats.js.kv): what a KV key may hold
KV_KEY = re.compile(r"^[-/_=\.a-zA-Z0-9]+$")
anything = st.text(min_size=1, max_size=6000) | st.text(
    alphabet=st.sampled_from(list(" \t\r\n.*>$:~/\\\x00\u2028é\U0001f600")), min_size=1
)
names = Names("tq")


@settings(max_examples=400, deadline=None)
@given(anything)
def test_a_safe_id_fits_every_place_an_id_goes(task_id: str) -> None:
    safe = safe_id(task_id)
    assert KV_KEY.match(safe) and len(safe) <= 130
    check(f"$KV.TQ_RESULTS.{safe}", {"Nats-Msg-Id": safe, "Taskq-Id": safe})
    check(names.schedule_subject("default", delayed_name(task_id)))
    check(names.dlq_subject("default", "t"), {"Nats-Msg-Id": dead_letter_id(task_id, 7)})


@settings(max_examples=400, deadline=None)
@given(anything, anything)
def test_distinct_ids_never_share_a_safe_form(a: str, b: str) -> None:
    assume(a != b)
    assert safe_id(a) != safe_id(b)


@pytest.mark.parametrize("pair", [("a\nb", "a b"), ("a b", "a\rb"), ("h.x", "h.x "), (">", "*")])
def test_the_reported_colliding_keys_stay_apart(pair: tuple[str, str]) -> None:
    assert safe_id(pair[0]) != safe_id(pair[1])


def test_a_plain_id_and_a_digest_never_meet() -> None:
    digest = safe_id("a b")
    assert digest.startswith("h.") and safe_id(digest) != digest  # a plain `h.` id is hashed


@settings(max_examples=300, deadline=None)
@given(anything)
def test_keys_become_one_subject_token(key: str) -> None:
    check(names.limit_subject("unique", token(key), "task"))
    check(names.limit_subject("rate", token(key), "task"))
    assert "." not in token(key)


@settings(max_examples=300, deadline=None)
@given(anything)
def test_a_key_is_taken_up_to_its_limit_and_refused_past_it(key: str) -> None:
    if len(key) > MAX_KEY:
        with pytest.raises(ConfigError):
            check_key(key)
    else:
        assert check_key(key) == key


@settings(max_examples=300, deadline=None)
@given(anything)
def test_queue_and_task_names_are_refused_or_valid_everywhere(name: str) -> None:
    try:
        queue = check_queue(name)
    except ConfigError:
        queue = None
    if queue is not None:
        check(names.queue_subject(queue, "t"))
        check(names.fired_subject(names.queue_subject(queue, "t", 3)))
        check(names.schedule_subject(queue, "periodic.t"))
    try:
        task = check_task(name)
    except ConfigError:
        return
    check(names.queue_subject("q", task), {"Taskq-Task": task})
    check(names.rank_subject("q", 9, task, 2))


@settings(max_examples=300, deadline=None)
@given(anything)
def test_a_task_name_from_a_message_is_safe_in_a_dead_letter(name: str) -> None:
    safe = dlq_task_token(name)
    check(names.dlq_subject("default", safe), {"Taskq-Task": safe})


@settings(max_examples=200, deadline=None)
@given(st.lists(anything, max_size=3), st.dictionaries(anything, anything, max_size=3))
def test_a_call_digest_is_one_token(args: list[str], kwargs: dict[str, str]) -> None:
    check(names.limit_subject("unique", call_digest(list(args), kwargs), "task"))


@pytest.mark.parametrize(
    "subject",
    ["a b", "a..b", "a.>", "a.*", "", "x" * 2000, "a\nb", ".a", "a."],
)
def test_the_last_line_refuses_what_the_wire_cannot_carry(subject: str) -> None:
    with pytest.raises(UnsafeName):
        check(subject)
    with pytest.raises(UnsafeName):
        check("ok", {"Nats-Msg-Id": "x\r\nNats-Rollup: all"})
