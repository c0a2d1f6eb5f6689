"""The shipped roles (deploy/nats/accounts.conf) on a real server, for the tests that act
as each role: a server started from that file, and an App connected as one of its users."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from taskq import App
from taskq.server import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
ROLES = ("producer", "worker", "operator")


def secure_server(root: Path) -> EmbeddedServer:
    """A started nats-server whose accounts and users are deploy/nats/accounts.conf's."""
    shutil.copy(ROOT / "deploy" / "nats" / "accounts.conf", root / "accounts.conf")
    config = root / "server.conf"
    config.write_text(f'jetstream {{ store_dir: "{root / "store"}" }}\ninclude accounts.conf\n')
    server = EmbeddedServer(store_dir=root / "store", config=str(config), log_file=root / "log")
    return server.start()


def credentials(user: str) -> dict[str, str]:
    """Settings of a shipped role's user: its password and its own reply prefix."""
    found = {"user": user, "password": f"{user}-secret"}
    if user != "operator":
        found["inbox_prefix"] = f"_INBOX_{user}"
    return found


def role(server: EmbeddedServer, user: str, **settings: Any) -> App:
    """An App of prefix `taskq` connected to `server` as the shipped role `user`."""
    return App(
        url=server.url, prefix="taskq", max_deliver_floor=20, **credentials(user), **settings
    )


async def raw_connection(server: EmbeddedServer, user: str) -> Any:
    """A raw nats-py connection as the shipped role `user` (a hostile member's)."""
    import nats

    given = credentials(user)
    return await nats.connect(
        server.url,
        user=given["user"],
        password=given["password"],
        inbox_prefix=given.get("inbox_prefix", "_INBOX"),
    )


def role_env(user: str) -> dict[str, str]:
    """The environment a CLI command (or dashboard) runs with as role `user`."""
    return {f"TASKQ_{k.upper()}": v for k, v in credentials(user).items()}


async def provisioned(url: str, app: App, queues: list[str] | None = None, **settings: Any) -> None:
    """What `taskq provision` does, as the shipped operator on the server at `url`, for
    `app`'s tasks and queues: the shipped worker role may not create streams or consumers."""
    from taskq.workers.provision import provision

    operator = App(
        url=url, prefix="taskq", max_deliver_floor=20, **credentials("operator"), **settings
    )
    for queue, partitions in app.declared_queues().items():
        operator.declare_queue(queue, partitions=partitions)
    try:
        chosen = queues or app.queues() or ["default"]
        await provision(app, await operator.client(), chosen)
    finally:
        await operator.aclose()
