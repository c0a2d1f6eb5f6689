"""`taskq provision MODULE:APP`: an operator creates what the app's workers use (and, for
edge sites, what carries tasks to a site and its results back: docs/edge.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from taskq.cli.common import Context, pass_ctx

if TYPE_CHECKING:
    from taskq.client import Client


def _site_list(_ctx: Any, _param: Any, value: str | None) -> list[str]:
    from taskq.errors import ConfigError
    from taskq.topology.names import check_site

    try:
        return [check_site(s.strip()) for s in value.split(",")] if value else []
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("-q", "--queue", "queues", multiple=True, help="queue to provision (repeatable)")
@click.option("--site", metavar="NAME", help="at a site: its queues run what the hub sends it")
@click.option("--hub-domain", default="hub", show_default=True, help="the hub's JetStream domain")
@click.option(
    "--sites", callback=_site_list, metavar="S1,S2", help="at the hub: the sites it sends to"
)
@click.option("--json", "as_json", is_flag=True, help="what was provisioned, as one object")
@pass_ctx
def provision(
    ctx: Context,
    app_spec: str,
    queues: tuple[str, ...],
    site: str | None,
    hub_domain: str,
    sites: list[str],
    as_json: bool,
) -> None:
    """Create (or bring up to date) every stream, consumer and bucket the workers of
    MODULE:APP use, for workers whose NATS user may not create them (the shipped worker
    role). Queues: as `taskq worker` picks them (-q, else the app's). Run it with an
    operator's credentials, again after changing the app's queues or task settings.
    With --site at a site server, or --sites at the hub: edge sites (docs/edge.md)."""
    if site and sites:
        raise click.UsageError("--site is for a site's server, --sites for the hub's: not both")
    if site:
        _site_list(None, None, site)
    app = ctx.app(app_spec)
    chosen = list(queues or app.queues() or ["default"])

    async def go(client: Client) -> Any:
        from taskq.workers.provision import provision as provision_app
        from taskq.workers.sites import provision_hub, provision_site

        if site:
            return await provision_site(app, client, site, chosen, hub_domain)
        if sites:
            return await provision_hub(app, client, sites, chosen)
        return await provision_app(app, client, chosen)

    _report(ctx.run(go, app=app), as_json)


def _report(done: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(done.to_dict()))
        return
    own = getattr(done, "provisioned", done)
    click.echo(
        f"provisioned queue(s) {', '.join(own.queues)}: {len(own.streams)} stream(s), "
        f"{len(own.consumers)} consumer(s), {len(own.buckets)} bucket(s)"
    )
    for line in getattr(done, "sourcing", []):
        click.echo(f"  {line}")
