"""A partitioned results layout (issue 30): `results_partitions=N` spreads the records over
N buckets by task id, so record writes scale with a cluster's servers; results, statuses,
stories and harness reads find them; a changed layout strands no record."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from taskq import App
from taskq.errors import ConfigError
from taskq.ids import safe_id
from taskq.operate.story import story
from taskq.records.places import Places
from taskq.records.results import ensure_results
from taskq.records.sealing import new_key
from taskq.server import EmbeddedServer
from taskq.settings import Settings
from tests.conftest import run_cli, running_worker, wait_until
from tests.roles import role_env
from tests.test_doctor import report


@pytest.fixture
async def spread(nats_url: str, prefix: str) -> AsyncIterator[App]:
    application = App(url=nats_url, prefix=prefix, results_partitions=4)
    yield application
    await application.aclose()


def _double(app: App) -> object:
    @app.task(name="double")
    async def double(n: int) -> int:
        return 2 * n

    return double


async def _keys_per_bucket(app: App) -> dict[str, set[str]]:
    client = await app.client()
    found = {}
    for bucket in await client.results.existing():
        found[bucket] = {entry.key for entry in await client.connection.kv.entries(bucket)}
    return found


async def test_records_spread_over_the_partitions_and_read_back(spread: App) -> None:
    double = _double(spread)
    async with running_worker(spread) as worker:
        handles = [await double.enqueue(n) for n in range(40)]  # type: ignore[attr-defined]
        await wait_until(lambda: worker.stats["succeeded"] == 40)
        assert [await h.result(timeout=10) for h in handles] == [2 * n for n in range(40)]
    client = await spread.client()
    per_bucket = await _keys_per_bucket(spread)
    names = client.names
    assert set(per_bucket) == {names.results_partition(i) for i in range(4)}
    assert names.results_bucket not in per_bucket  # the unpartitioned bucket was not made
    assert sum(len(keys) for keys in per_bucket.values()) == 40
    assert sum(1 for keys in per_bucket.values() if keys) >= 3  # 40 ids over 4: spread
    for handle in handles:  # each record where the layout says, in no other bucket
        key = safe_id(handle.id)
        holders = [bucket for bucket, keys in per_bucket.items() if key in keys]
        assert holders == [client.results.of(key)]
    told = await story(spread, handles[7].id)
    assert told.state == "succeeded" and len(told.attempts) == 1


async def test_a_changed_layout_strands_no_record(nats_url: str, prefix: str) -> None:
    """Records written under one layout are read by clients of another: results, statuses
    and stories look in every results bucket on the server when theirs has none."""
    before = App(url=nats_url, prefix=prefix)  # the default: one bucket
    double = _double(before)
    try:
        async with running_worker(before) as worker:
            handles = [await double.enqueue(n) for n in range(12)]  # type: ignore[attr-defined]
            await wait_until(lambda: worker.stats["succeeded"] == 12)
    finally:
        await before.aclose()
    after = App(url=nats_url, prefix=prefix, results_partitions=3)
    again = _double(after)
    try:
        client = await after.client()
        moved = [
            h for h in handles if client.results.of(safe_id(h.id)) != client.names.results_bucket
        ]
        assert moved  # every id maps to a partition bucket: none holds its record
        for n, handle in enumerate(handles):
            assert await after.handle(handle.id).result(timeout=10) == 2 * n
        told = await story(after, handles[3].id)
        assert told.state == "succeeded"
        async with running_worker(after):  # new records go to the new layout
            fresh = await again.enqueue(21)  # type: ignore[attr-defined]
            assert await fresh.result(timeout=10) == 42
        assert (
            safe_id(fresh.id)
            in (await _keys_per_bucket(after))[client.results.of(safe_id(fresh.id))]
        )
    finally:
        await after.aclose()


async def test_sealed_records_bind_to_their_partition(nats_url: str, prefix: str) -> None:
    """With an encryption key, a record is sealed for its partition's bucket and key: it
    opens there and not under another bucket of the layout."""
    key = new_key()
    app = App(url=nats_url, prefix=prefix, results_partitions=2, encryption_key=key)
    double = _double(app)
    try:
        async with running_worker(app):
            handle = await double.enqueue(4)  # type: ignore[attr-defined]
            assert await handle.result(timeout=10) == 8
        client = await app.client()
        own = client.results.of(safe_id(handle.id))
        other = next(b for b in client.results.configured if b != own)
        places = Places(prefix)
        assert places.at(f"$KV.{own}.{safe_id(handle.id)}").context != (
            places.at(f"$KV.{other}.{safe_id(handle.id)}").context
        )
    finally:
        await app.aclose()


@pytest.mark.parametrize("value", [0, 65, "x", -1, True])
def test_a_bad_partition_count_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError):
        Settings.load(results_partitions=value)


def test_a_bad_partition_count_from_the_environment_is_one_line_and_exit_2(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_RESULTS_PARTITIONS", "1000")
    done = run_cli(nats_url, prefix, "tasks", "ls")
    assert done.returncode == 2
    assert "results_partitions" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bucket_names_of_other_prefixes_or_shapes_are_not_results() -> None:
    places = Places("taskq")
    assert places.at("$KV.TASKQ_RESULTS_P12.k") is not None
    for bucket in (
        "TASKQ_RESULTS_P",
        "TASKQ_RESULTS_P1x",
        "TASKQ_RESULTS_P\u0661",
        "OTHER_RESULTS_P1",
    ):
        assert places.at(f"$KV.{bucket}.k") is None


def test_doctor_tells_a_shipped_role_without_the_partitions_grants(
    secure_server: EmbeddedServer,
) -> None:
    """The shipped producer is granted `TASKQ_RESULTS` only: with a partitioned layout its
    doctor report says it cannot read results (each partition bucket is probed)."""
    plain = report(secure_server.url, env=role_env("producer"))["permissions"]
    assert plain["status"] == "ok", plain
    env = {**role_env("producer"), "TASKQ_RESULTS_PARTITIONS": "2"}
    spread = report(secure_server.url, env=env)["permissions"]
    assert spread["status"] == "warn", spread
    assert "a producer also needs to read results" in spread["detail"]


def test_provision_makes_every_partition_bucket(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKQ_RESULTS_PARTITIONS", "3")
    done = run_cli(nats_url, prefix, "provision", "tests.apps.ledger:app", "--json")
    assert done.returncode == 0, done.stderr
    buckets = json.loads(done.stdout)["buckets"]
    up = prefix.upper()
    assert {f"{up}_RESULTS_P{i}" for i in range(3)} <= set(buckets)
    assert f"{up}_RESULTS" not in buckets


async def test_doctor_names_the_results_buckets_of_another_layout(
    nats_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records written under the default layout, then doctor run with three partitions:
    the one-bucket layout's bucket is named, with what to do; run as the layout that
    made it, all is well."""
    app = App(url=nats_url, prefix=prefix)
    try:
        client = await app.client()
        await ensure_results(client)
    finally:
        await app.aclose()
    same = report(nats_url, prefix=prefix)["results"]
    assert same["status"] == "ok", same
    assert "results_partitions=1 (1 bucket): 1 made" in same["detail"]
    monkeypatch.setenv("TASKQ_RESULTS_PARTITIONS", "3")
    other = report(nats_url, prefix=prefix)["results"]
    assert other["status"] == "warn", other
    assert f"another layout on the server: {prefix.upper()}_RESULTS;" in other["detail"]
    assert "TASKQ_RESULTS_PARTITIONS=3" in other["fix"]
