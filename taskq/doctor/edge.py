"""`taskq doctor` at an edge hub or site (docs/edge.md): this server runs nats-server 2.14 or
later (durable sourcing), and every source across the leaf connection is in contact (a
site's queues sourcing the hub's outboxes, a hub's results and dead letters sourcing each
site's). A durable source heartbeats every second, so one silent for longer than
`SILENT_AFTER` means the link (or the other side) is down; one that ever ran also proves
the other side runs 2.14+, which its flow-control consumer needs. Read from this server's
own stream info: no request crosses the leaf, so the shipped least-privilege leaf users
suffice. Shown only where there is an edge topology: a JetStream domain, or sources of
another domain."""

from __future__ import annotations

from dataclasses import dataclass

from taskq.doctor.facts import Facts, StreamSeen
from taskq.doctor.report import Check, fail, ok, warn
from taskq.doctor.versions import Version, parse_version

DURABLE_SOURCING = Version(2, 14, 0)
# From 2.15.0 a durable source whose reset request timed out (a cut link) watches its
# deliver subject and resets again at the first message; the consumer can push the waiting
# messages between that reset and its answer, and the source counts them as received: it
# drops their redelivery and its flow-control answer acknowledges them (docs/edge.md,
# "Known issue"). No release fixes it yet: every later one is warned of until one does.
RESET_RACE = Version(2, 15, 0)
SILENT_AFTER = 10.0  # seconds without contact from a source's other side: the link is down
NANOS = 1e9


@dataclass(frozen=True)
class SourceSeen:
    """One stream's source in another domain, as this server reports it."""

    stream: str
    domain: str
    active: float | None  # seconds since its other side was last heard (None: never)
    error: str | None


@dataclass(frozen=True)
class EdgeSeen:
    domain: str | None
    sources: list[SourceSeen]


def gather_edge(facts: Facts) -> EdgeSeen | None:
    """The edge facts, from the stream info doctor read already; None where the server is
    part of no edge topology."""
    domain = (facts.account or {}).get("domain") or None
    sources = [s for stream in facts.streams or [] for s in _sources(stream)]
    if not (domain or sources):
        return None
    return EdgeSeen(domain, sources)


def _sources(stream: StreamSeen) -> list[SourceSeen]:
    found = []
    for source in stream.sources:
        api = str((source.get("external") or {}).get("api") or "")
        if not (api.startswith("$JS.") and api.endswith(".API")):
            continue
        active = int(source.get("active") or -1)
        error = (source.get("error") or {}).get("description")
        other = api[len("$JS.") : -len(".API")]
        seconds = active / NANOS if active >= 0 else None
        found.append(SourceSeen(stream.name, other, seconds, error))
    return found


def judge_edge(seen: EdgeSeen, version: str) -> Check:
    """The edge check: this server's version, then each source's contact."""
    here = parse_version(version)
    if here is not None and here < DURABLE_SOURCING:
        return fail(
            "edge",
            f"this server runs nats-server {version}: edge sites need {DURABLE_SOURCING}+ "
            "(durable sourcing: a hub deletes a task only once its site stored it)",
            f"upgrade to nats-server {DURABLE_SOURCING} or later",
        )
    for source in seen.sources:
        if source.error or source.active is None or source.active > SILENT_AFTER:
            heard = "never" if source.active is None else f"{source.active:.0f} s ago"
            why = f": {source.error}" if source.error else ""
            return fail(
                "edge",
                f"{source.stream} has no contact with {source.domain} (last heard {heard}"
                f"{why}): the leaf connection or {source.domain} is down, or {source.domain} "
                f"runs a nats-server older than {DURABLE_SOURCING}",
                f"check the leaf connection to {source.domain} and that it runs "
                f"{DURABLE_SOURCING}+ (taskq provision there too)",
            )
    others = sorted({s.domain for s in seen.sources})
    if not others:
        return ok("edge", f"domain {seen.domain}: no site or hub provisioned here yet")
    contact = (
        f"domain {seen.domain or '-'}: in contact with {', '.join(others)} "
        f"({len(seen.sources)} source(s)), nats-server {DURABLE_SOURCING}+ on each side"
    )
    if here is not None and here >= RESET_RACE:
        return warn(
            "edge",
            f"{contact}; but this server runs nats-server {version}, whose durable sources "
            "can skip the messages in flight when a cut link returns (tasks sent to a "
            "site lost, results left at the site): docs/edge.md, known issue",
            "after a cut, treat a site task's ResultTimeout as possibly lost (send an "
            "idempotent task again) and read a result missing at the hub at its site",
        )
    return ok("edge", contact)
