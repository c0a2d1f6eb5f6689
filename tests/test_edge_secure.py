"""Edge sites with the shipped secure configs (deploy/nats/hub.conf, site.conf with
accounts.conf), moved to loopback: the flow works with each side's least-privilege roles
(an operator provisions, a producer at the hub sends, a worker at the site runs), and the
hub's leaf user of site s1, taken as a hostile member, reaches nothing of another site nor
of the hub's own tasks, results or JetStream API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskq import App
from taskq.ports import lease_port
from taskq.server import EmbeddedServer
from taskq.timings import Timings
from taskq.workers.sites import provision_hub, provision_site
from tests.conftest import HANG, run_cli, running_worker, wait_until
from tests.roles import ROOT, credentials, role_env
from tests.security.test_hostile_roles import Hostile
from tests.test_edge_sites import RETRY_MAX, edge_status_in_contact

NATS = ROOT / "deploy" / "nats"
pytestmark = pytest.mark.timeout(300)


@dataclass
class Secure:
    hub: EmbeddedServer
    site: EmbeddedServer


def shipped(folder: Path, name: str, replace: dict[str, str]) -> str:
    """deploy/nats/<name> with accounts.conf beside it in `folder`, addresses replaced."""
    folder.mkdir()
    shutil.copy(NATS / "accounts.conf", folder / "accounts.conf")
    text = (NATS / name).read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    (folder / name).write_text(text)
    return str(folder / name)


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[Secure]:
    leaf = lease_port()
    hub_conf = shipped(
        tmp_path / "hub",
        "hub.conf",
        {"0.0.0.0:7422": f"127.0.0.1:{leaf}", "/data/jetstream": str(tmp_path / "hub" / "js")},
    )
    site_conf = shipped(
        tmp_path / "site",
        "site.conf",
        {"hub.example:7422": f"127.0.0.1:{leaf}", "/data/jetstream": str(tmp_path / "site" / "js")},
    )
    hub = EmbeddedServer(store_dir=tmp_path / "hub" / "js", config=hub_conf).start()
    site = EmbeddedServer(store_dir=tmp_path / "site" / "js", config=site_conf).start()
    try:
        yield Secure(hub, site)
    finally:
        site.stop()
        hub.stop()


def as_role(server: EmbeddedServer, user: str, runs: dict[int, int] | None = None) -> App:
    app = App(url=server.url, prefix="taskq", timings=Timings.short(), **credentials(user))

    @app.task
    async def add(n: int) -> int:
        if runs is not None:
            runs[n] = runs.get(n, 0) + 1
        return n + 1000

    return app


@pytest.fixture
async def provisioned(secure: Secure) -> AsyncIterator[Secure]:
    hub_op, site_op = as_role(secure.hub, "operator"), as_role(secure.site, "operator")
    try:  # either side's sources wait for the other: no order needed
        await provision_hub(hub_op, await hub_op.client(), ["s1"], ["default"])
        await provision_site(site_op, await site_op.client(), "s1", ["default"])
        yield secure
    finally:
        await hub_op.aclose()
        await site_op.aclose()


@pytest.mark.timeout(RETRY_MAX + 4 * HANG)
async def test_the_shipped_roles_send_run_and_read_across_the_leaf(provisioned: Secure) -> None:
    runs: dict[int, int] = {}
    producer = as_role(provisioned.hub, "producer")
    worker_app = as_role(provisioned.site, "worker", runs)
    try:
        async with running_worker(worker_app):
            handles = [await producer.tasks["add"].options(site="s1").enqueue(n) for n in range(20)]
            # the hub's sources of the site's results start after a server back-off when
            # they found the site unprovisioned (10 s, 20 s, ... at most RETRY_MAX between
            # two tries, docs/edge.md): the first result may take that long under load
            first = await handles[0].result(timeout=RETRY_MAX + HANG)
            results = [first] + [await h.result(timeout=HANG) for h in handles[1:]]
        assert results == [n + 1000 for n in range(20)]
        assert sorted(runs) == list(range(20)) and set(runs.values()) == {1}
        # doctor, as the operator: each side in contact with the other through the leaf.
        # The hub's dead-letter source is in the same back-off as its results' were (and
        # no dead letter has flowed to show it up): asked until it is, as set-up above
        for server, other in ((provisioned.hub, "s1"), (provisioned.site, "hub")):
            edge = await edge_in_contact(server)
            assert f"in contact with {other}" in edge["detail"], edge
            assert edge["status"] == edge_status_in_contact(), edge
    finally:
        await producer.aclose()
        await worker_app.aclose()


async def edge_in_contact(server: EmbeddedServer) -> dict[str, str]:
    """doctor's edge check on `server`, asked once a second until it sees every source in
    contact (2 * HANG at most); the last answer."""
    seen: dict[str, dict[str, str]] = {}

    async def ok() -> bool:
        done = await asyncio.to_thread(
            run_cli, server.url, "taskq", "doctor", "--json", env=role_env("operator")
        )
        (seen["edge"],) = [c for c in json.loads(done.stdout) if c["check"] == "edge"]
        return seen["edge"]["status"] != "fail"

    with contextlib.suppress(AssertionError):  # the deadline: the last answer says why
        await wait_until(ok, timeout=2 * HANG, every=1.0)
    return seen["edge"]


LEAF_MAY_NOT_SUBSCRIBE = [
    "taskq.edge.s2.>",  # another site's tasks
    "taskq.q.>",  # the hub's own tasks
    "taskq.o.>",  # every site's outbox subjects
    "$KV.TASKQ_RESULTS.>",
    "taskq.dlq.>",
    "_INBOX.>",  # the hub's clients' replies
    "$JS.s2.API.>",
    ">",
]
LEAF_MAY_NOT_PUBLISH = [
    "$JS.hub.API.CONSUMER.RESET.TASKQ_OUT_S2_DEFAULT.s2",  # restart another site's feed
    "$JS.FC.TASKQ_OUT_S2_DEFAULT.s2.x",  # acknowledge another site's tasks unstored
    "$JS.FC.hub.abc.TASKQ_OUT_S2_DEFAULT.s2.x",
    "taskq.edge.s2.default",  # forge another site's delivery
    "taskq.q.default.add",  # a task into the hub's own queue
    "taskq.o.s2.default.add",  # a task into another site's outbox
    "$JS.hub.API.STREAM.LIST",
    "$JS.hub.API.STREAM.DELETE.TASKQ_OUT_S1_DEFAULT",
    "$JS.hub.API.CONSUMER.DELETE.TASKQ_OUT_S1_DEFAULT.s1",
    "$JS.API.STREAM.LIST",
    "$JS.hub.API.DIRECT.GET.KV_TASKQ_RESULTS",
    "$KV.TASKQ_RESULTS.forged",
]


@pytest.mark.parametrize("subject", LEAF_MAY_NOT_SUBSCRIBE)
async def test_a_site_s_leaf_user_cannot_listen_beyond_its_site(
    secure: Secure, subject: str
) -> None:
    async with Hostile(secure.hub.url, "leaf-s1") as leaf:
        assert await leaf.refused_subscribe(subject)


@pytest.mark.parametrize("subject", LEAF_MAY_NOT_PUBLISH)
async def test_a_site_s_leaf_user_cannot_act_beyond_its_site(secure: Secure, subject: str) -> None:
    async with Hostile(secure.hub.url, "leaf-s1") as leaf:
        await leaf.nc.publish(subject, b"{}")
        await leaf.nc.flush()
        # a client's publish to its own domain's API is checked as the API subject it maps to
        assert await leaf._violated("publish", subject.replace("$JS.hub.API.", "$JS.API."))
