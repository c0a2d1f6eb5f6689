"""Cron expressions (issue 27): validated in full at declaration as nats-server reads them,
and their fire times, checked against two references: croniter (next and previous fire
times over random valid expressions) and the real nats-server (which expressions it
accepts, over random expressions, valid or not)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from croniter import croniter
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from taskq import App, ConfigError
from taskq.cron import parse_cron
from taskq.errors import BrokerError
from taskq.records.schedules import SCHEDULE, TARGET
from taskq.topology.specs import timer_stream
from tests.conftest import cli_argv
from tests.examples import examples

NEWCOMER_TYPOS = ["0 0 25 * * *", "0 0 0 31 2 *", "*/0 * * * * *"]


@pytest.mark.parametrize(
    "cron",
    [
        *NEWCOMER_TYPOS,
        "0 0 0 30 2 *",  # 30 February never comes
        "0 0 0 31 4,6 *",
        "0 0 0 31 2 ?",
        "0 0 0 * * 7",  # weekdays are 0-6 on nats-server
        "60 * * * * *",
        "30-10 * * * * *",
        "0 0 0 0 * *",
        "0 0 0 1 13 *",
        "0 0 0 1 January *",
        "0 0 0 , * *",
        "1/2/3 * * * * *",
        "* * * * *",
        "0 0 0 1 1 * 2030",
        "@HOURLY",
        "@reboot",
        "*-5 * * * * *",  # the server reads it as `*`: taskq refuses it as a mistake
    ],
)
def test_a_malformed_cron_is_refused_at_declaration_in_one_line(cron: str) -> None:
    async def sweep() -> None: ...

    with pytest.raises(ConfigError) as refused:
        App(prefix="p").periodic(cron=cron)(sweep)
    message = str(refused.value)
    assert "\n" not in message and "nats-server" not in message and repr(cron) in message


@pytest.mark.parametrize(
    "cron",
    [
        "0 0 0 29 2 *",
        "0 0 0 31 2 MON",
        "0 0 0 31 2,3 *",
        "0 0 0 31 2 */2",
        "@midnight",
        "? ? ? ? ? ?",
    ],
)
def test_what_the_server_accepts_is_declared(cron: str) -> None:
    async def sweep() -> None: ...

    App(prefix="p").periodic(cron=cron)(sweep)


def test_a_module_declaring_a_bad_cron_exits_2_naming_it(
    tmp_path: Path, nats_url: str, prefix: str
) -> None:
    (tmp_path / "nightly.py").write_text(
        "from taskq import App\n\napp = App()\n\n\n"
        '@app.periodic(cron="0 0 25 * * *")\nasync def digest() -> None: ...\n'
    )
    done = subprocess.run(
        cli_argv(nats_url, prefix, "worker", "nightly:app"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "taskq worker: Invalid value for APP: cannot import 'nightly' (nightly.py, line 6): "
        "ConfigError: cron '0 0 25 * * *': hour '25' is outside 0-23"
    ]


# -- against croniter: the same next and previous fire times ------------------------------


def _item(low: int, high: int) -> st.SearchStrategy[str]:
    """One list item of a field that restricts it: N, N-M, N-M/S or N/S (N < M: croniter
    reads `0-0` as `*`, nats-server as 0)."""
    number = st.integers(low, high)
    pair = st.tuples(number, number).filter(lambda p: p[0] != p[1]).map(sorted)
    step = st.integers(1, max(1, high - low))
    return st.one_of(
        number.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        st.tuples(pair, step).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.tuples(number, step).map(lambda t: f"{t[0]}/{t[1]}"),
    )


def _field(low: int, high: int, star_steps: bool = True) -> st.SearchStrategy[str]:
    """A whole field: `*`, `*/S` (not for the day fields, whose `*/S` the two references
    treat differently: restricted for robfig/nats-server, not for croniter) or a list."""
    items = st.lists(_item(low, high), min_size=1, max_size=3).map(",".join)
    stars = st.just("*")
    if star_steps:
        stars = stars | st.integers(1, high - low).map(lambda s: f"*/{s}")
    return stars | items


CRON = st.builds(
    lambda *fields: " ".join(fields),
    _field(0, 59),
    _field(0, 59),
    _field(0, 23),
    _field(1, 31, star_steps=False),
    _field(1, 12) | st.sampled_from(["jan", "FEB-apr", "jun,Dec"]),
    _field(0, 6, star_steps=False) | st.sampled_from(["mon-fri", "SUN", "sat,sun"]),
)
MOMENT = st.datetimes(datetime(2001, 1, 1), datetime(2090, 1, 1)).map(
    lambda t: t.replace(microsecond=0, tzinfo=UTC)
)


@settings(max_examples=examples(400), deadline=None)
@given(cron=CRON, moment=MOMENT)
@example(cron="0 30 9 * * mon-fri", moment=datetime(2026, 11, 27, 9, 30, tzinfo=UTC))
@example(cron="0 0 12 1 * MON", moment=datetime(2026, 11, 23, 21, 21, 23, tzinfo=UTC))
@example(cron="0 0 0 29 2 *", moment=datetime(2026, 3, 1, tzinfo=UTC))
def test_fire_times_match_croniter(cron: str, moment: datetime) -> None:
    try:
        parsed = parse_cron(cron)
    except ConfigError:
        assume(False)  # a day that never comes: croniter searches forever (refusals: below)
        return
    reference = croniter(cron, moment, second_at_beginning=True, max_years_between_matches=10)
    assert parsed.after(moment) == reference.get_next(datetime)
    reference = croniter(cron, moment, second_at_beginning=True, max_years_between_matches=10)
    assert parsed.before(moment) == reference.get_prev(datetime)


def test_before_and_after_within_a_second() -> None:
    every_second = parse_cron("* * * * * *")
    moment = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    assert every_second.after(moment) == moment.replace(second=1, microsecond=0)
    assert every_second.before(moment) == moment.replace(microsecond=0)
    assert every_second.before(moment.replace(microsecond=0)) == moment.replace(
        minute=59, hour=11, second=59, microsecond=0
    )
    assert parse_cron("0 0 0 1 1 *").before(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2025, 1, 1, tzinfo=UTC
    )


# -- against nats-server: the same expressions accepted, the same refused ----------------

TOKEN = st.sampled_from(
    [
        *("*", "?", "0", "1", "5", "6", "7", "12", "13", "23", "24", "29", "30", "31"),
        *("59", "60", "mon", "SUN", "jan", "Feb", "x", "", "-1", "+5", "05"),
    ]
)
RAW_ITEM = st.builds(
    lambda a, dash, b, slash, s: a + (f"-{b}" if dash else "") + (f"/{s}" if slash else ""),
    TOKEN,
    st.booleans(),
    TOKEN,
    st.booleans(),
    st.sampled_from(["0", "1", "2", "7", "15", "99", "x"]),
)
RAW_FIELD = st.lists(RAW_ITEM, min_size=1, max_size=3).map(",".join)
RAW_CRON = st.one_of(
    st.lists(RAW_FIELD, min_size=6, max_size=6).map(" ".join),
    st.lists(RAW_FIELD, min_size=5, max_size=7).map(" ".join),
    CRON,
    st.sampled_from(["@hourly", "@daily", "@midnight", "@weekly", "@HOURLY", "@reboot"]),
)


@pytest.fixture
def server_schedules(nats_url: str, prefix: str) -> Iterator[App]:
    """An app whose timer stream for queue `cron` exists (schedules allowed)."""
    app = App(url=nats_url, prefix=prefix)

    async def make() -> None:
        client = await app.client()
        await client.connection.streams.ensure(timer_stream(client.names, client.settings, "cron"))

    app.portal.run(make(), timeout=30)
    yield app
    app.close()


def _server_accepts(app: App, cron: str) -> bool:
    async def publish() -> bool:
        client = await app.client()
        names = client.names
        subject = names.schedule_subject("cron", "probe")
        target = names.fired_subject(names.queue_subject("cron", "probe"))
        try:
            await client.connection.publish(subject, b"{}", {SCHEDULE: cron, TARGET: target})
        except BrokerError:
            return False
        await client.connection.messages.purge(names.timer_stream("cron"), subject=subject)
        return True

    return app.portal.run(publish(), timeout=30)


@settings(
    max_examples=examples(250),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(cron=RAW_CRON)
@example(cron="0 0 0 31 2 */1")
@example(cron="0 0 0 31 2 */2")
@example(cron="0 0 0 , * *")
@example(cron="0 0 0 1, 1 *")
def test_taskq_refuses_what_nats_server_refuses(server_schedules: App, cron: str) -> None:
    """Every expression the server refuses is refused at declaration; every one taskq
    accepts is stored by the server (taskq refuses `*-N`, which the server reads as `*`)."""
    try:
        parse_cron(cron)
        ours = True
    except ConfigError:
        ours = False
    theirs = _server_accepts(server_schedules, cron)
    event("nats-server accepts" if theirs else "nats-server refuses")
    if theirs and not ours:
        assert any(part.startswith(("*-", "?-")) for f in cron.split() for part in f.split(","))
    else:
        assert ours == theirs, cron


def test_shorthands_next_fire() -> None:
    moment = datetime(2026, 11, 23, 21, 21, 23, tzinfo=UTC)
    assert parse_cron("@midnight").after(moment) == datetime(2026, 11, 24, tzinfo=UTC)
    assert parse_cron("@hourly").before(moment) == moment.replace(minute=0, second=0)
    assert parse_cron("@weekly").after(moment) - moment < timedelta(days=7)
