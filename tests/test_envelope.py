"""The wire codec (docs/wire-format.md): round trips, foreign defaults, and clear errors
for bad bytes."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskq.errors import DecodeError
from taskq.records.clock import format_time, parse_time
from taskq.records.envelope import Envelope, decode
from tests.examples import examples


def test_round_trip() -> None:
    env = Envelope(
        id="01J",
        task="billing.charge",
        args=[42],
        kwargs={"amount": 9.99},
        enqueued_at="2026-11-22T10:00:00.000Z",
        meta={"k": "v"},
    )
    body = json.loads(env.encode())
    assert body == {
        "v": 1,
        "id": "01J",
        "task": "billing.charge",
        "args": [42],
        "kwargs": {"amount": 9.99},
        "enqueued_at": "2026-11-22T10:00:00.000Z",
        "expires_at": None,
        "eta": None,
        "flow": None,
        "meta": {"k": "v"},
    }
    assert decode(env.encode(), subject_task="x", msg_id="y", seq=1) == env


def test_foreign_defaults_from_subject_header_and_sequence() -> None:
    env = decode(b'{"args": [1, 2]}', subject_task="add", msg_id=None, seq=17)
    assert (env.task, env.id, env.args, env.kwargs) == ("add", "17", [1, 2], {})
    env = decode(b'{"kwargs": {"a": 1}}', subject_task="add", msg_id="m-1", seq=17)
    assert env.id == "m-1" and env.kwargs == {"a": 1}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{nope", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'"text"', "not an object"),
        (b'{"args": {"a": 1}}', "args"),
        (b'{"kwargs": [1]}', "kwargs"),
        (b'{"v": 2, "args": []}', "version 2"),
        (b'{"args": [], "expires_at": "soon"}', "expires_at"),
        (b'{"task": 5}', "task"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)
def test_bad_bytes_raise_decode_error(data: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(data, subject_task="t", msg_id=None, seq=1)
    assert fragment in str(info.value)


def test_missing_task_name() -> None:
    with pytest.raises(DecodeError, match="no task name"):
        decode(b'{"args": []}', subject_task=None, msg_id=None, seq=1)


def test_times_are_rfc3339_utc() -> None:
    text = format_time(parse_time("2026-11-22T10:00:00+02:00"))
    assert text == "2026-11-22T08:00:00.000Z"


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=512))
def test_decoder_never_raises_anything_but_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data, subject_task="t", msg_id=None, seq=1)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "v",
                "id",
                "task",
                "args",
                "kwargs",
                "meta",
                "flow",
                "eta",
                "expires_at",
                "enqueued_at",
                "x",
            ]
        ),
        json_values,
    )
)
def test_decoder_on_arbitrary_json_objects(body: dict[str, object]) -> None:
    with contextlib.suppress(DecodeError):
        env = decode(json.dumps(body).encode(), subject_task="t", msg_id=None, seq=1)
        assert isinstance(env.args, list) and isinstance(env.kwargs, dict)


def test_the_dead_letter_original_reads_every_wire_field_of_the_envelope() -> None:
    # The DLQ keeps a decoded original as the envelope's wire dict (dlq/record.py): its model
    # must name the same fields, in the same order, or a field added to one drifts silently
    from taskq.dlq.record import EnvelopeOriginal
    from taskq.records.envelope import Envelope

    wire = list(Envelope(id="x", task="t").to_dict())
    assert list(EnvelopeOriginal.model_fields) == wire
