"""Edge sites (docs/edge.md), on loopback: a hub `taskq server --domain hub
--leafnodes-port` and a site attached to it through a TCP proxy the test cuts. Tasks the hub
sends run at the site once, results and dead letters flow back, tasks enqueued at the site
run there while cut off, tasks sent during a cut run once after it; lost and duplicated
counted in every test."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.doctor.versions import Version, parse_version
from taskq.errors import ConfigError, ResultTimeout, TaskFailed
from taskq.handle import TaskHandle
from taskq.ports import lease_port
from taskq.records.results import FINAL, fetch
from taskq.server import Edge, EmbeddedServer, port_open
from taskq.timings import Timings
from tests.conftest import HANG, ROOT, cli, installed_nats_server, running_worker, wait_until
from tests.proxy import Proxy
from workers.sites import HUB_CONSUMER

RETRY_MAX = 120.0  # nats-server's longest wait between two tries of a source (seconds)
# a hub and a site (two servers and their leaf link) per test: 8 to 13 s each under load
pytestmark = [pytest.mark.timeout(RETRY_MAX + 3 * HANG), pytest.mark.heavy]


def edge_status_in_contact() -> str:
    """doctor's edge status with every source in contact, for the nats-server the tests
    run: `warn` from 2.15.0 (its durable sources' reset race, docs/edge.md "Known issue"),
    `ok` before. Read from the binary, not from doctor."""
    version = parse_version(installed_nats_server())
    assert version is not None, installed_nats_server()
    return "warn" if version >= Version(2, 15, 0) else "ok"


@dataclass
class Topology:
    hub: EmbeddedServer
    site: EmbeddedServer
    link: Proxy  # the site's leaf connection to the hub passes through it
    at_hub: App
    at_site: App
    runs: dict[int, int]  # at the site: how often each task ran

    @property
    def sides(self) -> Sides:
        return Sides(self.at_hub, self.at_site, self.hub.url, self.site.url)

    async def connected(self) -> None:
        """Wait until the site reaches the hub's JetStream through the leaf connection."""
        import nats

        nc = await nats.connect(self.site.url)
        try:

            async def answers() -> bool:
                try:
                    await nc.request("$JS.hub.API.INFO", b"", timeout=0.5)
                    return True
                except Exception:
                    return False

            await wait_until(answers, timeout=HANG)
        finally:
            await nc.close()


def declare(app: App, runs: dict[int, int]) -> None:
    @app.task
    async def add(n: int) -> int:
        runs[n] = runs.get(n, 0) + 1
        return n + 1000

    @app.task(max_retries=0)
    async def doomed(n: int) -> None:
        raise ValueError(f"no {n}")


async def outbox_held(at_hub: App) -> int:
    """Tasks the hub's outbox for site s1 still holds: each is deleted once the site stored
    it (at the site's next flow-control answer, within its 1 s heartbeat)."""
    client = await at_hub.client()
    outbox = client.names.site_stream("s1", "default")
    return (await client.connection.streams.state(outbox)).messages


async def _emptied(at_hub: App) -> bool:
    return await outbox_held(at_hub) == 0


@pytest.fixture
async def topology(tmp_path: Path, prefix: str) -> AsyncIterator[Topology]:
    hub = EmbeddedServer(store_dir=tmp_path / "hub", edge=Edge(domain="hub", leaf_port=0)).start()
    assert hub.edge.leaf_port
    link = await Proxy(hub.edge.leaf_port).start()
    site_edge = Edge(domain="s1", hub=f"nats-leaf://127.0.0.1:{link.port}")
    site = EmbeddedServer(store_dir=tmp_path / "site", edge=site_edge).start()
    runs: dict[int, int] = {}
    at_hub = App(url=hub.url, prefix=prefix, timings=Timings.short())
    at_site = App(url=site.url, prefix=prefix, timings=Timings.short())
    declare(at_hub, {})
    declare(at_site, runs)
    topology = Topology(hub, site, link, at_hub, at_site, runs)
    await topology.connected()
    # as an operator runs it: at the site for itself, at the hub for its sites
    at_site_cli = await cli(site.url, prefix, "provision", "tests.apps.edge:app", "--site", "s1")
    assert at_site_cli.returncode == 0 and "<- " in at_site_cli.stdout, at_site_cli.stderr
    at_hub_cli = await cli(
        hub.url, prefix, "provision", "tests.apps.edge:app", "--sites", "s1", "--json"
    )
    assert "T" in json.loads(at_hub_cli.stdout)["sourcing"][0], at_hub_cli.stderr
    # the side provisioned first found the other's consumers missing, and nats-server tries
    # its sources again after a back-off (10 s, 20 s, ... at most RETRY_MAX): one round trip
    # here, so that a test's own waits start with both ways flowing
    async with running_worker(at_site):
        warm = await at_hub.tasks["add"].options(site="s1").enqueue(-1)
        assert await warm.result(timeout=RETRY_MAX + HANG) == 999
    # and its task gone from the hub's outbox: a test that cuts the link at once finds only
    # its own there
    await wait_until(lambda: _emptied(at_hub), timeout=HANG)
    runs.clear()
    try:
        yield topology
    finally:
        for app in (at_hub, at_site):
            await app.aclose()
        await link.close()
        site.stop()
        hub.stop()


async def test_hub_tasks_run_once_at_the_site_and_their_results_come_back(
    topology: Topology,
) -> None:
    hub_add = topology.at_hub.tasks["add"]
    await hub_add.enqueue(4321)  # the hub's own queue, no site: it must stay at the hub
    async with running_worker(topology.at_site, concurrency=8):
        handles = [await hub_add.options(site="s1").enqueue(n) for n in range(50)]
        handles += await hub_add.options(site="s1").enqueue_many(range(50, 100))
        results = [await h.result(timeout=HANG) for h in handles]  # read at the hub
        # a task enqueued at the site runs there, and its result reaches the hub too
        local = await topology.at_site.tasks["add"].enqueue(500)
        assert await local.result(timeout=HANG) == 1500
        assert await topology.at_hub.handle(local.id).result(timeout=HANG) == 1500
    assert results == [n + 1000 for n in range(100)]
    lost = [n for n in range(100) if n not in topology.runs]
    twice = [n for n, count in topology.runs.items() if count > 1]
    assert (lost, twice) == ([], [])
    # the hub's outbox for the site empties: each task is deleted once the site stored it
    await wait_until(lambda: _emptied(topology.at_hub), timeout=HANG)
    hub_client = await topology.at_hub.client()
    # the hub's own queue held its own task only, and the site's queue stored the hub's 100
    # and its own one: the same subjects on both sides, kept apart by the leaf's deny lists
    queue = hub_client.names.queue_stream("default")
    assert (await hub_client.connection.streams.state(queue)).last_seq == 1
    site_client = await topology.at_site.client()
    # (and the fixture's round trip, one task more)
    assert (await site_client.connection.streams.state(queue)).last_seq == 102
    assert 4321 not in topology.runs


async def test_a_cut_link_holds_hub_tasks_and_the_site_runs_its_own(topology: Topology) -> None:
    hub_add, site_add = topology.at_hub.tasks["add"], topology.at_site.tasks["add"]
    async with running_worker(topology.at_site, concurrency=8):
        topology.link.cut()
        # cut off: the site runs what is enqueued there; the hub keeps what it sends
        local = [await site_add.enqueue(n) for n in range(200, 220)]
        assert [await h.result(timeout=HANG) for h in local] == [n + 1000 for n in range(200, 220)]
        letter = await topology.at_site.tasks["doomed"].enqueue(99)  # dead-lettered while cut
        with pytest.raises(TaskFailed):
            await letter.result(timeout=HANG)
        sent = [await hub_add.options(site="s1").enqueue(n) for n in range(300, 340)]
        assert await outbox_held(topology.at_hub) == 40
        # `taskq queues` at the hub shows the site's backlog
        shown = await cli(topology.hub.url, topology.at_hub.settings.prefix, "queues", "--json")
        (default,) = [q for q in json.loads(shown.stdout) if q["queue"] == "default"]
        assert default["sites"] == {"s1": 40}
        table = await cli(topology.hub.url, topology.at_hub.settings.prefix, "queues")
        assert "for site s1: 40" in table.stdout, table.stdout
        assert not any(n in topology.runs for n in range(300, 340))
        topology.link.restore()
        skipped = await arrived_or_skipped(
            topology.sides, dict(enumerate(sent, 300)), topology.runs, local
        )
        if skipped:  # nats-server 2.15's reset race (docs/edge.md, "Known issue")
            pytest.xfail("; ".join(skipped))
        # back: each runs once, and every result (the cut's too) reaches the hub
        assert [await h.result(timeout=HANG) for h in sent] == [n + 1000 for n in range(300, 340)]
        for n, handle in zip(range(200, 220), local, strict=True):
            assert await topology.at_hub.handle(handle.id).result(timeout=HANG) == n + 1000

        async def lettered() -> bool:  # the cut's dead letter reached the hub too
            return any(d.id == letter.id for d in await list_dead(topology.at_hub))

        await wait_until(lettered, timeout=HANG)
    ran = [n for n in [*range(200, 220), *range(300, 340)] if topology.runs.get(n) != 1]
    assert ran == []  # none lost, none run twice


async def test_dead_letters_at_the_site_reach_the_hub(topology: Topology) -> None:
    doomed = topology.at_hub.tasks["doomed"]
    async with running_worker(topology.at_site):
        handle = await doomed.options(site="s1").enqueue(7)
        with pytest.raises(TaskFailed):
            await handle.result(timeout=HANG)

    async def lettered() -> bool:
        return any(letter.id == handle.id for letter in await list_dead(topology.at_hub))

    await wait_until(lettered, timeout=HANG)
    (letter,) = [d for d in await list_dead(topology.at_hub) if d.id == handle.id]
    assert letter.site == "s1"  # `taskq dlq ls` at the hub names it
    listed = await cli(topology.hub.url, topology.at_hub.settings.prefix, "dlq", "ls")
    assert "SITE" in listed.stdout and " s1 " in listed.stdout, listed.stdout


async def test_what_cannot_cross_is_refused_at_the_call(topology: Topology) -> None:
    add = topology.at_hub.tasks["add"]
    for options in ({"site": "S1"}, {"site": "a.b"}):
        with pytest.raises(ConfigError):
            await add.options(**options).enqueue(1)
    for options in ({"unique_for": 60}, {"priority": 9}, {"partition_key": "k"}):
        with pytest.raises(ConfigError):
            await add.options(site="s1", **options).enqueue(1)


async def test_a_site_killed_right_after_running_hub_tasks_runs_none_twice(
    topology: Topology,
) -> None:
    """nats-server keeps a sourced stream's position durable only on a clean stop or every
    ~2 minutes: a site SIGKILLed just after storing and running tasks from the hub gets them
    again from the hub when it restarts. Each must still run once."""
    hub_add = topology.at_hub.tasks["add"]
    async with running_worker(topology.at_site, concurrency=8) as worker:
        sent = [await hub_add.options(site="s1").enqueue(n) for n in range(600, 700)]
        await wait_until(lambda: worker.stats["succeeded"] >= 50, timeout=HANG, every=0.001)
        topology.site.kill()
        topology.site.start()
        await topology.connected()
        assert [await h.result(timeout=HANG) for h in sent] == [n + 1000 for n in range(600, 700)]
        site_client = await topology.at_site.client()
        queue = site_client.names.queue_stream("default")

        async def settled() -> bool:  # whatever came again has been judged
            return (await site_client.connection.streams.state(queue)).messages == 0

        await wait_until(settled, timeout=HANG)
        again = worker.stats["succeeded"] - 100
    # mutation checked: without the judge's look at the record, 1-2 of 100 ran twice
    twice = [n for n in range(600, 700) if topology.runs.get(n, 0) > 1]
    assert twice == [], f"{len(twice)} ran twice ({again} settled again after the restart)"


async def sources_of(topology: Topology) -> str:
    """What the servers say of both ways (for a failure's message): `streams_seen` at the
    site, then at the hub."""
    sides = (("site", topology.site), ("hub", topology.hub))
    said = [f"{side}: {await streams_seen(server.url)}" for side, server in sides]
    return "no result at the hub; " + "; ".join(said)


@pytest.mark.timeout(RETRY_MAX + 3 * HANG)
async def test_a_hub_killed_with_tasks_for_the_site_loses_none(topology: Topology) -> None:
    """Tasks the hub acknowledged for the site, the hub SIGKILLed at once and started
    again: each runs once at the site, and its result is read at the hub."""
    hub_add = topology.at_hub.tasks["add"]
    sent = [await hub_add.options(site="s1").enqueue(n) for n in range(800, 900)]
    topology.hub.kill()
    async with running_worker(topology.at_site, concurrency=8):
        local = await topology.at_site.tasks["add"].enqueue(950)  # the site goes on alone
        assert await local.result(timeout=HANG) == 1950
        topology.hub.start()
        await topology.connected()
        # the site's source of the hub's outbox resumes when nats-server retries it: ~2 s
        # after the restart here, but the server's retry back-off grows with each attempt
        # that failed while the hub was down (10 s, 20 s, ... at most 2 minutes): the first
        # result may take that long under load (seen once in a loaded suite run)
        skipped = await arrived_or_skipped(
            topology.sides, dict(enumerate(sent, 800)), topology.runs, []
        )
        if skipped:  # nats-server 2.15's reset race (docs/edge.md, "Known issue")
            pytest.xfail("; ".join(skipped))
        try:
            results = [await h.result(timeout=HANG) for h in sent]
        except ResultTimeout:
            raise AssertionError(await sources_of(topology)) from None
        assert results == [n + 1000 for n in range(800, 900)]
    wrong = {n: topology.runs.get(n, 0) for n in range(800, 900) if topology.runs.get(n) != 1}
    assert wrong == {}  # none lost (0), none run twice (2+)


@pytest.mark.parametrize(
    "args",
    [
        ("--hub", "127.0.0.1:7422"),  # a site needs its name
        ("--site", "s1"),  # and its hub
        ("--hub", "127.0.0.1:7422", "--site", "S-1"),
        ("--hub", 'x";include "/etc/passwd', "--site", "s1"),  # written into a config
        ("--hub", "127.0.0.1:7422", "--site", "s1", "--domain", "hub"),
    ],
)
async def test_bad_server_edge_flags_are_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    done = await cli("nats://127.0.0.1:1", "taskq", "server", "--port", "1", *args)
    assert done.returncode == 2, done
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_doctor_checks_the_leaf_and_the_versions_at_hub_and_site(topology: Topology) -> None:
    prefix = topology.at_hub.settings.prefix
    async with running_worker(topology.at_site):  # a round trip: every source has run
        await (await topology.at_hub.tasks["add"].options(site="s1").enqueue(1)).result(HANG)
    for server, other in ((topology.hub, "s1"), (topology.site, "hub")):
        done = await cli(server.url, prefix, "doctor", "--json")
        (edge,) = [c for c in json.loads(done.stdout) if c["check"] == "edge"]
        assert f"in contact with {other}" in edge["detail"], edge
        assert edge["status"] == edge_status_in_contact(), edge
    topology.link.cut()

    async def silent() -> bool:  # a durable source heartbeats every second
        done = await cli(topology.site.url, prefix, "doctor", "--json")
        (edge,) = [c for c in json.loads(done.stdout) if c["check"] == "edge"]
        return edge["status"] == "fail" and "no contact with hub" in edge["detail"]

    await wait_until(silent, timeout=HANG, every=1.0)


async def streams_seen(url: str) -> list[dict[str, Any]]:
    """What the server at `url` reports of each stream: its state, its sources, and its
    consumers' positions (for a failure's report)."""
    import nats

    nc = await nats.connect(url)
    try:
        js, seen = nc.jetstream(), []
        for info in await js.streams_info():
            name = info.config.name
            consumers = [
                {
                    "name": c.name,
                    "delivered": c.delivered.as_dict() if c.delivered else None,
                    "ack_floor": c.ack_floor.as_dict() if c.ack_floor else None,
                    "pending": c.num_pending,
                    "ack_pending": c.num_ack_pending,
                    "push_bound": c.push_bound,
                }
                for c in await js.consumers_info(name)
            ]
            sources = [s.as_dict() for s in info.sources or []]
            state = {"messages": info.state.messages, "last_seq": info.state.last_seq}
            seen.append({"stream": name, **state, "sources": sources, "consumers": consumers})
        return seen
    finally:
        await nc.close()


def skipped_by_a_source(hub: list[dict[str, Any]], site: list[dict[str, Any]]) -> list[str]:
    """For a failure's report: each durable source whose consumer on one side acknowledged
    more than the sourcing stream on the other side stored, the mark of nats-server 2.15's
    reset race (docs/edge.md, "Known issue")."""
    found = []
    for origin, target, there in ((hub, site, "site"), (site, hub, "hub")):
        for stream in origin:
            into = [s for s in target if stream["stream"] in {x["name"] for x in s["sources"]}]
            held = sum(s["last_seq"] for s in into)  # an upper bound of what they sourced
            for consumer in stream["consumers"] if into else []:
                acked = (consumer["ack_floor"] or {}).get("stream_seq", 0)
                if consumer["push_bound"] and held < acked:
                    found.append(
                        f"{stream['stream']} consumer {consumer['name']} acknowledged {acked}, "
                        f"the {there}'s {into[0]['stream']} stored at most {held}: the nats-server "
                        "2.15 reset race (docs/edge.md, known issue)"
                    )
    return found


@dataclass
class Sides:
    """A hub and its site s1, each as an App and the URL of its server."""

    at_hub: App
    at_site: App
    hub_url: str
    site_url: str


async def _skipped_tasks(
    sides: Sides, sent: dict[int, TaskHandle], runs: dict[int, int]
) -> list[str]:
    """Tasks the hub's outbox let go of (empty, every message acknowledged by the site's
    source) that the site neither ran nor holds (its queue empty, nothing unacknowledged)."""
    hub, site = (await sides.at_hub.client()).names, (await sides.at_site.client()).names
    outbox = _stream(await streams_seen(sides.hub_url), hub.site_stream("s1", "default"))
    queue = _stream(await streams_seen(sides.site_url), site.queue_stream("default"))
    (site_consumer,) = [c for c in outbox["consumers"] if c["name"] == "s1"]
    released = outbox["messages"] == 0 and _acked(site_consumer) == outbox["last_seq"]
    idle = queue["messages"] == 0 and all(c["ack_pending"] == 0 for c in queue["consumers"])
    never = [h.id for n, h in sent.items() if n not in runs]
    if not (released and idle and never):
        return []
    return [f"the hub's outbox let go of tasks the site never stored: {never}"]


async def _skipped_results(sides: Sides, back: list[TaskHandle]) -> list[str]:
    """Results final at the site, every message of its results bucket acknowledged by the
    hub's source, that the hub does not hold (read in that order: the hub stores a message
    before its flow-control answer acknowledges it)."""
    at_site = [h.id for h in back if await _final(sides.at_site, h.id)]
    bucket = (await sides.at_site.client()).names.results_bucket
    results = _stream(await streams_seen(sides.site_url), f"KV_{bucket}")
    (hub_consumer,) = [c for c in results["consumers"] if c["name"] == HUB_CONSUMER]
    acked = _acked(hub_consumer) == results["last_seq"]
    missing = [i for i in at_site if not await _final(sides.at_hub, i)]
    if not (acked and missing):
        return []
    return [
        f"the site's results bucket was acknowledged past results the hub never stored: {missing}"
    ]


async def _final(app: App, task_id: str) -> bool:
    record = await fetch(app, task_id)
    return record is not None and record.state in FINAL


def _acked(consumer: dict[str, Any]) -> int:
    return int((consumer["ack_floor"] or {}).get("stream_seq", 0))


def _stream(seen: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (stream,) = [s for s in seen if s["stream"] == name]
    return stream


async def arrived_or_skipped(
    sides: Sides, sent: dict[int, TaskHandle], runs: dict[int, int], also: list[TaskHandle]
) -> list[str]:
    """Wait until the hub holds the result of every task the hub `sent` to the site (by the
    number `add` runs with) and of those in `also`: [] then, or at the deadline (the test's
    assertions then fail with its report). Or what nats-server 2.15's reset race skipped
    (docs/edge.md, "Known issue"), once seen twice a few seconds apart."""
    back = [*sent.values(), *also]
    deadline, seen_before = time.monotonic() + RETRY_MAX + HANG, False
    while time.monotonic() < deadline:
        if all([await _final(sides.at_hub, h.id) for h in back]):
            return []
        skipped = await _skipped_tasks(sides, sent, runs) + await _skipped_results(sides, back)
        if skipped and seen_before:
            return skipped
        seen_before = bool(skipped)
        await asyncio.sleep(2.0)  # a poll with a deadline: the next look at both sides
    return []


class ServerProcess:
    """`taskq server ARGS...` in a subprocess (stopped by SIGTERM: it stops its nats-server)."""

    def __init__(self, folder: Path, port: int, *args: str) -> None:
        argv = [sys.executable, "-m", "taskq", "server", "--port", str(port)]
        argv += ["--store-dir", str(folder), "--sync", "2m", *args]
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.url = f"nats://127.0.0.1:{port}"
        self.port = port

    def stop(self) -> str:
        self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=15)
        return out


async def test_two_taskq_server_processes_a_hub_and_its_site(tmp_path: Path, prefix: str) -> None:
    """As the quick start runs it: `taskq server --domain hub --leafnodes-port P` and
    `taskq server --hub nats-leaf://... --site s1`, provisioned with `taskq provision`
    while the link is down, a producer at each side, a worker at the site; the link cut and
    back: every task runs once (lost 0, twice 0) and every result reaches the hub."""
    leaf = lease_port()
    link = await Proxy(leaf).start()
    link.cut()  # provisioned while the sides cannot reach each other
    hub = ServerProcess(
        tmp_path / "hub", lease_port(), "--domain", "hub", "--leafnodes-port", str(leaf)
    )
    site = ServerProcess(
        tmp_path / "site",
        lease_port(),
        "--hub",
        f"nats-leaf://127.0.0.1:{link.port}",
        "--site",
        "s1",
    )
    runs: dict[int, int] = {}
    at_hub = App(url=hub.url, prefix=prefix, timings=Timings.short())
    at_site = App(url=site.url, prefix=prefix, timings=Timings.short())
    declare(at_hub, {})
    declare(at_site, runs)
    try:
        for server in (hub, site):
            await wait_until(lambda s=server: port_open("127.0.0.1", s.port), timeout=HANG)
        for server, flag in ((site, ("--site", "s1")), (hub, ("--sites", "s1"))):
            done = await cli(server.url, prefix, "provision", "tests.apps.edge:app", *flag)
            assert done.returncode == 0, done.stderr
        async with running_worker(at_site, concurrency=8):
            local = [await at_site.tasks["add"].enqueue(n) for n in range(10)]  # cut off
            sent = [await at_hub.tasks["add"].options(site="s1").enqueue(n) for n in range(10, 30)]
            assert [await h.result(timeout=HANG) for h in local] == [n + 1000 for n in range(10)]
            link.restore()
            # within ~1 s when the servers run alone (docs/edge.md); loaded runs have waited
            # past HANG. On nats-server 2.15 a returning link can skip what was in flight
            # (docs/edge.md, "Known issue": about 1 in 36 restorations under heavy load):
            # the test is then an expected failure naming what was skipped, and any other
            # shortfall fails it with the report below
            sides = Sides(at_hub, at_site, hub.url, site.url)
            skipped = await arrived_or_skipped(sides, dict(enumerate(sent, 10)), runs, local)
            if skipped:
                pytest.xfail("; ".join(skipped))
            assert [await h.result(timeout=HANG) for h in sent] == [n + 1000 for n in range(10, 30)]
            for n, handle in enumerate(local):
                assert await at_hub.handle(handle.id).result(timeout=HANG) == n + 1000
        assert {n: c for n, c in runs.items() if c != 1} == {} and sorted(runs) == list(range(30))
    except BaseException:
        print("runs at the site:", runs)  # shown when it fails
        seen = {
            side: await streams_seen(server.url) for side, server in (("site", site), ("hub", hub))
        }
        for side, streams in seen.items():
            print(f"streams at the {side}:", streams)
        for line in skipped_by_a_source(seen["hub"], seen["site"]):
            print(line)
        raise
    finally:
        for app in (at_hub, at_site):
            await app.aclose()
        await link.close()
        said = [site.stop(), hub.stop()]
        print(f"--- site's log\n{said[0]}\n--- hub's log\n{said[1]}")
    assert "sites attach at nats-leaf://127.0.0.1:" in said[1], said[1]
    # the site worker's acks stayed at the site: without `$JS.ACK.>` in the leaf's deny lists
    # each reached the hub's `default` consumer as an ack of the hub's message of that number
    assert "past last stream sequence" not in said[1], said[1]
