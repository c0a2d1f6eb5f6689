"""Every environment deploy/ ships for a role (compose services, Kubernetes containers) sets
the reply prefix that role may subscribe to in deploy/nats/accounts.conf, and a worker
started with exactly that environment runs a task against a server of those roles (the
finding: compose.yaml and k8s/worker.yaml set TASKQ_USER=worker without
TASKQ_INBOX_PREFIX=_INBOX_worker, so the worker role received no replies at all)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from taskq.server import EmbeddedServer
from tests.conftest import ROOT, wait_until
from tests.roles import role
from tests.roles import secure_server as start_secure_server

DEPLOY = ROOT / "deploy"
ACCOUNTS = DEPLOY / "nats" / "accounts.conf"
DEFAULT_INBOX = "_INBOX"  # nats-py's (and taskq's) reply prefix when none is set
# what points at the deployment's own machines: the test's server takes their place
INFRASTRUCTURE = ("TASKQ_URL", "TASKQ_REPLICAS", "TASKQ_SPARK_MASTER")


# -- what accounts.conf lets each user subscribe to ------------------------------------------
def subscribe_rights(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each user of accounts.conf with its subscribe allow and deny lists (a user without
    subscribe permissions may subscribe to anything)."""
    text = re.sub(r"#[^\n]*", "", text)
    rights = {}
    for block in re.split(r"\buser:\s*", text)[1:]:
        user = re.match(r"[\w-]+", block)
        assert user, block[:80]
        subscribe = re.search(r"\bsubscribe:\s*\{(.*?)\}", block, re.S)
        body = subscribe[1] if subscribe else 'allow: [">"]'
        rights[user[0]] = (_listed(body, "allow"), _listed(body, "deny"))
    return rights


def _listed(body: str, key: str) -> list[str]:
    found = re.search(rf"\b{key}:\s*\[(.*?)\]", body, re.S)
    return re.findall(r'"([^"]+)"', found[1]) if found else []


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, `>` the rest (one token or more)."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(wanted) == len(tokens)


def may_receive_replies(rights: tuple[list[str], list[str]], prefix: str) -> bool:
    """Whether a client with reply prefix `prefix` may subscribe where nats-py puts its
    replies: the request inbox `<prefix>.<nuid>.*` and a pull's inbox `<prefix>.<nuid>`."""
    allow, deny = rights
    nuid = uuid.uuid4().hex
    subjects = (f"{prefix}.{nuid}.x", f"{prefix}.{nuid}")
    return all(
        any(_matches(a, s) for a in allow) and not any(_matches(d, s) for d in deny)
        for s in subjects
    )


# -- the environments deploy/ ships --------------------------------------------------------
def shipped_environments() -> dict[str, dict[str, str]]:
    """Every environment a shipped service or container runs with, resolved (a container's
    `envFrom` secrets and config maps of the same file, then its `env`), by where it is."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(DEPLOY.rglob("*.yaml")):
        where = str(path.relative_to(DEPLOY))
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        sources = {
            (d["kind"], d["metadata"]["name"]): _data(d)
            for d in docs
            if d.get("kind") in ("Secret", "ConfigMap")
        }
        for doc in docs:
            for name, service in (doc.get("services") or {}).items():  # compose
                found[f"{where}: {name}"] = _compose_env(service.get("environment"))
            for container in _containers(doc):
                env: dict[str, str] = {}
                for ref in container.get("envFrom", []):
                    kind = "Secret" if "secretRef" in ref else "ConfigMap"
                    named = (ref.get("secretRef") or ref.get("configMapRef"))["name"]
                    env.update(sources[(kind, named)])
                env.update({e["name"]: str(e.get("value", "")) for e in container.get("env", [])})
                found[f"{where}: {doc['kind']} {container['name']}"] = env
        for (kind, name), data in sources.items():
            if "TASKQ_USER" in data:  # a role's settings no container uses would be a slip
                assert any(e.get("TASKQ_USER") == data["TASKQ_USER"] for e in found.values()), (
                    f"{where}: {kind} {name} is used by no container"
                )
    return found


def _data(doc: dict[str, Any]) -> dict[str, str]:
    data = {k: str(v) for k, v in (doc.get("stringData") or {}).items()}
    for key, value in (doc.get("data") or {}).items():
        data[key] = base64.b64decode(value).decode() if doc["kind"] == "Secret" else str(value)
    return data


def _compose_env(environment: Any) -> dict[str, str]:
    if isinstance(environment, list):
        return dict(str(e).partition("=")[::2] for e in environment)
    return {k: str(v) for k, v in (environment or {}).items()}


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container (and init container) anywhere in a Kubernetes document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


ROLE_ENVIRONMENTS = {k: v for k, v in shipped_environments().items() if "TASKQ_USER" in v}
# each shipped worker and the shipped provisioning step that runs before it (same file)
WORKERS = {
    where: next(
        v
        for k, v in ROLE_ENVIRONMENTS.items()
        if k.split(":")[0] == where.split(":")[0] and v["TASKQ_USER"] == "operator"
    )
    for where, env in ROLE_ENVIRONMENTS.items()
    if env["TASKQ_USER"] == "worker"
}


def test_deploy_ships_environments_for_roles() -> None:
    """The checks below have something to check: the compose worker and the k8s worker,
    each with its provisioning step (the operator's: the worker role creates nothing)."""
    assert set(WORKERS) == {
        "compose.yaml: worker",
        "k8s/worker.yaml: Deployment worker",
        "k8s/worker.yaml: Deployment exporter",  # with the worker role
    }
    assert {"compose.yaml: provision", "k8s/worker.yaml: Job provision"} <= set(
        ROLE_ENVIRONMENTS
    ), sorted(ROLE_ENVIRONMENTS)


def test_the_parsing_of_accounts_conf_sees_each_role_s_own_inbox() -> None:
    rights = subscribe_rights(ACCOUNTS.read_text())
    assert may_receive_replies(rights["worker"], "_INBOX_worker")
    assert not may_receive_replies(rights["worker"], DEFAULT_INBOX)
    assert not may_receive_replies(rights["worker"], "_INBOX_producer")
    assert may_receive_replies(rights["producer"], "_INBOX_producer")
    assert may_receive_replies(rights["operator"], DEFAULT_INBOX)


@pytest.mark.parametrize("where", sorted(ROLE_ENVIRONMENTS))
def test_a_shipped_role_environment_sets_the_reply_prefix_its_role_may_receive(
    where: str,
) -> None:
    env = ROLE_ENVIRONMENTS[where]
    rights = subscribe_rights(ACCOUNTS.read_text())
    user = env["TASKQ_USER"]
    assert user in rights, f"{where}: TASKQ_USER={user} is no user of accounts.conf"
    prefix = env.get("TASKQ_INBOX_PREFIX", DEFAULT_INBOX)
    assert may_receive_replies(rights[user], prefix), (
        f"{where}: user {user} with reply prefix {prefix!r} may not subscribe to its replies"
        f" (accounts.conf allows {rights[user][0]})"
    )


@pytest.fixture(scope="module")
def shipped_roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A server of deploy/nats/accounts.conf's roles, this module's own (its queues hold
    nothing another test left)."""
    server = start_secure_server(tmp_path_factory.mktemp("shipped-env"))
    yield server
    server.stop()


@pytest.fixture
async def producer(shipped_roles: EmbeddedServer) -> AsyncIterator[Any]:
    app = role(shipped_roles, "producer")

    @app.task(name="quick")  # tests.apps.ledger's task, which the worker below runs
    async def quick(token: str) -> str: ...

    yield app
    await app.aclose()


@pytest.mark.parametrize("where", sorted(WORKERS))
async def test_a_worker_with_a_shipped_environment_runs_a_task(
    where: str, shipped_roles: EmbeddedServer, producer: Any, tmp_path: Path
) -> None:
    """`taskq provision` then `taskq worker`, each with exactly its shipped environment
    (its URL the test server's, no replicas or Spark master the test does not have): the
    worker runs what the producer enqueues."""
    shipped = ROLE_ENVIRONMENTS[where]
    assert shipped["TASKQ_USER"] == "worker", "only a worker environment runs a worker"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env.update({k: v for k, v in shipped.items() if k not in INFRASTRUCTURE})
    env["TASKQ_URL"] = shipped_roles.url
    env["TASKQ_TEST_LEDGER"] = str(tmp_path / "ledger")
    # an operator provisions first: the worker role may not create streams or consumers
    operator = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    operator.update({k: v for k, v in WORKERS[where].items() if k not in INFRASTRUCTURE})
    operator["TASKQ_URL"] = shipped_roles.url
    made = subprocess.run(
        [sys.executable, "-m", "taskq", "provision", "tests.apps.ledger:app", "--json"],
        cwd=ROOT, env=operator, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "TASKQ_Q_DEFAULT default" in json.loads(made.stdout)["consumers"]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "taskq", "-v", "worker", "tests.apps.ledger:app", "-c", "2"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        output = lambda: log.read_text(errors="replace")  # noqa: E731
        await wait_until(lambda: "worker ready" in output() or worker.poll() is not None, 60)
        assert worker.poll() is None, output()
        token = uuid.uuid4().hex  # enqueued once the worker made the queue (producers may not)
        handle = await producer.tasks["quick"].enqueue(token)
        assert await handle.result(timeout=30) == token, output()
        assert f"done {token}" in (tmp_path / "ledger").read_text()
        worker.send_signal(signal.SIGTERM)
        await wait_until(lambda: worker.poll() is not None, 60)
        assert worker.returncode == 0, output()
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait(10)
