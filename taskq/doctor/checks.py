"""The deployment checks of `taskq doctor`, each a pure function of the facts gathered
(taskq.doctor.facts): reachable servers, the sync setting, replicas against the cluster's
size, storage headroom, the clocks, and transport security. Permissions are in
taskq.doctor.rights. Thresholds are in docs/operations.md ("Before going live")."""

from __future__ import annotations

from datetime import UTC, datetime

from taskq.doctor.facts import Facts
from taskq.doctor.monitor import Monitored, sync_text
from taskq.doctor.report import Check, fail, ok, warn
from taskq.doctor.transport import judge_transport
from taskq.doctor.versions import judge_versions
from taskq.operate.queue_stats import size
from taskq.topology.names import Names

MONITOR_FIX = "pass --monitor http://HOST:8222 (the server's http port) or set TASKQ_MONITOR_URL"
SYNC_FIX = (
    "set jetstream { sync_interval: always } (`taskq server --sync always`; "
    "docs/operations.md#durability)"
)
HEADROOM = 0.20  # warn when less than this share of a storage limit is free
SKEW_WARN = 1.0  # seconds: schedules, countdowns and expiries drift by it
SKEW_FAIL = 30.0


def deployment(facts: Facts) -> list[Check]:
    """Every check but permissions, in report order."""
    nodes = cluster_size(facts)
    reachable = {s.name: str(s.info.get("version", "?")) for s in facts.servers if not s.error}
    return [
        servers(facts, nodes),
        judge_versions(reachable),
        sync(facts.monitors, nodes),
        replicas(facts, nodes),
        results_layout(facts),
        storage(facts),
        clock(facts),
        judge_transport(facts.settings, facts.info),
    ]


def cluster_size(facts: Facts) -> int | None:
    """Nodes in the JetStream cluster: from `/jsz` when a monitor answered, else from the
    client URLs the servers advertise (None: a cluster that advertises none)."""
    sizes = [m.cluster_size for m in facts.monitors if m.cluster_size]
    if sizes:
        return max(sizes)
    if not facts.info.get("cluster"):
        return 1
    return len(set(facts.info.get("connect_urls") or [])) or None


def servers(facts: Facts, nodes: int | None) -> Check:
    down = [s for s in facts.servers if s.error]
    up = [s for s in facts.servers if not s.error]
    name = facts.info.get("cluster") or "?"
    shape = f"cluster {name} of {nodes or '?'} nodes" if nodes != 1 else "1 node"
    listed = ", ".join(s.url if s.name == s.url else f"{s.url} ({s.name})" for s in up)
    if not all(s.info.get("jetstream") for s in up):
        off = ", ".join(s.url for s in up if not s.info.get("jetstream"))
        return fail("servers", f"JetStream is off on {off}", "start nats-server with -js")
    if down:
        missing = "; ".join(f"{s.url}: {s.error}" for s in down)
        return warn(
            "servers",
            f"{len(down)} of {len(facts.servers)} unreachable ({missing}); up: {listed}",
            "start them, or remove them from --url / TASKQ_URL",
        )
    return ok("servers", f"{listed}; {shape}")


def sync(monitors: list[Monitored], nodes: int | None) -> Check:
    if not monitors:
        return warn("sync", "not checked: sync_interval is visible only on /varz", MONITOR_FIX)
    unread = [m for m in monitors if m.varz is None]
    if unread:
        m = unread[0]
        return warn("sync", f"could not read {m.url}/varz: {m.error}", MONITOR_FIX)
    lazy = [m for m in monitors if not _syncs_always(m)]
    if lazy:
        said = ", ".join(f"{_sync_of(m)} on {m.name}" for m in lazy)
        detail = f"sync_interval {said}: an OS crash or power cut loses acknowledged tasks"
        if nodes == 1:
            return fail("sync", f"{detail} (one node: nothing else holds them)", SYNC_FIX)
        return warn("sync", f"{detail} (replicas help unless every node loses power)", SYNC_FIX)
    names = ", ".join(m.name for m in monitors)
    if nodes is not None and len(monitors) < nodes:
        return warn(
            "sync",
            f"sync_interval always on {names}; {nodes - len(monitors)} of {nodes} nodes not read",
            "pass --monitor once for every node",
        )
    return ok("sync", f"sync_interval always on {names}: fsync before every acknowledgement")


def _syncs_always(monitored: Monitored) -> bool:
    js = monitored.varz.jetstream if monitored.varz else None
    return bool(js and js.config and js.config.sync_always)


def _sync_of(monitored: Monitored) -> str:
    js = monitored.varz.jetstream if monitored.varz else None
    return sync_text(js.config) if js and js.config else "(JetStream off)"


def results_layout(facts: Facts) -> Check:
    """The results buckets on the server against this identity's `results_partitions`:
    buckets of another layout mean producers and workers that disagree, or a change of N
    whose old buckets still hold records (readable until they expire)."""
    if facts.streams is None:
        return warn("results", f"not checked: {facts.streams_error}", "run it as the operator")
    settings = facts.settings
    names = Names(settings.prefix)
    n = settings.results_partitions
    ours = set(names.results_buckets(n))
    found = {s.name[3:] for s in facts.streams if s.name.startswith("KV_")}
    other = sorted(b for b in found if names.is_results_bucket(b) and b not in ours)
    layout = f"results_partitions={n} ({len(ours)} bucket{'s' if n > 1 else ''})"
    if other:
        shown = ", ".join(other[:5]) + (f" (+{len(other) - 5} more)" if len(other) > 5 else "")
        return warn(
            "results",
            f"{layout} here, and buckets of another layout on the server: {shown}; their "
            "records stay readable until results_ttl ends them",
            f"give every producer and worker TASKQ_RESULTS_PARTITIONS={n}; once the old "
            "buckets' records have expired, remove them (`nats kv rm BUCKET`)",
        )
    made = len(ours & found)
    return ok("results", f"{layout}: {made} made, no other layout's buckets")


def replicas(facts: Facts, nodes: int | None) -> Check:
    if nodes is None:
        return warn(
            "replicas", "the cluster's size is unknown (no client URLs advertised)", MONITOR_FIX
        )
    if facts.streams is None:
        return warn("replicas", f"not checked: {facts.streams_error}", "run it as the operator")
    wanted = facts.settings.replicas
    over = [s for s in facts.streams if s.replicas > nodes]
    if over or wanted > nodes:
        named = ", ".join(f"{s.name} R{s.replicas}" for s in over) or f"TASKQ_REPLICAS={wanted}"
        return fail(
            "replicas",
            f"{named} on {nodes} node(s): a stream needs as many nodes as replicas",
            f"use replicas <= {nodes}, or add nodes",
        )
    under = [s for s in facts.streams if s.replicas < 3] if nodes >= 3 else []
    if under or (nodes >= 3 and wanted < 3):
        named = ", ".join(f"{s.name} R{s.replicas}" for s in under[:5])
        named += f" (+{len(under) - 5} more)" if len(under) > 5 else ""
        named = named or f"new streams (TASKQ_REPLICAS={wanted} here)"
        return warn(
            "replicas",
            f"{named} on a {nodes}-node cluster: a node lost stops what it holds alone",
            "set TASKQ_REPLICAS=3; raise existing streams with "
            "`nats stream edit NAME --replicas 3` (or one run as the operator)",
        )
    if not facts.streams:
        prefix = facts.settings.prefix
        return ok(
            "replicas", f"no streams of prefix {prefix} yet; new ones R{wanted} on {nodes} node(s)"
        )
    shown = "/".join(f"R{r}" for r in sorted({s.replicas for s in facts.streams}))
    return ok("replicas", f"{len(facts.streams)} stream(s), {shown}, on {nodes} node(s)")


def storage(facts: Facts) -> Check:
    if facts.account is None:
        return warn(
            "storage", "could not read the account's JetStream usage", "check $JS.API.INFO rights"
        )
    limits = _storage_limits(facts)
    if not limits:
        stored = size(int(facts.account.get("storage") or 0))
        return warn("storage", f"{stored} used; no limit visible (no account limit)", MONITOR_FIX)
    shares = [(max(0.0, 1 - used / limit), what, used, limit) for what, used, limit in limits]
    free, what, used, limit = min(shares)
    detail = f"{what}: {size(used)} of {size(limit)} used, {free:.0%} free"
    if used >= limit:
        return fail("storage", f"{detail}: enqueues fail", "drain, purge, or raise the limit")
    if free < HEADROOM:
        return warn("storage", f"{detail} (under {HEADROOM:.0%})", "raise the limit or drain")
    return ok("storage", detail + ("" if len(limits) == 1 else f" (tightest of {len(limits)})"))


def _storage_limits(facts: Facts) -> list[tuple[str, int, int]]:
    """(what, bytes used, limit) for every storage limit visible."""
    found: list[tuple[str, int, int]] = []
    account = facts.account or {}
    tiers = {"": account, **{f" {k}": v for k, v in (account.get("tiers") or {}).items()}}
    for tier, usage in tiers.items():
        limit = int(((usage or {}).get("limits") or {}).get("max_storage") or -1)
        if limit > 0:
            found.append((f"account{tier}", int(usage.get("storage") or 0), limit))
    for m in facts.monitors:
        js = m.varz.jetstream if m.varz else None
        if js and js.config and js.config.max_storage > 0 and js.stats:
            found.append((f"{m.name} max_file_store", js.stats.storage, js.config.max_storage))
    return found


def clock(facts: Facts) -> Check:
    reading = _server_time(facts)
    if reading is None:
        return warn("clock", "not checked: no stream to read a server time stamp from", MONITOR_FIX)
    server, sent, received = reading
    return judge_skew(server.timestamp() - (sent + received) / 2, (received - sent) / 2)


def _server_time(facts: Facts) -> tuple[datetime, float, float] | None:
    if facts.clock is not None and facts.clock.reply:
        stamp = datetime.fromisoformat(str(facts.clock.reply["ts"]).replace("Z", "+00:00"))
        return stamp, facts.clock.sent, facts.clock.received
    for m in facts.monitors:
        if m.varz is not None and m.varz.now is not None:
            return m.varz.now.astimezone(UTC), m.sent, m.received
    return None


def judge_skew(skew: float, uncertainty: float) -> Check:
    """The clock check for a server clock `skew` seconds ahead of ours (± `uncertainty`)."""
    ahead = "ahead of" if skew >= 0 else "behind"
    detail = f"server clock {abs(skew):.3f} s {ahead} this host's (±{uncertainty:.3f} s)"
    least = abs(skew) - uncertainty
    fix = "run NTP (chrony, systemd-timesyncd) on every host: countdowns and expiries use it"
    if least > SKEW_FAIL:
        return fail("clock", detail, fix)
    if least > SKEW_WARN:
        return warn("clock", detail, fix)
    return ok("clock", detail)
