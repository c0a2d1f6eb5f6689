"""What the identity `taskq doctor` runs with may do, found by harmless probes, and which of
the shipped roles (deploy/nats/accounts.conf, docs/security.md) it amounts to.

No probe changes anything: API requests name a stream that does not exist (`<PREFIX>_DOCTOR
_PROBE`: a permitted one is answered "not found"), or the real DLQ with a request that
matches nothing; a stream create carries a name that contradicts its subject (refused by the
server's validation); publishes carry `Nats-Expected-Stream` naming no stream, so a stream
that would store them refuses instead; subscriptions end at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from taskq.doctor.report import Check, ok, warn
from taskq.nats.probes import Probes
from taskq.topology.names import Names

EXPECT_NONE = "Nats-Expected-Stream"  # a stream that would store a probe refuses it


@dataclass(frozen=True)
class Right:
    """One capability: `kind` api (`$JS.API.<target>`), pub or sub; `label` for people."""

    key: str
    label: str
    kind: str
    target: str
    body: Mapping[str, object] | None = None


def rights(names: Names, results: Sequence[str] = ()) -> list[Right]:
    """Every probed capability, for the prefix of `names` and its `results` buckets (the
    default layout's when none are named): a worker's, then the rest. A right probed on
    several buckets is held only when every probe is allowed."""
    buckets = list(results) or [names.results_bucket]
    return [*_working(names), *_on_results(buckets), *_operating(names)]


def _probe(names: Names) -> str:
    return f"{names.prefix.upper()}_DOCTOR_PROBE"  # a stream nobody makes


def _working(names: Names) -> list[Right]:
    probe, p = _probe(names), names.prefix
    pull = {"batch": 1, "no_wait": True}
    return [
        Right("stream_info", "read stream info", "api", f"STREAM.INFO.{probe}"),
        Right("enqueue", "enqueue tasks", "pub", f"{p}.q.doctor-probe.doctor"),
        Right("pull_tasks", "pull tasks", "api", f"CONSUMER.MSG.NEXT.{probe}.doctor", pull),
        Right("consumer_info", "read consumer state", "api", f"CONSUMER.INFO.{probe}.doctor"),
        Right("write_dead_letters", "write dead letters", "pub", f"{p}.dlq.doctor-probe.doctor"),
        Right("write_schedules", "write schedules", "pub", f"{p}.s.doctor-probe.doctor"),
    ]


def _on_results(buckets: list[str]) -> list[Right]:
    """Reading and writing records, on each results bucket."""
    found = []
    for kv in buckets:
        last = {"last_by_subj": f"$KV.{kv}.doctor-probe"}
        found.append(Right("read_results", "read results", "api", f"STREAM.MSG.GET.KV_{kv}", last))
    found += [
        Right("write_results", "write results", "pub", f"$KV.{kv}.doctor-probe") for kv in buckets
    ]
    return found


def _operating(names: Names) -> list[Right]:
    probe, p, dlq = _probe(names), names.prefix, names.dlq_stream
    config = {"name": probe, "subjects": [f"{p}.doctor-probe"]}
    no_dead_letter = {"last_by_subj": f"{p}.dlq.doctor-probe.doctor"}
    consumer = {"stream_name": probe, "config": {"durable_name": "doctor"}}
    contradicting = {"name": f"{probe}_ELSE", "subjects": [f"{p}.doctor-probe"]}
    return [
        Right("create_streams", "create streams", "api", f"STREAM.CREATE.{probe}", contradicting),
        Right(
            "create_consumers",
            "create consumers",
            "api",
            f"CONSUMER.CREATE.{probe}.doctor",
            consumer,
        ),
        Right("update_streams", "update streams", "api", f"STREAM.UPDATE.{probe}", config),
        Right("delete_streams", "delete streams", "api", f"STREAM.DELETE.{probe}"),
        Right("purge_queues", "purge streams", "api", f"STREAM.PURGE.{probe}"),
        Right("pause_queues", "pause queues", "api", f"CONSUMER.PAUSE.{probe}.doctor", {}),
        Right(
            "read_dead_letters", "read dead letters", "api", f"STREAM.MSG.GET.{dlq}", no_dead_letter
        ),
        Right(
            "remove_dead_letters",
            "remove dead letters",
            "api",
            f"STREAM.MSG.DELETE.{dlq}",
            {"seq": 0},
        ),
        Right("cancel_tasks", "cancel tasks", "pub", f"$KV.{names.cancels_bucket}.doctor-probe"),
        Right("watch_tasks", "read tasks as they are published", "sub", f"{p}.q.>"),
        Right("read_replies", "read other clients' replies", "sub", "_INBOX.>"),
    ]


# what the shipped users of deploy/nats/accounts.conf may do, among the rights probed
PRODUCER = frozenset({"stream_info", "enqueue", "read_results"})
WORKER = PRODUCER | {
    "pull_tasks",
    "consumer_info",
    "write_results",
    "write_dead_letters",
    "write_schedules",
}
SHIPPED = {"producer": PRODUCER, "worker": WORKER}


async def probe_rights(
    probes: Probes, names: Names, results: Sequence[str] = ()
) -> list[tuple[Right, bool]]:
    """Each right of `rights(names, results)`, tried: True when the server allowed it."""
    return [(right, await _try(probes, right, names)) for right in rights(names, results)]


async def _try(probes: Probes, right: Right, names: Names) -> bool:
    if right.kind == "sub":
        return await probes.subscribe(right.target)
    if right.kind == "pub":
        headers = {EXPECT_NONE: _probe(names)}
        return (await probes.request(right.target, b"{}", headers)).allowed
    body = json.dumps(right.body).encode() if right.body is not None else b""
    return (await probes.request(f"$JS.API.{right.target}", body)).allowed


def role_of(allowed: set[str], every: set[str]) -> str:
    """The shipped role an identity with `allowed` rights amounts to."""
    if allowed >= every:
        return "operator"
    if {"pull_tasks", "write_results"} <= allowed:
        return "worker"
    return "producer" if "enqueue" in allowed else "none"


def judge_rights(found: list[tuple[Right, bool]]) -> Check:
    """The permissions check: the role, what it may and may not do, and any excess."""
    denied = {r.key for r, yes in found if not yes}  # on any bucket it was probed on
    allowed = {r.key for r, yes in found if yes} - denied
    labels = {r.key: r.label for r, _ in found}
    role = role_of(allowed, set(labels))
    cannot = [labels[k] for k in labels if k not in allowed]
    if role == "operator":
        return ok("permissions", "operator: may do everything probed")
    if role == "none":
        return warn(
            "permissions",
            f"may not enqueue or pull tasks: no taskq role; cannot {', '.join(cannot)}",
            "grant the producer, worker or operator permissions of deploy/nats/accounts.conf",
        )
    extra = sorted(labels[k] for k in allowed - SHIPPED[role])
    missing = sorted(labels[k] for k in SHIPPED[role] - allowed)
    may = ", ".join(labels[k] for k in labels if k in allowed)
    detail = f"{role}: may {may}; cannot {', '.join(cannot)}"
    if extra:
        return warn(
            "permissions",
            f"{detail}; more than the shipped {role} role: can {', '.join(extra)}",
            f"restrict this user to the {role} permissions of deploy/nats/accounts.conf",
        )
    if missing:
        return warn(
            "permissions",
            f"{detail}; a {role} also needs to {', '.join(missing)}",
            f"grant the {role} permissions of deploy/nats/accounts.conf",
        )
    return ok("permissions", detail)
