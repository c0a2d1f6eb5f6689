"""`taskq doctor` against real servers: an embedded one durable or not, the shipped roles
of deploy/nats/accounts.conf, a wider-than-shipped worker user, a 3-node cluster, the
shipped secure single-node config and the shipped secured 3-node cluster, and no server at
all; the worker's start-up notice about durability; the judging rules alone."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq import App
from taskq.doctor.checks import judge_skew, storage
from taskq.doctor.edge import EdgeSeen, SourceSeen, judge_edge
from taskq.doctor.facts import Facts
from taskq.doctor.monitor import durability_warning
from taskq.doctor.transport import judge_transport
from taskq.doctor.versions import judge_versions, parse_version
from taskq.ports import lease_port, release_port
from taskq.server import EmbeddedServer
from taskq.settings import Settings
from tests.cluster import DEPLOY, Cluster
from tests.conftest import run_cli, running_worker, wait_until
from tests.roles import credentials, provisioned, role_env

CHECKS = [
    "servers",
    "version",
    "sync",
    "replicas",
    "results",
    "storage",
    "clock",
    "tls",
    "credentials",
    "permissions",
]


def doctor(url: str, *args: str, prefix: str = "taskq", env: dict[str, str] | None = None) -> Any:
    """`taskq --url URL --prefix P doctor ARGS...` as a user runs it (in this process: the
    report's text and exit code are what these tests are about)."""
    return run_cli(url, prefix, "doctor", *args, env=env)


def report(url: str, *args: str, **options: Any) -> dict[str, dict[str, Any]]:
    """The `--json` report, by check name (its shape checked on the way)."""
    done = doctor(url, "--json", *args, **options)
    found = json.loads(done.stdout)
    assert [c["check"] for c in found] == CHECKS, done.stdout + done.stderr
    assert all(set(c) == {"check", "status", "detail", "fix"} for c in found)
    assert all((c["fix"] is None) == (c["status"] == "ok") for c in found)
    by_name = {c["check"]: c for c in found}
    failed = any(c["status"] == "fail" for c in found)
    assert done.returncode == (1 if failed else 0), done.stderr
    return by_name


@pytest.fixture
def monitored(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[EmbeddedServer]:
    """An embedded server with its monitoring port, `sync` from the test's parameter."""
    sync = getattr(request, "param", None)
    server = EmbeddedServer(store_dir=tmp_path / "store", sync=sync, extra_args=("-m", "-1"))
    with server:
        yield server


def monitor_of(server: EmbeddedServer) -> str:
    return f"http://127.0.0.1:{server.port_of('monitoring')}"


async def make_a_stream(url: str, prefix: str, **settings: Any) -> None:
    app = App(url=url, prefix=prefix, **settings)

    @app.task
    async def noop() -> None: ...

    try:
        await noop.enqueue()
    finally:
        await app.aclose()


@pytest.mark.parametrize("monitored", ["always"], indirect=True)
async def test_a_durable_embedded_server_passes(monitored: EmbeddedServer, prefix: str) -> None:
    await make_a_stream(monitored.url, prefix)  # a stream's info carries the server's clock
    found = report(monitored.url, "--monitor", monitor_of(monitored), prefix=prefix)
    assert {c["status"] for c in found.values()} == {"ok"}, found
    assert "sync_interval always" in found["sync"]["detail"]
    assert "2.15.1" in found["version"]["detail"]
    assert "R1" in found["replicas"]["detail"] and "on 1 node" in found["replicas"]["detail"]
    assert "free" in found["storage"]["detail"]
    assert found["permissions"]["detail"].startswith("operator")


async def test_a_server_that_does_not_fsync_fails_and_unchecked_is_a_warning(
    monitored: EmbeddedServer, prefix: str
) -> None:
    # Given nats-server's default sync (2m) on a single node
    found = report(monitored.url, "--monitor", monitor_of(monitored), prefix=prefix)
    assert found["sync"]["status"] == "fail"
    assert "2m0s" in found["sync"]["detail"] and "sync_interval: always" in found["sync"]["fix"]
    # Without the monitoring endpoint the setting is unknown: a warning, exit 0
    found = report(monitored.url, prefix=prefix)
    assert found["sync"]["status"] == "warn" and "--monitor" in found["sync"]["fix"]
    # The text report: one line per check (and a count), the failing one with its fix
    text = doctor(monitored.url, "--monitor", monitor_of(monitored), prefix=prefix)
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == CHECKS
    assert lines[2].startswith("fail  sync") and "fix: set jetstream" in lines[2]
    assert lines[-1] == "doctor: 9 ok, 0 warn, 1 fail"


def test_more_replicas_than_nodes_fails(nats_url: str, prefix: str) -> None:
    found = report(nats_url, prefix=prefix, env={"TASKQ_REPLICAS": "3"})
    assert found["replicas"]["status"] == "fail"
    assert "TASKQ_REPLICAS=3 on 1 node(s)" in found["replicas"]["detail"]


def test_each_shipped_role_is_recognised(secure_server: EmbeddedServer) -> None:
    seen = {
        user: report(secure_server.url, env=role_env(user))["permissions"]
        for user in ("operator", "worker", "producer")
    }
    assert seen["operator"]["status"] == "ok"
    assert seen["operator"]["detail"] == "operator: may do everything probed"
    worker, producer = seen["worker"], seen["producer"]
    assert worker["status"] == producer["status"] == "ok"
    may, cannot = worker["detail"].split("; cannot ")
    assert may.startswith("worker: may ")
    for right in ("pull tasks", "write results", "write dead letters"):
        assert right in may
    for right in (
        "create streams",  # an operator provisions them (`taskq provision`)
        "create consumers",
        "delete streams",
        "purge streams",
        "read dead letters",
        "cancel tasks",
    ):
        assert right in cannot and right not in may
    may, cannot = producer["detail"].split("; cannot ")
    assert may == "producer: may read stream info, enqueue tasks, read results"
    for right in ("pull tasks", "write results", "write schedules", "delete streams"):
        assert right in cannot


def test_an_identity_without_its_reply_prefix_is_told_in_one_line(
    secure_server: EmbeddedServer,
) -> None:
    env = {**role_env("producer"), "TASKQ_INBOX_PREFIX": ""}  # the default _INBOX: refused
    done = doctor(secure_server.url, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "may not receive replies on _INBOX.>" in done.stderr
    assert "TASKQ_INBOX_PREFIX" in done.stderr


WIDE = """
jetstream {{ store_dir: "{store}" }}
accounts {{
  TASKQ {{
    jetstream: enabled
    users: [{{
      user: wide, password: wide-secret
      permissions: {{
        publish: {{ allow: [">"] }}
        subscribe: {{ allow: ["_INBOX_wide.>", "$KV.TASKQ_RESULTS.>"] }}
      }}
    }}]
  }}
}}
"""


def test_a_worker_user_with_more_rights_than_shipped_is_a_warning(tmp_path: Path) -> None:
    # Given a user that pulls and writes results like a worker, but may publish anything
    config = tmp_path / "wide.conf"
    config.write_text(WIDE.format(store=tmp_path / "store"))
    env = {"TASKQ_USER": "wide", "TASKQ_PASSWORD": "wide-secret"}
    env["TASKQ_INBOX_PREFIX"] = "_INBOX_wide"
    with EmbeddedServer(store_dir=tmp_path / "store", config=str(config)) as server:
        found = report(server.url, env=env)  # warnings alone: exit 0 (checked in report)
    rights = found["permissions"]
    assert rights["status"] == "warn"
    assert rights["detail"].startswith("worker: may ")
    excess = rights["detail"].split("more than the shipped worker role: can ")[1]
    for right in ("delete streams", "purge streams", "remove dead letters", "cancel tasks"):
        assert right in excess
    assert "read tasks as they are published" not in excess  # its subscriptions are narrow
    assert "worker permissions of deploy/nats/accounts.conf" in rights["fix"]


async def test_an_r1_stream_on_a_three_node_cluster_warns(
    three_nodes: Cluster, prefix: str
) -> None:
    await three_nodes.ready()
    await make_a_stream(three_nodes.url, prefix)  # R1: TASKQ_REPLICAS not set
    found = report(three_nodes.url, prefix=prefix)
    assert found["servers"]["status"] == "ok"
    assert "of 3 nodes" in found["servers"]["detail"]
    assert found["servers"]["detail"].count("nats://127.0.0.1:") == 3
    replicas = found["replicas"]
    assert replicas["status"] == "warn"
    assert f"{prefix.upper()}_Q_DEFAULT R1 on a 3-node cluster" in replicas["detail"]
    assert "TASKQ_REPLICAS=3" in replicas["fix"]


def shipped_secure_single(root: Path) -> EmbeddedServer:
    """deploy/nats/single-secure.conf as shipped, with accounts.conf beside it: its store in
    `root`, its client and monitoring ports ones the server picks (`--monitor`)."""
    shutil.copy(DEPLOY / "nats" / "accounts.conf", root / "accounts.conf")
    text = (DEPLOY / "nats" / "single-secure.conf").read_text()
    assert 'store_dir: ".taskq/secure-store"' in text and "listen: 127.0.0.1:4222" in text
    text = text.replace('".taskq/secure-store"', f'"{root / "store"}"')
    text = text.replace("listen: 127.0.0.1:4222", "listen: 127.0.0.1:-1")
    assert "http: 127.0.0.1:8222" in text  # monitoring, on loopback only
    text = text.replace("http: 127.0.0.1:8222", "http: 127.0.0.1:-1")
    (root / "single-secure.conf").write_text(text)
    server = EmbeddedServer(
        store_dir=root / "store",
        config=str(root / "single-secure.conf"),
        log_file=root / "server.log",
    )
    return server.start()


async def test_the_shipped_secure_single_node_passes_as_the_operator(tmp_path: Path) -> None:
    """deploy/nats/single-secure.conf, checked as its operator with the monitoring URL:
    every check ok but credentials, which warns that the shipped passwords work (exit 0),
    in the JSON report and in the text one."""
    server = shipped_secure_single(tmp_path)
    try:
        await make_a_stream(server.url, "taskq", **credentials("operator"))  # provisioned
        monitor = monitor_of(server)
        found = report(server.url, "--monitor", monitor, env=role_env("operator"))
        text = doctor(server.url, "--monitor", monitor, env=role_env("operator"))
    finally:
        server.stop()
    statuses = {**dict.fromkeys(CHECKS, "ok"), "credentials": "warn"}
    assert {c: found[c]["status"] for c in CHECKS} == statuses, found
    assert found["servers"]["detail"] == f"{server.url} (taskq-secure); 1 node"
    assert found["version"]["detail"].endswith("no known data-loss bug")
    assert found["sync"]["detail"] == (
        "sync_interval always on taskq-secure: fsync before every acknowledgement"
    )
    assert "R1, on 1 node(s)" in found["replicas"]["detail"]
    assert "max_file_store" in found["storage"]["detail"]  # read from /varz
    assert found["tls"]["detail"] == "plain text, authenticated, loopback only"
    assert found["permissions"]["detail"] == "operator: may do everything probed"
    shipped = found["credentials"]["detail"]
    assert all(f"{role} ({role}-secret)" in shipped for role in ("producer", "worker", "operator"))
    assert "route" not in shipped  # a single node: no route port
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [[statuses[c], c] for c in CHECKS]
    assert lines[-1] == "doctor: 9 ok, 1 warn, 0 fail"


@pytest.mark.heavy
async def test_the_shipped_secured_cluster_passes_with_r3_streams(shipped_cluster: Cluster) -> None:
    """deploy/nats/cluster/*.conf as shipped (on loopback, as tests/test_deploy.py uses
    them), once R3 streams exist: servers, sync and replicas ok with every node's monitoring
    URL; with one node's only, the sync of the other two is unknown (a warning). The shipped
    passwords, the roles' and the routes', are a warning naming each."""
    from tests.cluster import ready

    nodes = shipped_cluster
    url = nodes.url
    await ready(url, user="operator", password="operator-secret")
    worker = App(url=url, prefix="taskq", replicas=3, **credentials("worker"))

    @worker.task
    async def noop() -> None: ...

    try:
        await provisioned(url, worker, replicas=3)  # the queue's streams and buckets, R3
        async with running_worker(worker) as running:
            await noop.enqueue()
            await wait_until(lambda: running.stats["succeeded"] == 1, timeout=30)
    finally:
        await worker.aclose()
    monitors = [monitor_of(nodes.servers[n]) for n in nodes.names]
    env = {**role_env("operator"), "TASKQ_REPLICAS": "3"}
    every = [arg for m in monitors for arg in ("--monitor", m)]
    found = report(url, *every, env=env)
    one = report(url, "--monitor", monitors[0], env=env)
    statuses = {**dict.fromkeys(CHECKS, "ok"), "credentials": "warn"}
    assert {c: found[c]["status"] for c in CHECKS} == statuses, found
    shipped = found["credentials"]["detail"]
    assert all(f"{role} ({role}-secret)" in shipped for role in ("producer", "worker", "operator"))
    assert "(taskq-route/route-secret) opens the route port of nats-1, nats-2, nats-3" in shipped
    assert "route-secret" in found["credentials"]["fix"]
    assert "opens the route port of nats-1:" in one["credentials"]["detail"]  # the one read
    servers = found["servers"]["detail"]
    assert servers.endswith("; cluster taskq of 3 nodes"), servers
    assert all(f"({name})" in servers for name in nodes.names)
    assert found["sync"]["detail"] == (
        "sync_interval always on nats-1, nats-2, nats-3: fsync before every acknowledgement"
    )
    assert found["replicas"]["detail"].endswith("stream(s), R3, on 3 node(s)")
    assert found["tls"]["detail"] == "plain text, authenticated, loopback only"
    assert one["sync"]["status"] == "warn"
    assert one["sync"]["detail"] == "sync_interval always on nats-1; 2 of 3 nodes not read"
    assert one["replicas"]["status"] == "ok"


def test_no_server_is_a_failed_check_and_exit_1() -> None:
    """Issue 39 (10): a report like any other finding, not an abort."""
    port = lease_port()  # nobody listens on a leased port
    try:
        done = doctor(f"nats://127.0.0.1:{port}")
    finally:
        release_port(port)
    url = f"nats://127.0.0.1:{port}"
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout.splitlines() == [
        f"fail  servers      cannot reach NATS at {url}  fix: start one with `taskq server`, "
        f"or check {url}",
        "doctor: 0 ok, 0 warn, 1 fail",
    ]


@pytest.mark.parametrize("monitored", [None], indirect=True)
async def test_a_worker_warns_at_start_when_its_server_does_not_fsync(
    monitored: EmbeddedServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(url=monitored.url, prefix=prefix, monitor_url=monitor_of(monitored))

    @app.task
    async def noop() -> None: ...

    caplog.set_level(logging.WARNING, logger="taskq.worker")
    try:
        async with running_worker(app):
            await wait_until(lambda: "before writing them to disk" in caplog.text)
    finally:
        await app.aclose()
    assert "sync_interval 2m0s" in caplog.text and "sync_interval: always" in caplog.text


@pytest.mark.parametrize("monitored", ["always"], indirect=True)
async def test_no_durability_warning_for_a_server_that_fsyncs(
    monitored: EmbeddedServer, prefix: str
) -> None:
    app = App(url=monitored.url, prefix=prefix)
    try:
        connection = (await app.client()).connection
        assert await durability_warning(connection, monitor_of(monitored)) is None
        # an endpoint that does not answer says nothing either
        port = lease_port()
        try:
            assert await durability_warning(connection, f"127.0.0.1:{port}") is None
        finally:
            release_port(port)
    finally:
        await app.aclose()


# The rules alone


def test_the_version_floor_and_the_later_fix() -> None:
    candidate, release = parse_version("v2.12.3-RC.1"), parse_version("2.12.3")
    assert candidate is not None and release is not None and candidate < release
    assert judge_versions({"n1": "2.11.9"}).status == "fail"  # no message schedules
    below = judge_versions({"n1": "2.12.2"})
    assert below.status == "fail" and "nats-server#7594" in below.detail
    for later in ("2.12.3", "2.12.15", "2.14.5"):
        lacking = judge_versions({"n1": later})
        assert lacking.status == "warn" and "nats-server#8475" in lacking.detail, later
    assert judge_versions({"n1": "2.15.0", "n2": "2.15.1"}).status == "ok"
    assert judge_versions({"n1": "2.15.1", "n2": "2.14.5"}).status == "warn"  # the worst


def test_the_edge_check_warns_of_the_reset_race_from_2_15() -> None:
    """docs/edge.md "Known issue": in contact, 2.14 is ok; 2.15 and later are warned of
    (no release fixes the race yet); below 2.14 there is no durable sourcing at all."""
    seen = EdgeSeen("s1", [SourceSeen("Q", "hub", 0.4, None)])
    assert judge_edge(seen, "2.14.6").status == "ok"
    for racing in ("2.15.0", "2.15.1", "2.16.0"):
        found = judge_edge(seen, racing)
        assert found.status == "warn" and "in contact with hub" in found.detail, racing
        assert "known issue" in found.detail and "ResultTimeout" in (found.fix or ""), racing
    assert judge_edge(seen, "2.12.8").status == "fail"
    cut = EdgeSeen("s1", [SourceSeen("Q", "hub", 30.0, None)])
    assert judge_edge(cut, "2.15.1").status == "fail"  # no contact outweighs the warning


def test_clock_skew_thresholds() -> None:
    assert judge_skew(0.2, 0.01).status == "ok"
    assert judge_skew(-1.5, 0.01).status == "warn"
    assert judge_skew(1.5, 0.6).status == "ok"  # within what the round trip cannot tell
    assert judge_skew(31.0, 0.01).status == "fail"


def test_plain_unauthenticated_to_another_host_warns() -> None:
    remote = Settings(url="nats://10.1.2.3:4222")
    assert judge_transport(remote, {}).status == "warn"
    assert "no authentication" in judge_transport(remote, {}).detail
    assert judge_transport(remote, {"tls_required": True, "auth_required": True}).status == "ok"
    assert judge_transport(Settings(url="nats://localhost:4222"), {}).status == "ok"
    both = Settings(url="nats://127.0.0.1:4222,nats://[::1]:4223")
    assert judge_transport(both, {}).status == "ok"


def test_storage_headroom_thresholds() -> None:
    def judged(used: int, limit: int) -> str:
        account = {"storage": used, "limits": {"max_storage": limit}}
        return storage(Facts(Settings(), {}, [], account, [], None, None, [])).status

    assert judged(10, 100) == "ok"
    assert judged(81, 100) == "warn"
    assert judged(100, 100) == "fail"
    assert judged(5, -1) == "warn"  # no limit visible without --monitor
