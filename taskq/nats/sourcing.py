"""Streams that copy from streams in another JetStream domain over a leaf connection (edge
sites, docs/edge.md): the source entries, the hub's durable flow-control consumers they
use (ADR-60), and sources added to a stream an earlier step made."""

from __future__ import annotations

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from taskq.errors import NotFound
from taskq.nats.errors import Guard
from taskq.topology.specs import SourceSpec

HEARTBEAT = 1.0  # seconds: the idle heartbeat a sourcing consumer must have (nats-server)
PENDING = 1000  # tasks on their way to a site, unacknowledged by its flow control, at most


def source_config(spec: SourceSpec) -> api.StreamSource:
    """The server's form of a source entry."""
    return api.StreamSource(
        name=spec.name,
        external=api.ExternalStream(api=f"$JS.{spec.domain}.API"),
        consumer=(
            api.StreamConsumerSource(name=spec.consumer, deliver_subject=spec.deliver or "")
            if spec.consumer
            else None
        ),
        subject_transforms=(
            [api.SubjectTransform(src=spec.transform[0], dest=spec.transform[1])]
            if spec.transform
            else None
        ),
    )


class Sourcing:
    """Sourcing administration on one connection (an operator's: `taskq provision`)."""

    def __init__(self, js: JetStreamContext, guard: Guard) -> None:
        self._js = js
        self._guard = guard

    async def domain(self) -> str | None:
        """The JetStream domain of the server this connection reaches (None: none set)."""
        with self._guard:
            return (await self._js.account_info()).domain or None

    async def ensure_consumer(self, stream: str, name: str, deliver: str) -> None:
        """The durable push consumer a site's stream sources `stream` through: flow-control
        acknowledgements, so the work-queue stream drops a message once the site stored it."""
        config = api.ConsumerConfig(
            durable_name=name,
            deliver_subject=deliver,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_policy=api.AckPolicy.FLOW_CONTROL,
            flow_control=True,
            idle_heartbeat=HEARTBEAT,
            max_ack_pending=PENDING,
        )
        with self._guard:
            await self._js.add_consumer(stream, config)

    async def add_sources(self, stream: str, sources: list[SourceSpec]) -> bool:
        """Add `sources` (those it lacks, by name and domain) to `stream`; whether it
        changed. NotFound when the stream does not exist."""
        with self._guard:
            try:
                config = (await self._js.stream_info(stream)).config
            except NotFoundError:
                raise NotFound(f"no stream {stream}") from None
            have = {(s.name, (s.external.api if s.external else "")) for s in config.sources or []}
            new = [source_config(s) for s in sources]
            added = [s for s in new if (s.name, s.external.api if s.external else "") not in have]
            if not added:
                return False
            config.sources = [*(config.sources or []), *added]
            await self._js.update_stream(config)
        return True
