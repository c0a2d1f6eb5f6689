"""Streams and consumers: creating them from taskq's specs, and reading their state."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError

from taskq.errors import NotFound, NotProvisioned, PermissionDenied, TransientError
from taskq.nats import raw
from taskq.nats.errors import (
    CONSUMER_EXISTS,
    CONSUMER_NOT_FOUND,
    STREAM_NAME_IN_USE,
    Guard,
    reply_error,
)
from taskq.nats.sourcing import source_config
from taskq.nats.types import ConsumerPause, ConsumerState, StreamState
from taskq.retrying import patiently
from taskq.topology.specs import ConsumerSpec, StreamSpec

log = logging.getLogger("taskq")


class Streams:
    """Stream and consumer administration on one connection."""

    def __init__(self, client: Client, js: JetStreamContext, guard: Guard) -> None:
        self._nc = client
        self._js = js
        self._guard = guard
        self._warned: set[str] = set()  # streams whose kept schedules were warned about

    def _warn_schedules_stay(self, stream: str) -> None:
        """Once per stream and connection: its schedules stay on, and so do roll-ups."""
        if stream not in self._warned:
            self._warned.add(stream)
            log.warning(
                "stream %s was made with message schedules on (an earlier taskq): the server "
                "keeps roll-ups on with them, so a producer can purge it; recreate it to lock "
                "it (docs/security.md)",
                stream,
            )

    async def ensure(self, spec: StreamSpec) -> None:
        """Create the stream, or update it when its config drifted from `spec`. Settings
        the server cannot turn off once on (message schedules, message TTLs) stay on.

        It looks first, so a user without the right to create streams (the shipped worker
        role) goes on with streams an operator provisioned, and is told in one line
        (`NotProvisioned`) when one is missing."""
        config = stream_config(spec)
        old = await self._config_of(spec.name)
        if old is None:
            old = await self._create(spec.name, config)
            if old is None:
                return
        config.allow_msg_ttl = config.allow_msg_ttl or old.allow_msg_ttl or None
        config.sources = config.sources or old.sources  # an edge site's: provision's to set
        if old.allow_msg_schedules and not config.allow_msg_schedules:
            config.allow_msg_schedules = True
            self._warn_schedules_stay(spec.name)
        if config.allow_msg_schedules:  # the server turns roll-ups on with schedules
            config.allow_rollup_hdrs = old.allow_rollup_hdrs
        if _drifted(config, old):  # only then: a worker's role may not update streams
            await self._update(spec.name, config)

    async def _config_of(self, name: str) -> api.StreamConfig | None:
        try:
            return (await patiently(lambda: self._info(name))).config
        except NotFound:
            return None

    async def _create(self, name: str, config: api.StreamConfig) -> api.StreamConfig | None:
        """Create the stream; None once created, or the config of the stream another
        process created meanwhile (to compare with ours)."""
        try:
            with self._guard, self._guard.refusal_expected(f"$JS.API.STREAM.CREATE.{name}"):
                try:
                    await self._js.add_stream(config)
                    return None
                except BadRequestError as exc:
                    if exc.err_code != STREAM_NAME_IN_USE:
                        raise
        except PermissionDenied:
            raise NotProvisioned("stream", name) from None
        return (await self._info(name)).config

    async def _update(self, name: str, config: api.StreamConfig) -> None:
        """Apply a changed config; a role that may not (a worker's: docs/security.md) warns
        and goes on with the stream as the server has it, for an operator to apply."""
        try:
            with self._guard:
                await self._js.update_stream(config)
        except PermissionDenied:
            log.warning(
                "stream %s differs from this process's settings, and its NATS user may not "
                "change it: run `taskq provision` with an operator's credentials to apply them",
                name,
            )

    async def ensure_consumer(self, spec: ConsumerSpec) -> None:
        """Create a durable consumer, or update it with the whole intended config when it
        differs; a consumer as intended is left alone (a user without the right to create
        consumers, the shipped worker role, uses what an operator provisioned).

        An update leaves a pause in place: the config sent has no `pause_until`, and
        nats-server keeps the consumer's own then (measured on 2.15.1; a worker starting on
        a paused queue must not resume it, tests/test_queue_control.py).
        """
        config = consumer_config(spec)
        old = await self._consumer_config(spec.stream, spec.durable)
        if old is not None and not _drifted(config, old):
            return
        try:
            with self._guard, self._guard.refusal_expected(*_create_subjects(spec)):
                await self._js.add_consumer(spec.stream, config)
        except PermissionDenied:
            if old is None:
                raise NotProvisioned("consumer", f"{spec.stream} {spec.durable}") from None
            log.warning(
                "consumer %s of stream %s differs from this process's settings, and its NATS "
                "user may not change it: run `taskq provision` with an operator's credentials",
                spec.durable,
                spec.stream,
            )

    async def _consumer_config(self, stream: str, durable: str) -> api.ConsumerConfig | None:
        try:
            return (await self._consumer_info(stream, durable)).config
        except NotFound:
            return None

    async def _consumer_info(self, stream: str, durable: str) -> api.ConsumerInfo:
        async def read() -> api.ConsumerInfo:
            with self._guard:
                info: api.ConsumerInfo = await self._js.consumer_info(stream, durable)
            return info

        return await patiently(read)

    async def create_consumer(self, spec: ConsumerSpec, paused_until: datetime | None) -> None:
        """Create a durable consumer (paused until `paused_until`) only if it does not exist.

        Unlike `ensure_consumer` an existing consumer is left as it is: the workers' config
        (ack_wait, max_deliver from their tasks) must not be replaced by a guess.
        """
        if await self._consumer_config(spec.stream, spec.durable) is not None:
            return
        config = consumer_config(spec).as_dict()
        if paused_until is not None:
            config["pause_until"] = rfc3339(paused_until)
        body = {"stream_name": spec.stream, "config": config, "action": "create"}
        what = f"CONSUMER.CREATE.{spec.stream}.{spec.durable}"
        try:
            with self._guard.refusal_expected(f"$JS.API.{what}"):
                reply = await patiently(lambda: raw.request(self._nc, self._guard, what, body))
        except PermissionDenied:
            raise NotProvisioned("consumer", f"{spec.stream} {spec.durable}") from None
        error = reply_error(reply, "consumer create")
        if error is not None and error.code != CONSUMER_EXISTS:
            raise error

    async def pause(
        self, stream: str, durable: str, until: datetime | None
    ) -> ConsumerPause | None:
        """Hold back the consumer's deliveries until `until` (None: resume now); None when
        the consumer does not exist (a missing stream raises NotFound).

        While paused, pull requests wait and end with 408 at their expiry. A resume does not
        wake requests already waiting (nats-server 2.15.1): they are served once re-sent.
        """

        async def send() -> api.ConsumerPause:
            with self._guard:
                if until is None:
                    return await self._js.resume_consumer(stream, durable)
                return await self._js.pause_consumer(stream, durable, rfc3339(until))

        try:
            reply = await patiently(send)
        except NotFound as exc:
            if exc.code == CONSUMER_NOT_FOUND:
                return None
            raise
        paused = bool(reply.paused)
        return ConsumerPause(paused, moment(reply.pause_until) if paused else None)

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
            msg_ttl=bool(info.config.allow_msg_ttl),
        )

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState:
        info = await self._consumer_info(stream, durable)
        return ConsumerState(
            name=durable,
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
            waiting=info.num_waiting or 0,
            ack_wait=float(info.config.ack_wait or 0),
            max_deliver=int(info.config.max_deliver or -1),
            paused=bool(info.paused),
            # the config keeps an expired pause's time: only `paused` says it still holds
            pause_until=moment(info.config.pause_until) if info.paused else None,
        )

    async def consumer_names(self, stream: str) -> list[str]:
        """The names of `stream`'s consumers (a page of up to 1,024: plenty for a queue's
        consumer and its lanes); NotFound when the stream does not exist."""
        reply = await patiently(
            lambda: raw.request(self._nc, self._guard, f"CONSUMER.NAMES.{stream}", {"offset": 0})
        )
        error = reply_error(reply, "list consumers")
        if error is not None:
            if error.status == 404:
                raise NotFound(str(error), error.code, 404)
            raise error
        return sorted(reply.get("consumers") or [])

    async def listing(self, subject: str | None = None) -> dict[str, tuple[str, ...]]:
        """Every stream's configured subjects, by stream name; with `subject` (a filter like
        `taskq.>`) only the streams whose subjects overlap it, which the server selects
        cheaply however many streams the account has. Read a page (256) at a time; read
        again, through an election, while a cluster's stream does not answer (a node just
        restarted): every caller (a cancel, `taskq queues`) needs the whole listing."""
        return await patiently(lambda: self._listing(subject))

    async def _listing(self, subject: str | None) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        offset = 0  # by what the pages held: a name seen twice must not hold the offset back
        while True:
            reply = await self._list_page(offset, subject)
            page = reply.get("streams") or []
            if reply.get("missing"):  # a cluster's stream that did not answer in time
                raise TransientError(
                    f"{len(reply['missing'])} stream(s) did not answer the listing"
                )
            for info in page:
                config = info.get("config") or {}
                if config.get("name"):
                    found[config["name"]] = tuple(config.get("subjects") or ())
            offset += len(page)
            if not page or offset >= int(reply.get("total", 0)):
                return found

    async def names(self, subject: str | None = None) -> list[str]:
        """Every stream's name (with `subject`, those whose subjects overlap it): the
        names-only listing, which roles that may not read stream configs may ask for; read
        again through an election, as `listing` is."""
        return await patiently(lambda: self._names(subject))

    async def _names(self, subject: str | None) -> list[str]:
        found: list[str] = []
        while True:
            reply = await self._list_page(len(found), subject, "STREAM.NAMES")
            page = [name for name in reply.get("streams") or [] if isinstance(name, str)]
            found += page
            if not page or len(found) >= int(reply.get("total", 0)):
                return list(dict.fromkeys(found))

    async def _list_page(
        self, offset: int, subject: str | None, what: str = "STREAM.LIST"
    ) -> dict[str, Any]:
        """One page of a stream listing (`STREAM.LIST`, or `STREAM.NAMES`: names only); the
        whole listing is what its caller retries, so a page is asked once."""
        body: dict[str, Any] = {"offset": offset}
        if subject:
            body["subject"] = subject
        reply = await raw.request(self._nc, self._guard, what, body)
        error = reply_error(reply, "list streams")
        if error is not None:
            raise error
        return reply

    async def leader(self, stream: str) -> str | None:
        """The server name leading `stream` in a cluster (None on a single server)."""
        info = await patiently(lambda: self._info(stream))
        cluster = getattr(info, "cluster", None)
        return getattr(cluster, "leader", None) if cluster is not None else None

    async def account_storage(self) -> tuple[int, int | None]:
        """(bytes the account stores in all its streams, its storage limit or None when it
        has none of its own; a server's `max_file_store` is not visible to clients)."""

        async def read() -> api.AccountInfo:
            with self._guard:
                return await self._js.account_info()

        info = await patiently(read)
        limit = info.limits.max_storage if info.limits else None
        return int(info.storage or 0), (int(limit) if limit and limit > 0 else None)

    async def delete(self, stream: str) -> None:
        with self._guard:
            await self._js.delete_stream(stream)

    async def _info(self, stream: str, subjects_filter: str | None = None) -> api.StreamInfo:
        with self._guard:
            return await self._js.stream_info(stream, subjects_filter=subjects_filter)


def rfc3339(moment: datetime) -> str:
    """A time as the JetStream API takes it (UTC, `Z`); a naive time is taken as UTC."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat().replace("+00:00", "Z")


def moment(text: str | None) -> datetime | None:
    """An RFC 3339 time from the JetStream API (nanoseconds cut to micro), or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


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
        allow_msg_counter=True if spec.counters else None,
        allow_atomic=True if spec.atomic else None,
        max_msgs_per_subject=spec.max_msgs_per_subject,
        discard=api.DiscardPolicy.NEW if spec.refuse_when_full else api.DiscardPolicy.OLD,
        discard_new_per_subject=spec.refuse_when_full,
        max_msg_size=spec.max_msg_size,
        max_bytes=spec.max_bytes,
        max_msgs=spec.max_msgs,
        sources=[source_config(s) for s in spec.sources] or None,
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


def _create_subjects(spec: ConsumerSpec) -> tuple[str, ...]:
    """The subjects nats-py may send a durable consumer's create to (it picks one by the
    server's version and the filter)."""
    named = f"$JS.API.CONSUMER.CREATE.{spec.stream}.{spec.durable}"
    filtered = (f"{named}.{spec.filter_subject}",) if spec.filter_subject else ()
    return (f"$JS.API.CONSUMER.DURABLE.CREATE.{spec.stream}.{spec.durable}", named, *filtered)


def _drifted(
    wanted: api.StreamConfig | api.ConsumerConfig, old: api.StreamConfig | api.ConsumerConfig
) -> bool:
    """Whether any setting taskq sends differs from the stream's (or consumer's)."""
    have = old.as_dict()
    return any(have.get(key) != value for key, value in wanted.as_dict().items())
