"""`taskq doctor` at an edge hub or site (docs/edge.md): the server and the other side run
nats-server 2.14 or later (durable sourcing), and the leaf connection is up (the other
side's JetStream answers through it). Shown only where there is something of an edge
topology: a JetStream domain, a hub's outbox streams, or queue streams sourcing a hub."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.client import Client
from taskq.doctor.facts import Facts
from taskq.doctor.report import Check, fail, ok
from taskq.doctor.versions import Version, parse_version
from taskq.nats.probes import Probe

DURABLE_SOURCING = Version(2, 14, 0)
API_LEVEL = 4  # the JetStream API level nats-server 2.14 answers (durable sourcing)
ANSWER_WITHIN = 2.0  # seconds the other side's JetStream has to answer through the leaf


@dataclass(frozen=True)
class EdgeSeen:
    """What doctor learned of the edge: this server's domain, the sites a hub sends to, the
    hubs a site's queues source from, and each other side's `$JS.<domain>.API.INFO`."""

    domain: str | None
    sites: list[str]
    hubs: list[str]
    answers: dict[str, Probe]


async def gather_edge(client: Client, facts: Facts) -> EdgeSeen | None:
    """The edge facts, or None where the server is part of no edge topology."""
    domain = (facts.account or {}).get("domain") or None
    streams = [s.name for s in facts.streams or []]
    outbox = f"{client.settings.prefix.upper()}_OUT_"
    sites = sorted(
        {n[len(outbox) :].split("_", 1)[0].lower() for n in streams if n.startswith(outbox)}
    )
    hubs = await _hubs(client, streams)
    if not (domain or sites or hubs):
        return None
    probes = client.connection.probes
    answers = {
        other: await probes.request(f"$JS.{other}.API.INFO", timeout=ANSWER_WITHIN)
        for other in [*sites, *hubs]
    }
    return EdgeSeen(domain, sites, hubs, answers)


async def _hubs(client: Client, streams: list[str]) -> list[str]:
    """The domains the queue streams source from (a site's hub)."""
    queue = f"{client.settings.prefix.upper()}_Q_"
    found: set[str] = set()
    for name in (n for n in streams if n.startswith(queue)):
        reply = (await client.connection.probes.api(f"STREAM.INFO.{name}")).reply or {}
        for source in (reply.get("config") or {}).get("sources") or []:
            api = str((source.get("external") or {}).get("api") or "")
            if api.startswith("$JS.") and api.endswith(".API"):
                found.add(api[len("$JS.") : -len(".API")])
    return sorted(found)


def judge_edge(seen: EdgeSeen, version: str) -> Check:
    """The edge check: versions first, then each leaf."""
    here = parse_version(version)
    if here is not None and here < DURABLE_SOURCING:
        return fail(
            "edge",
            f"this server runs nats-server {version}: edge sites need {DURABLE_SOURCING}+ "
            "(durable sourcing: a hub deletes a task only once its site stored it)",
            f"upgrade to nats-server {DURABLE_SOURCING} or later",
        )
    for other, probe in sorted(seen.answers.items()):
        reply = probe.reply or {}
        if not reply or "error" in reply:
            return fail(
                "edge",
                f"{other} does not answer through the leaf connection: tasks for a site wait "
                "at the hub, results wait at the site",
                f"check the leaf connection to {other} (taskq server --hub/--leafnodes-port)",
            )
        level = int((reply.get("api") or {}).get("level") or 0)
        if level < API_LEVEL:
            return fail(
                "edge",
                f"{other} answers JetStream API level {level}: older than nats-server "
                f"{DURABLE_SOURCING} (durable sourcing)",
                f"upgrade {other} to nats-server {DURABLE_SOURCING} or later",
            )
    role = f"hub of {', '.join(seen.sites)}" if seen.sites else f"site of {', '.join(seen.hubs)}"
    if not seen.answers:
        role = f"domain {seen.domain}: no site or hub provisioned yet"
    return ok("edge", f"{role}: leaf up, nats-server {DURABLE_SOURCING}+ on each side")
