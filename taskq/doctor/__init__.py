"""`taskq doctor`: a deployment checked as an operator would before going live — servers
and their versions, the sync setting, replicas, storage, clocks, transport security, the
shipped passwords, and what the identity in use may do. Nothing is changed on the server
(docs/operations.md, "Before going live: taskq doctor")."""

from __future__ import annotations

from taskq.client import Client
from taskq.doctor.checks import deployment
from taskq.doctor.credentials import judge_shipped, try_shipped
from taskq.doctor.edge import gather_edge, judge_edge
from taskq.doctor.facts import gather
from taskq.doctor.report import Check, worst
from taskq.doctor.rights import judge_rights, probe_rights
from taskq.errors import ConnectError
from taskq.settings import Settings

__all__ = ["Check", "diagnose", "worst"]


def unreachable(url: str, exc: ConnectError) -> Check:
    """The one check of a doctor that reached no server."""
    detail = str(exc).split(": start one")[0]  # its own fix is the check's
    return Check("servers", "fail", detail, f"start one with `taskq server`, or check {url}")


async def diagnose(settings: Settings, monitors: list[str]) -> list[Check]:
    """Every check, in report order; with no server answering at all, one failed check
    saying so (a report, as every other finding is: its exit is 1)."""
    try:
        client = await Client.connect(settings)
    except ConnectError as exc:
        return [unreachable(settings.url, exc)]
    try:
        facts = await gather(client, monitors)
        edge = gather_edge(facts)
        found = await probe_rights(
            client.connection.probes, client.names, client.results.configured
        )
        url = client.connection.probes.connected_url()
    finally:
        await client.close()
    shipped = await try_shipped(settings, facts.info, url, facts.monitors)
    version = str(facts.info.get("version", ""))
    at_edge = [judge_edge(edge, version)] if edge is not None else []
    return [*deployment(facts), *at_edge, judge_shipped(shipped), judge_rights(found)]
