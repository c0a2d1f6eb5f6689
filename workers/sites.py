"""Provisioning edge sites (docs/edge.md): a site's queue streams source the hub's outbox
for that site; the hub's outbox streams, their durable consumers, and the hub's results
and dead letters sourcing each site's. Run by an operator (`taskq provision --site` at a
site, `--sites` at the hub); either side may be unreachable meanwhile: a source waits for
its other side and catches up when it is there."""

from __future__ import annotations

from dataclasses import dataclass, replace

from taskq.app import App
from taskq.client import Client
from taskq.nats.kv import stream as bucket_stream
from taskq.topology.names import check_site
from taskq.topology.specs import (
    SourceSpec,
    dlq_stream,
    queue_stream,
    results_buckets,
    site_source,
    site_stream,
)
from taskq.workers.provision import Provisioned, provision

HUB = "hub"  # the hub's JetStream domain unless told otherwise (`taskq server --domain`)
HUB_CONSUMER = "hub"  # a site's durable consumer the hub sources its results and letters by


@dataclass(frozen=True)
class SitesProvisioned:
    """What edge provisioning made sure of, beside the app's own (`provisioned`)."""

    provisioned: Provisioned
    sourcing: list[str]  # "<stream> <- <source stream>@<domain>"

    def to_dict(self) -> dict[str, object]:
        return {**self.provisioned.to_dict(), "sourcing": self.sourcing}


async def provision_site(
    app: App, client: Client, site: str, queues: list[str], hub: str = HUB
) -> SitesProvisioned:
    """At site `site`: what its workers use, each queue's stream sourcing the hub's
    outbox for this site (tasks the hub sends run here); results and dead letters stay."""
    check_site(site)
    names, settings, connection = client.names, client.settings, client.connection
    sourcing = []
    # first what the hub's sources wait for: a source that finds nothing is retried by the
    # server only after a back-off (10 s, then 20 s, ... up to 2 min)
    await connection.streams.ensure(dlq_stream(names, settings))
    for bucket in results_buckets(names, settings):
        await connection.kv.ensure(bucket)
    for stream in _returned(client):  # the consumers the hub sources them through
        deliver = names.site_return(site, stream)
        await connection.sourcing.ensure_consumer(stream, HUB_CONSUMER, deliver)
        sourcing.append(f"{stream} -> {hub}")
    for queue in queues:
        source = site_source(names, hub, site, queue)
        spec = replace(queue_stream(names, settings, queue), sources=(source,))
        await connection.streams.ensure(spec)
        sourcing.append(f"{spec.name} <- {source.name}@{hub}")
    return SitesProvisioned(await provision(app, client, queues), sourcing)


def _returned(client: Client) -> list[str]:
    """The streams whose messages flow back to the hub: results buckets' and the DLQ."""
    return [bucket_stream(b) for b in client.results.configured] + [client.names.dlq_stream]


async def provision_hub(
    app: App, client: Client, sites: list[str], queues: list[str]
) -> SitesProvisioned:
    """At the hub: the app's own, plus for each site an outbox stream per queue with the
    durable consumer its site sources through, and the results and dead letters sourcing
    each site's (their subjects are the same on both sides)."""
    for site in sites:
        check_site(site)
    names, settings, connection = client.names, client.settings, client.connection
    sourcing = []
    for site in sites:  # first what the sites' sources wait for (see provision_site)
        for queue in queues:
            outbox = site_stream(names, settings, site, queue)
            await connection.streams.ensure(outbox)
            await connection.sourcing.ensure_consumer(
                outbox.name, site, names.site_deliver(site, queue)
            )
            sourcing.append(f"{outbox.name} -> {site}")
    provisioned = await provision(app, client, queues)  # the results and DLQ streams too
    for target in _returned(client):
        sources = [SourceSpec(target, s, HUB_CONSUMER, names.site_return(s, target)) for s in sites]
        await connection.sourcing.add_sources(target, sources)
        sourcing += [f"{target} <- {target}@{s}" for s in sites]
    return SitesProvisioned(provisioned, sourcing)
