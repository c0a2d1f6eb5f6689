"""The object store: payloads too large for one message (e.g. dead letters' originals)."""

from __future__ import annotations

import contextlib

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError

from taskq.errors import BrokerError, NotFound
from taskq.nats.errors import Guard
from taskq.places import object_context
from taskq.sealing import Sealer


class Objects:
    """Object-store operations on one connection."""

    def __init__(self, js: JetStreamContext, guard: Guard, sealer: Sealer) -> None:
        self._js = js
        self._guard = guard
        self._sealer = sealer  # objects hold users' data (dead letters' originals): sealed

    async def put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        replicas: int = 1,
        *,
        ttl: float | None = None,
        raw: bool = False,
    ) -> None:
        """Store `data` under `name` in a bucket (created on first use, its objects
        expiring after `ttl` seconds if given); sealed unless `raw` (sealed already)."""
        with self._guard:
            try:
                store = await self._js.object_store(bucket)
            except BucketNotFoundError:
                config = api.ObjectStoreConfig(
                    replicas=replicas, storage=api.StorageType.FILE, ttl=ttl
                )
                store = await self._js.create_object_store(bucket, config)
            await store.put(
                name, data if raw else self._sealer.seal(data, object_context(bucket, name))
            )

    async def get(self, bucket: str, name: str, *, raw: bool = False) -> bytes | None:
        """The object's bytes (opened unless `raw`), or None when the bucket or object does
        not exist."""
        try:
            with self._guard:
                store = await self._js.object_store(bucket)
                result = await store.get(name)
        except (NotFound, BrokerError):
            return None
        data = bytes(result.data or b"")
        return data if raw else self._sealer.open(data, object_context(bucket, name))

    async def delete(self, bucket: str, name: str) -> None:
        with contextlib.suppress(NotFound, BrokerError), self._guard:
            store = await self._js.object_store(bucket)
            await store.delete(name)
