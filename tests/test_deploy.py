"""deploy/: every nats-server config passes `nats-server -t`; every YAML file parses; every
shipped server fsyncs each write, keeps monitoring on loopback and (clustered) admits only
routes that carry the cluster's credentials."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from taskq.server import EmbeddedServer, find_binary
from tests.cluster import DEPLOY, Cluster, shipped_on_loopback
from tests.conftest import installed_nats_server
from tests.roles import credentials

CONFIGS = sorted(p for p in DEPLOY.rglob("*.conf") if p.name != "accounts.conf")
YAMLS = sorted(DEPLOY.rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_nats_config_is_valid(config: Path) -> None:
    check = subprocess.run(
        [find_binary(), "-t", "-c", config.name],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert documents
    for document in documents:
        assert isinstance(document, dict)


def test_cluster_configs_route_to_each_other_with_the_route_credentials() -> None:
    nodes = sorted((DEPLOY / "nats" / "cluster").glob("nats-*.conf"))
    assert len(nodes) == 3
    for node in nodes:
        text = node.read_text()
        user = re.search(r"authorization \{\s*user: (\S+)\s*password: (\S+)", text)
        assert user, f"{node.name}: no cluster authorization"
        others = {n.stem for n in nodes} - {node.stem}
        for other in others:
            assert f"nats-route://{user[1]}:{user[2]}@{other}:6222" in text


def _k8s_nats_conf() -> str:
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "nats.yaml").read_text())
    return next(d for d in docs if d["kind"] == "Secret")["stringData"]["nats.conf"]


def _server_configs() -> dict[str, str]:
    """Every nats-server config deploy/ ships: the .conf files and the one in k8s/."""
    shipped = {str(p.relative_to(DEPLOY)): p.read_text() for p in CONFIGS}
    return {**shipped, "k8s/nats.yaml": _k8s_nats_conf()}


def test_k8s_nats_config_is_valid(tmp_path: Path) -> None:
    (tmp_path / "accounts").mkdir()
    (tmp_path / "accounts" / "accounts.conf").write_text(
        (DEPLOY / "nats" / "accounts.conf").read_text()
    )
    (tmp_path / "nats.conf").write_text(_k8s_nats_conf())
    check = subprocess.run(
        [find_binary(), "-t", "-c", "nats.conf"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env={"POD_NAME": "nats-0"},
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_shipped_server_fsyncs_every_write() -> None:
    for name, text in _server_configs().items():
        jetstream = re.search(r"jetstream \{(.*?)\n\s*\}", text, re.S)
        assert jetstream and re.search(r"^\s*sync_interval: always", jetstream[1], re.M), name


def test_monitoring_listens_on_loopback_only() -> None:
    for name, text in _server_configs().items():
        for line in re.findall(
            r"^\s*(?:http|https|http_port|https_port|monitor_port)\b.*", text, re.M
        ):
            assert re.match(r"\s*https?: 127\.0\.0\.1:\d+", line), f"{name}: {line.strip()}"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    published = [p for s in compose["services"].values() for p in s.get("ports", [])]
    assert not any(str(p).endswith(":8222") for p in published)


def test_images_pin_the_tested_nats_server() -> None:
    tag = f"nats:{installed_nats_server()}-alpine"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    images = [compose["services"][f"nats-{i}"]["image"] for i in (1, 2, 3)]
    statefulset = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "k8s" / "nats.yaml").read_text())
        if d["kind"] == "StatefulSet"
    )
    images += [c["image"] for c in statefulset["spec"]["template"]["spec"]["containers"]]
    assert images == [tag] * 4


def test_k8s_has_worker_exporter_and_keda_scaler_on_runnable() -> None:
    """KEDA scales on the exporter's runnable gauge (not the NATS scaler's lag, which counts
    retries waiting out their delay), and the exporter it reads is deployed beside."""
    documents = list(yaml.safe_load_all((DEPLOY / "k8s" / "worker.yaml").read_text()))
    kinds = {d["kind"] for d in documents}
    assert {"Deployment", "ScaledObject", "Secret"} <= kinds
    deployments = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}
    (exporter,) = deployments["taskq-exporter"]["spec"]["template"]["spec"]["containers"]
    assert exporter["args"][:2] == ["taskq", "exporter"]
    (scaled,) = [d for d in documents if d["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert "taskq_queue_runnable" in trigger["metadata"]["query"]
    assert scaled["spec"]["scaleTargetRef"]["name"] in deployments


def test_compose_mounts_keep_the_include_paths() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name in ("nats-1", "nats-2", "nats-3"):
        node = compose["services"][name]
        assert "./nats:/etc/nats:ro" in node["volumes"]
        assert node["command"] == ["-c", f"/etc/nats/cluster/{name}.conf"]


async def test_the_secured_deploy_cluster_runs_tasks_on_r3(shipped_cluster: Cluster) -> None:
    """deploy/nats/cluster/*.conf as shipped (with accounts.conf), moved to loopback ports:
    the operator provisions R3 streams, the worker role runs what the producer role
    enqueues."""
    from taskq import App
    from tests.cluster import ready
    from tests.conftest import running_worker, wait_until
    from tests.roles import provisioned

    url = shipped_cluster.url
    await ready(url, user="operator", password="operator-secret")
    roles = {r: App(url=url, replicas=3, **credentials(r)) for r in ("worker", "producer")}
    try:
        for app in roles.values():

            @app.task(name="double")
            async def double(n: int) -> int:
                return 2 * n

        await provisioned(url, roles["worker"], replicas=3)
        async with running_worker(roles["worker"]) as worker:
            handle = await roles["producer"].tasks["double"].enqueue(21)
            await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=30)
            assert await handle.result(timeout=10) == 42
        broker = (await roles["worker"].client()).connection
        stream = roles["worker"].names.queue_stream("default")
        assert (await broker.streams.state(stream)).replicas == 3
    finally:
        for app in roles.values():
            await app.aclose()


ROGUE = """
server_name: {name}
cluster {{
  name: taskq
  listen: 127.0.0.1:-1
  routes: [nats-route://{credentials}127.0.0.1:{port}]
}}
"""


def _routed(server: EmbeddedServer) -> set[str]:
    """The names of the servers routed to `server`, from its /routez."""
    url = f"http://127.0.0.1:{server.port_of('monitoring')}/routez"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return {r.get("remote_name", "") for r in json.load(reply).get("routes") or []}


def _rogue(tmp_path: Path, name: str, credentials: str, port: int) -> EmbeddedServer:
    config = tmp_path / f"{name}.conf"
    config.write_text(ROGUE.format(name=name, credentials=credentials, port=port))
    log = tmp_path / f"{name}.log"
    return EmbeddedServer(store_dir=tmp_path / name, config=str(config), log_file=log).start()


async def test_a_server_without_the_route_credentials_cannot_join(tmp_path: Path) -> None:
    """The shipped cluster (on loopback) refuses a route from a server without its
    credentials: the refusal is logged and no node lists it. The same server with the
    credentials does join (so the check can see a server that joined)."""
    from tests.conftest import wait_until

    shutil.copy(DEPLOY / "nats" / "accounts.conf", tmp_path / "accounts.conf")
    (tmp_path / "cluster").mkdir()
    nodes = Cluster(tmp_path / "cluster", ["nats-1", "nats-2", "nats-3"], shipped_on_loopback)
    rogues: list[EmbeddedServer] = []
    try:
        nodes.start()
        first = nodes.servers["nats-1"]
        await wait_until(lambda: _routed(first) >= {"nats-2", "nats-3"}, timeout=30)
        rogues.append(_rogue(tmp_path, "rogue", "", nodes.cluster_ports["nats-1"]))
        refused = lambda: "Authorization Violation" in (tmp_path / "rogue.log").read_text()  # noqa: E731
        await wait_until(refused, timeout=30)
        assert all("rogue" not in _routed(s) for s in nodes.servers.values())
        text = (DEPLOY / "nats" / "cluster" / "nats-1.conf").read_text()
        user, password = re.search(r"user: (\S+)\s*password: (\S+)", text).groups()  # type: ignore[union-attr]
        rogues.append(
            _rogue(tmp_path, "admitted", f"{user}:{password}@", nodes.cluster_ports["nats-1"])
        )
        await wait_until(lambda: "admitted" in _routed(first), timeout=30)
    finally:
        for rogue in rogues:
            rogue.stop()
        nodes.close()
