"""deploy/: every nats-server config passes `nats-server -t`; every YAML file parses."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from taskq.server import find_binary
from tests.cluster import Cluster
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
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


def test_cluster_configs_route_to_each_other() -> None:
    nodes = sorted((DEPLOY / "nats" / "cluster").glob("nats-*.conf"))
    assert len(nodes) == 3
    for node in nodes:
        text = node.read_text()
        others = {n.stem for n in nodes} - {node.stem}
        assert all(f"nats-route://{o}:6222" in text for o in others)


def test_k8s_has_worker_and_keda_scaler() -> None:
    kinds = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "k8s" / "worker.yaml").read_text())}
    assert {"Deployment", "ScaledObject", "Secret"} <= set(kinds)
    trigger = kinds["ScaledObject"]["spec"]["triggers"][0]
    assert trigger["type"] == "nats-jetstream" and trigger["metadata"]["consumer"] == "default"


def test_compose_mounts_keep_the_include_paths() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name in ("nats-1", "nats-2", "nats-3"):
        node = compose["services"][name]
        assert "./nats:/etc/nats:ro" in node["volumes"]
        assert node["command"] == ["-c", f"/etc/nats/cluster/{name}.conf"]


async def test_the_secured_deploy_cluster_runs_tasks_on_r3(tmp_path: Path) -> None:
    """deploy/nats/cluster/*.conf as shipped (with accounts.conf), moved to loopback ports:
    the worker role sets up R3 streams and runs what the producer role enqueues."""
    import shutil

    from taskq import App
    from tests.cluster import ready
    from tests.conftest import running_worker, wait_until

    shutil.copy(DEPLOY / "nats" / "accounts.conf", tmp_path / "accounts.conf")
    (tmp_path / "cluster").mkdir()
    nodes = Cluster(tmp_path / "cluster", ["nats-1", "nats-2", "nats-3"], _on_loopback)
    try:
        url = nodes.start().url
        await ready(url, user="operator", password="operator-secret")
        roles = {
            r: App(url=url, user=r, password=f"{r}-secret", replicas=3)
            for r in ("worker", "producer")
        }
        for app in roles.values():

            @app.task(name="double")
            async def double(n: int) -> int:
                return 2 * n

        async with running_worker(roles["worker"]) as worker:
            handle = await roles["producer"].tasks["double"].enqueue(21)
            await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=30)
            assert await handle.result(timeout=10) == 42
        broker = (await roles["worker"].client()).connection
        stream = roles["worker"].names.queue_stream("default")
        assert (await broker.streams.state(stream)).replicas == 3
        for app in roles.values():
            await app.aclose()
    finally:
        nodes.close()


def _on_loopback(nodes: Cluster, name: str) -> str:
    """deploy/nats/cluster/<name>.conf with its addresses moved to loopback and leased
    ports, its store in the test's directory, monitoring on a port of its own choosing."""
    text = (DEPLOY / "nats" / "cluster" / f"{name}.conf").read_text()
    text = text.replace("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{nodes.ports[name]}")
    text = re.sub(r"http: [0-9.]+:8222", "http: 127.0.0.1:-1", text)
    text = text.replace("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{nodes.cluster_ports[name]}")
    text = text.replace("/data/jetstream", str(nodes.root / name))
    for other in nodes.names:
        text = text.replace(f"{other}:6222", f"127.0.0.1:{nodes.cluster_ports[other]}")
    return text
