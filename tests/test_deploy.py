"""deploy/: every nats-server config passes `nats-server -t`; every YAML file parses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from taskq.server import find_binary
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
