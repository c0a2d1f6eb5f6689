"""Streams and consumers: creating them from taskq's specs, and reading their state."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError

from taskq.errors import NotFound
from taskq.nats.errors import STREAM_NAME_IN_USE, Guard
from taskq.nats.types import ConsumerState, StreamState
from taskq.retrying import patiently
from taskq.topology.specs import ConsumerSpec, StreamSpec


class Streams:
    """Stream and consumer administration on one connection."""

    def __init__(self, client: Client, js: JetStreamContext, guard: Guard) -> None:
        self._nc = client
        self._js = js
        self._guard = guard

    async def ensure(self, spec: StreamSpec) -> None:
        """Create the stream, or update it when its config drifted from `spec`."""
        config = stream_config(spec)
        with self._guard:
            try:
                await self._js.add_stream(config)
            except BadRequestError as exc:
                if exc.err_code != STREAM_NAME_IN_USE:
                    raise
                await self._js.update_stream(config)

    async def ensure_consumer(self, spec: ConsumerSpec) -> None:
        """Create or update a durable consumer with the whole intended config."""
        with self._guard:
            await self._js.add_consumer(spec.stream, consumer_config(spec))

    async def subjects(self, stream: str) -> tuple[str, ...] | None:
        """The configured subjects of `stream`, or None when it does not exist."""
        try:
            info = await patiently(lambda: self._info(stream))
        except NotFound:
            return None
        return tuple(info.config.subjects or ())

    async def state(self, stream: str, subjects_filter: str | None = None) -> StreamState:
        """A stream's counts; with `subjects_filter`, message counts per matching subject."""
        info = await patiently(lambda: self._info(stream, subjects_filter))
        state = info.state
        return StreamState(
            name=stream,
            messages=state.messages,
            bytes=state.bytes,
            first_seq=state.first_seq,
            last_seq=state.last_seq,
            consumers=state.consumer_count,
            subjects=dict(getattr(state, "subjects", None) or {}),
            config_subjects=tuple(info.config.subjects or ()),
            replicas=int(info.config.num_replicas or 1),
        )

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState:
        async def read() -> api.ConsumerInfo:
            with self._guard:
                info: api.ConsumerInfo = await self._js.consumer_info(stream, durable)
            return info

        info = await patiently(read)
        return ConsumerState(
            name=durable,
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
            waiting=info.num_waiting or 0,
            ack_wait=float(info.config.ack_wait or 0),
            max_deliver=int(info.config.max_deliver or -1),
        )

    async def listing(self) -> dict[str, tuple[str, ...]]:
        """Every stream's configured subjects, by stream name (one listing request)."""

        async def read() -> list[api.StreamInfo]:
            with self._guard:
                return await self._js.streams_info()

        infos = await patiently(read)
        return {i.config.name: tuple(i.config.subjects or ()) for i in infos if i.config.name}

    async def leader(self, stream: str) -> str | None:
        """The server name leading `stream` in a cluster (None on a single server)."""
        info = await patiently(lambda: self._info(stream))
        cluster = getattr(info, "cluster", None)
        return getattr(cluster, "leader", None) if cluster is not None else None

    async def delete(self, stream: str) -> None:
        with self._guard:
            await self._js.delete_stream(stream)

    async def _info(self, stream: str, subjects_filter: str | None = None) -> api.StreamInfo:
        with self._guard:
            return await self._js.stream_info(stream, subjects_filter=subjects_filter)


def stream_config(spec: StreamSpec) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        description=spec.description or None,
        subjects=list(spec.subjects),
        retention=(
            api.RetentionPolicy.WORK_QUEUE
            if spec.retention == "workqueue"
            else api.RetentionPolicy.LIMITS
        ),
        storage=api.StorageType.FILE,
        num_replicas=spec.replicas,
        max_age=spec.max_age,
        duplicate_window=spec.duplicate_window,
        allow_msg_schedules=True if spec.schedules else None,
        allow_msg_ttl=True if spec.msg_ttl else None,
        allow_direct=True,
    )


def consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=spec.durable,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait,
        max_deliver=spec.max_deliver,
        max_ack_pending=spec.max_ack_pending,
        filter_subject=spec.filter_subject or None,
        max_waiting=512,
    )
