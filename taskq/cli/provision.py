"""`taskq provision MODULE:APP`: an operator creates what the app's workers use."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from taskq.cli.common import Context, pass_ctx

if TYPE_CHECKING:
    from taskq.client import Client
    from taskq.workers.provision import Provisioned


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("-q", "--queue", "queues", multiple=True, help="queue to provision (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="what was provisioned, as one object")
@pass_ctx
def provision(ctx: Context, app_spec: str, queues: tuple[str, ...], as_json: bool) -> None:
    """Create (or bring up to date) every stream, consumer and bucket the workers of
    MODULE:APP use, for workers whose NATS user may not create them (the shipped worker
    role). Queues: as `taskq worker` picks them (-q, else the app's). Run it with an
    operator's credentials, again after changing the app's queues or task settings."""
    from taskq.workers.provision import provision as provision_app

    app = ctx.app(app_spec)
    chosen = list(queues or app.queues() or ["default"])

    async def go(client: Client) -> Provisioned:
        return await provision_app(app, client, chosen)

    done = ctx.run(go, app=app)
    if as_json:
        click.echo(json.dumps(done.to_dict()))
        return
    click.echo(
        f"provisioned queue(s) {', '.join(done.queues)}: {len(done.streams)} stream(s), "
        f"{len(done.consumers)} consumer(s), {len(done.buckets)} bucket(s)"
    )
