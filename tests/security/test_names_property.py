"""Property tests: whatever text an id, key, task or queue name holds, what taskq makes of
it for a subject, a header, a KV key or an object name is valid there and never collides
with what another one makes (the finding: a 5,000-character key closed the connection, a
`>` key purged every schedule, `a\\nb` and `a b` were one idempotency key)."""

from __future__ import annotations

import inspect
import json
import re
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient

from taskq.dlq.write import _subject_safe as dlq_task_token
from taskq.dlq.write import dead_letter_id
from taskq.errors import ConfigError, DecodeError, UnsafeName
from taskq.flowcontrol.held import commit_id
from taskq.flowcontrol.keys import call_digest, token
from taskq.ids import MAX_KEY, check_key, safe_id
from taskq.nats.pipeline import check
from taskq.records.envelope import MSG_ID, decode
from taskq.records.firings import run_id
from taskq.records.schedules import delayed_name
from taskq.topology.names import Names, check_queue, check_task
from tests.examples import examples

# nats-py's own key alphabet (nats.js.kv): what a KV key may hold
KV_KEY = re.compile(r"^[-/_=\.a-zA-Z0-9]+$")
anything = st.text(min_size=1, max_size=6000) | st.text(
    alphabet=st.sampled_from(list(" \t\r\n.*>$:~/\\\x00\u2028é\U0001f600")), min_size=1
)
names = Names("tq")


@settings(max_examples=examples(400), deadline=None)
@given(anything)
def test_a_safe_id_fits_every_place_an_id_goes(task_id: str) -> None:
    fits_every_place(task_id)  # below, with the ids from bytes


@settings(max_examples=examples(400), deadline=None)
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


@settings(max_examples=examples(300), deadline=None)
@given(anything)
def test_keys_become_one_subject_token(key: str) -> None:
    check(names.limit_subject("unique", token(key), "task"))
    check(names.limit_subject("rate", token(key), "task"))
    assert "." not in token(key)


@settings(max_examples=examples(300), deadline=None)
@given(anything)
def test_a_key_is_taken_up_to_its_limit_and_refused_past_it(key: str) -> None:
    if len(key) > MAX_KEY:
        with pytest.raises(ConfigError):
            check_key(key)
    else:
        assert check_key(key) == key


@settings(max_examples=examples(300), deadline=None)
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
    check(names.level_subject("q", 9, task, 2))


@settings(max_examples=examples(300), deadline=None)
@given(anything)
def test_a_task_name_from_a_message_is_safe_in_a_dead_letter(name: str) -> None:
    safe = dlq_task_token(name)
    check(names.dlq_subject("default", safe), {"Taskq-Task": safe})


@settings(max_examples=examples(200), deadline=None)
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


# -- ids from arbitrary bytes, and the message ids derived from an id ----------------------
QUEUE_STREAM = names.queue_stream("default")


def interrupted_id(task_id: str, stream: str, seq: int, delivery: int) -> str:
    """A handed-back copy's message id, as workers/handback.py `hand_back` builds it."""
    return f"{safe_id(task_id)}:interrupted:{stream}:{seq}:{delivery}"


def fired_id(stream: str, seq: int) -> str:
    """A fired schedule's copy's message id, as workers/timers.py `move` builds it."""
    return f"fired:{stream}:{seq}"


def test_the_derived_ids_here_are_built_as_the_worker_builds_them() -> None:
    """interrupted_id and fired_id above mirror code that builds them inline."""
    from taskq.workers import handback, timers

    built = 'f"{safe_id(task_id)}:interrupted:{d.stream}:{d.seq}:{d.num_delivered}"'
    assert built in inspect.getsource(handback.hand_back)
    assert 'f"fired:{d.stream}:{d.seq}"' in inspect.getsource(timers.move)


def fits_every_place(task_id: str) -> None:
    """Every subject, header and key an id of a delivered message becomes is valid."""
    safe = safe_id(task_id)
    assert KV_KEY.match(safe) and len(safe) <= 130
    check(f"$KV.TQ_RESULTS.{safe}", {"Nats-Msg-Id": safe, "Taskq-Id": safe})
    check(names.schedule_subject("default", delayed_name(task_id)))
    check(names.dlq_subject("default", "t"), {"Nats-Msg-Id": dead_letter_id(task_id, 7)})
    check(
        names.queue_subject("default", "t"), {MSG_ID: interrupted_id(task_id, QUEUE_STREAM, 7, 2)}
    )


def bodies(raw: bytes) -> list[tuple[bytes, bool]]:
    """Task bodies whose `id` is `raw`: as raw bytes in the JSON string, and as JSON escapes
    of `raw` read as UTF-8 (undecodable bytes as lone surrogates) and as UTF-16 (lone
    surrogates); with whether the body must decode: its JSON is valid and every string in
    it is text (a lone surrogate is refused: no record could be written of it)."""
    as_utf8 = raw.decode("utf-8", "surrogateescape")
    as_utf16 = raw[: len(raw) // 2 * 2].decode("utf-16-le", "surrogatepass")
    return [
        (b'{"args": [], "id": "' + raw + b'"}', False),
        (json.dumps({"args": [], "id": as_utf8}).encode(), _is_text(as_utf8)),
        (json.dumps({"args": [], "id": as_utf16}).encode(), _is_text(as_utf16)),
    ]


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=600))
def test_an_id_from_any_bytes_in_a_body_fits_every_place(raw: bytes) -> None:
    for body, valid in bodies(raw):
        try:
            envelope = decode(body, subject_task="t", msg_id=None, seq=7)
        except DecodeError:
            assert not valid, body
            fits_every_place("seq-7")  # an undecodable message's dead letter names its seq
            continue
        assert isinstance(envelope.id, str) and envelope.id
        fits_every_place(envelope.id)


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=600))
def test_an_id_from_any_bytes_in_the_msg_id_header_fits_every_place(raw: bytes) -> None:
    """Header bytes as a raw publish may send them (the server passes them on as they are,
    CR, LF and invalid UTF-8 included), read by nats-py's own header parser."""
    headers = NatsClient._parse_header_lines(b"Nats-Msg-Id: " + raw + b"\r\n")
    msg_id = headers.get(MSG_ID)
    envelope = decode(b'{"args": []}', subject_task="t", msg_id=msg_id, seq=7)
    assert envelope.id == (msg_id or "7")
    fits_every_place(envelope.id)


# the sets of names the regexes `[A-Z0-9_-]{1,40}` (streams), `[A-Za-z0-9_-]{1,30}` (queues)
# and `[A-Za-z0-9_-]{1,20}(\.[A-Za-z0-9_-]{1,20}){0,3}` (tasks) match, drawn as text: what
# `st.from_regex` costs per example was most of these tests' time
_WORD = string.ascii_letters + string.digits + "_-"
stream_names = st.text(string.ascii_uppercase + string.digits + "_-", min_size=1, max_size=40)
seqs = st.integers(min_value=1, max_value=2**64 - 1)
dues = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=0))  # periodic runs fall on whole seconds
queue_names = st.text(_WORD, min_size=1, max_size=30)
task_names = st.lists(st.text(_WORD, min_size=1, max_size=20), min_size=1, max_size=4).map(".".join)
INTERRUPTED = (anything, stream_names, seqs, seqs)


def other_than(data: st.DataObject, a: tuple[Any, ...], *fields: Any) -> tuple[Any, ...]:
    """Another input than `a` (drawn by `fields`): wholly new, or `a` with one field drawn
    again (a field its id leaves out shows there). A field may be a function of `a`'s value
    (a strategy for values near it)."""
    redraw = [f(a[i]) if callable(f) else f for i, f in enumerate(fields)]
    # drawn field by field from the strategies as given: a tuple/one_of/map built per
    # example cost hypothesis more than the check (7 s of a test's 300 examples)
    which = data.draw(_WHICH[len(redraw)])  # -1: every field anew, else only that one
    b = tuple(data.draw(s) if which in (-1, i) else a[i] for i, s in enumerate(redraw))
    assume(b != a)
    return b


_WHICH = {n: st.integers(-1, n - 1) for n in range(1, 6)}


def near_seq(seq: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=max(1, seq - 1000), max_value=seq + 1000)


def near_due(due: datetime) -> st.SearchStrategy[datetime]:
    return st.integers(-3 * 86400, 3 * 86400).map(lambda s: due + timedelta(seconds=s))


@settings(max_examples=examples(300), deadline=None)
@given(anything, stream_names, seqs, seqs)
def test_a_handed_back_copy_s_id_is_a_safe_header(
    task_id: str, stream: str, seq: int, delivery: int
) -> None:
    check(
        names.queue_subject("default", "t"),
        {MSG_ID: interrupted_id(task_id, stream, seq, delivery)},
    )


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.tuples(*INTERRUPTED))
def test_distinct_handed_back_copies_never_share_an_id(
    data: st.DataObject, a: tuple[str, str, int, int]
) -> None:
    b = other_than(data, a, anything, stream_names, near_seq, near_seq)
    assert interrupted_id(*a) != interrupted_id(*b)


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.tuples(stream_names, seqs))
def test_fired_copies_ids_are_safe_and_distinct(data: st.DataObject, a: tuple[str, int]) -> None:
    check(names.queue_subject("default", "t"), {MSG_ID: fired_id(*a)})
    b = other_than(data, a, stream_names, near_seq)
    assert fired_id(*a) != fired_id(*b)


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.tuples(queue_names, task_names, dues))
def test_periodic_run_ids_are_safe_and_distinct(
    data: st.DataObject, a: tuple[str, str, datetime]
) -> None:
    check(names.queue_subject(a[0], a[1]), {MSG_ID: run_id(*a)})
    b = other_than(data, a, queue_names, task_names, near_due)
    assert run_id(*a) != run_id(*b)


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.tuples(anything, seqs))
def test_dead_letter_ids_are_safe_and_distinct(data: st.DataObject, a: tuple[str, int]) -> None:
    check(names.dlq_subject("default", "t"), {MSG_ID: dead_letter_id(*a)})
    b = other_than(data, a, anything, near_seq)
    assert dead_letter_id(*a) != dead_letter_id(*b)


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), anything, stream_names, seqs, seqs)
def test_ids_of_different_kinds_in_one_queue_stream_never_meet(
    data: st.DataObject, other: str, stream: str, seq: int, delivery: int
) -> None:
    """What is published into a queue stream, deduplicated in its one window: a task's own
    id, a handed-back copy's, a fired copy's, a periodic run's. A producer may choose its
    task id (`key=`) to be any of the others, or any text."""
    derived = [
        interrupted_id(other, stream, seq, delivery),
        fired_id(stream, seq),
        run_id("default", "t", datetime.fromtimestamp(seq % 2**32, UTC)),
    ]
    task_id = data.draw(anything | st.sampled_from(derived))
    made = [safe_id(task_id), *derived]
    assert len(set(made)) == len(made), made


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.tuples(*INTERRUPTED))
def test_held_copies_ids_are_safe_and_distinct(
    data: st.DataObject, a: tuple[str, str, int, int]
) -> None:
    check(names.schedule_subject("default", "held.x"), {MSG_ID: commit_id(*a)})
    b = other_than(data, a, anything, stream_names, near_seq, near_seq)
    assert commit_id(*a) != commit_id(*b)
