"""`taskq doctor`'s credentials check on real servers: the shipped passwords of
deploy/nats/accounts.conf are a warning naming each role that still takes one (and the one
doctor itself used); the same accounts with passwords of their own, on one node and on the
shipped 3-node cluster (routes too), are not; nor is a server without authentication, whatever
doctor passes. The passwords tried are those deploy/ ships (read from its files here).
The shipped cluster's route password is checked in tests/test_doctor.py (its shared cluster)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskq.doctor.credentials import ROLE_PASSWORDS, ROUTE_PASSWORD, ROUTE_USER, SHIPPED
from taskq.server import EmbeddedServer
from tests.cluster import DEPLOY, Cluster, ready, shipped_on_loopback
from tests.roles import ROLES, role_env
from tests.test_doctor import doctor, monitor_of, report

CHANGED = "-of-our-own-7f3a"  # what each shipped password's `-secret` becomes


def changed(text: str) -> str:
    """`text` with every shipped password replaced by one of its own (`x-secret` becomes
    `x-of-our-own-7f3a`), checked to have held some."""
    assert any(password in text for password in SHIPPED)
    return text.replace("-secret", CHANGED)


def operator_env(password: str) -> dict[str, str]:
    return {"TASKQ_USER": "operator", "TASKQ_PASSWORD": password}


def test_the_shipped_passwords_are_a_warning_naming_each_role(
    secure_server: EmbeddedServer,
) -> None:
    # Given a server whose accounts are deploy/nats/accounts.conf's, as shipped
    found = report(secure_server.url, env=role_env("worker"))["credentials"]
    assert found["status"] == "warn"
    for role in ROLES:
        assert f"{role} ({role}-secret)" in found["detail"], found
    assert f"on {secure_server.url}" in found["detail"]
    assert "doctor itself connected with the shipped password worker-secret" in found["detail"]
    assert "replace the shipped passwords" in found["fix"] and "nkeys / JWT" in found["fix"]
    assert "route" not in found["detail"] + found["fix"]  # no cluster
    # the text report: its line, with the fix; a warning alone exits 0
    text = doctor(secure_server.url, env=role_env("operator"))
    assert text.returncode == 0 and text.stderr == "", text.stderr  # the tries log nothing
    [line] = [x for x in text.stdout.splitlines() if x.split()[1] == "credentials"]
    assert line.startswith("warn  credentials  the shipped password works for producer")
    assert "fix: replace the shipped passwords" in line


def test_a_server_with_passwords_of_its_own_gives_no_warning(tmp_path: Path) -> None:
    accounts = changed((DEPLOY / "nats" / "accounts.conf").read_text())
    (tmp_path / "accounts.conf").write_text(accounts)
    config = tmp_path / "server.conf"
    config.write_text(f'jetstream {{ store_dir: "{tmp_path / "store"}" }}\ninclude accounts.conf\n')
    server = EmbeddedServer(store_dir=tmp_path / "store", config=str(config))
    with server:
        found = report(server.url, env=operator_env(f"operator{CHANGED}"))
    assert found["credentials"] == {
        "check": "credentials",
        "status": "ok",
        "detail": f"no shipped role password works on {server.url}",
        "fix": None,
    }
    assert not [c for c in found.values() if "-secret" in c["detail"]]


def test_a_server_without_authentication_is_no_credentials_warning(
    nats_url: str, prefix: str
) -> None:
    # doctor passes the shipped operator password; the server asks for none and ignores it
    found = report(nats_url, prefix=prefix, env=operator_env("operator-secret"))
    assert found["credentials"]["status"] == "ok"
    assert found["credentials"]["detail"] == (
        "the server asks clients for no credentials: no password to try"
    )


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """deploy/nats/cluster/*.conf and accounts.conf on loopback (as `shipped_cluster`),
    every password, the routes' too, replaced by one of its own."""
    (tmp_path / "accounts.conf").write_text(
        changed((DEPLOY / "nats" / "accounts.conf").read_text())
    )
    (tmp_path / "cluster").mkdir()

    def render(nodes: Cluster, name: str) -> str:
        return changed(shipped_on_loopback(nodes, name))

    nodes = Cluster(tmp_path / "cluster", ["nats-1", "nats-2", "nats-3"], render)
    nodes.start()
    yield nodes
    nodes.close()


@pytest.mark.heavy
async def test_a_cluster_with_passwords_of_its_own_gives_no_warning(own_cluster: Cluster) -> None:
    """The route password tried on each node's route port (read from its /varz) is refused
    there, and no role's shipped password works: ok, saying so."""
    password = f"operator{CHANGED}"
    await ready(own_cluster.url, user="operator", password=password)
    every = [
        a for n in own_cluster.names for a in ("--monitor", monitor_of(own_cluster.servers[n]))
    ]
    found = report(own_cluster.url, *every, env=operator_env(password))["credentials"]
    assert found["status"] == "ok", found
    assert found["detail"].startswith("no shipped role password works on nats://127.0.0.1:")
    assert found["detail"].endswith("; route password refused by nats-1, nats-2, nats-3")


def test_the_passwords_tried_are_those_deploy_ships() -> None:
    """Every password in deploy/ (accounts, cluster and k8s route credentials, the clients'
    TASKQ_PASSWORD in compose and k8s) is one the check tries, and each it tries ships."""
    users = "".join((DEPLOY / "nats" / name).read_text() for name in ("accounts.conf", "hub.conf"))
    assert dict(re.findall(r"user: ([\w-]+), password: ([\w-]+)", users)) == ROLE_PASSWORDS
    routed = [*sorted((DEPLOY / "nats" / "cluster").glob("*.conf")), DEPLOY / "k8s" / "nats.yaml"]
    for path in routed:
        text = path.read_text()
        assert re.findall(r"user: ([\w-]+)\s+password: ([\w-]+)", text) == [
            (ROUTE_USER, ROUTE_PASSWORD)
        ], path
        assert set(re.findall(r"nats-route://([\w-]+):([\w-]+)@", text)) == {
            (ROUTE_USER, ROUTE_PASSWORD)
        }, path
    every = [p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix in (".conf", ".yaml")]
    said = {m for p in every for m in re.findall(r"(?i)password: ([\w-]+)", p.read_text())}
    assert said == SHIPPED
