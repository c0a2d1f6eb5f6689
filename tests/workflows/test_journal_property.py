"""The journal reader against hostile bytes (issue 38): whatever a role writes on a run's
subjects, reading it gives an event or a DecodeError (which makes it junk), never another
exception that would fail every decision of the run; and what a worker writes, a worker
reads back as it was."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import DecodeError, NonFiniteFloat, PayloadTooLarge
from taskq.workflows import store
from taskq.workflows.journal import JUNK, Event
from tests.examples import examples

SUBJECTS = ("taskq.wf.r.u.x", "taskq.wf.r.s.0", "taskq.wf.r.w.k", "taskq.wf.h.ab.c.k")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def _read(data: bytes, subject: str) -> Event | None:
    try:
        return store.decoded(data, 7, subject)
    except DecodeError:
        return None


@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=2048), subject=st.sampled_from(SUBJECTS))
def test_any_bytes_are_an_event_or_a_decode_error(data: bytes, subject: str) -> None:
    event = _read(data, subject)
    assert event is None or isinstance(event, Event)


@settings(max_examples=examples(200), deadline=None)
@given(
    kind=st.sampled_from(["signal", "cancel", "done", "decided", "start", "junk", "x"]),
    n=st.one_of(st.integers(), st.text(), st.none(), st.booleans()),
    details=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    subject=st.sampled_from(SUBJECTS),
)
def test_any_json_object_is_an_event_of_its_subjects_kind_or_a_decode_error(
    kind: str, n: Any, details: dict[str, Any], subject: str
) -> None:
    import json

    body = json.dumps({**details, "e": kind, "n": n}).encode()
    event = _read(body, subject)
    if event is not None:
        assert event.kind == kind and event.kind != JUNK
        assert subject.rsplit(".", 2)[-2] == event.writer


@pytest.mark.parametrize(
    "body",
    [
        b'{"e":"signal","name":"a","payload":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"e":"signal","name":"a","payload":"\\ud800"}',
        b'{"e":"signal","name":"a","payload":"\\udfff\\ud800"}',
        b'{"e":"signal","name":"a","payload":NaN}',
        b'{"e":"signal","name":"a","payload":Infinity}',
        b'{"e":"signal","name":"a","payload":"' + b"x" * (300 * 1024) + b'"}',
        b"\xff\xfe{}",
        b'{"e":"signal","n":1e999}',
        b'{"e":"decided","commands":[{"e":"run","n":' + b"[" * 300 + b"]" * 300 + b"}]}",
    ],
    ids=[
        "deep",
        "lone-surrogate",
        "reversed-pair",
        "nan",
        "infinity",
        "oversized",
        "not-utf8",
        "huge-number",
        "deep-command",
    ],
)
def test_what_the_probe_wrote_is_a_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        store.decoded(body, 1, "taskq.wf.r.u.x")


@settings(max_examples=examples(200), deadline=None)
@given(payload=json_values)
def test_what_a_worker_writes_it_reads_back(payload: Any) -> None:
    event = Event.make("signal", name="s", payload=payload)
    try:
        body = store.encoded(event)
    except (store.Unjournalable, PayloadTooLarge, NonFiniteFloat):
        return  # refused where it is written: never stored to wedge a reader
    read = store.decoded(body, 1, "taskq.wf.r.u.x")
    assert read.kind == "signal" and read.details["payload"] == payload


def test_a_value_a_reader_would_refuse_is_refused_where_it_is_written() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    for payload in (deep, "\ud800", float("nan")):
        with pytest.raises((store.Unjournalable, NonFiniteFloat)):
            store.encoded(Event.make("signal", name="s", payload=payload))
