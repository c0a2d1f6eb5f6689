"""The object store: payloads too large for one message (e.g. dead letters' originals)."""

from __future__ import annotations

import contextlib

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError

from taskq.errors import BrokerError, NotFound
from taskq.nats.errors import Guard


class Objects:
    """Object-store operations on one connection."""

    def __init__(self, js: JetStreamContext, guard: Guard) -> None:
        self._js = js
        self._guard = guard

    async def put(self, bucket: str, name: str, data: bytes, replicas: int = 1) -> None:
        """Store `data` under `name` in a bucket (created on first use)."""
        with self._guard:
            try:
                store = await self._js.object_store(bucket)
            except BucketNotFoundError:
                store = await self._js.create_object_store(
                    bucket, api.ObjectStoreConfig(replicas=replicas, storage=api.StorageType.FILE)
                )
            await store.put(name, data)

    async def get(self, bucket: str, name: str) -> bytes | None:
        """The object's bytes, or None when the bucket or object does not exist."""
        try:
            with self._guard:
                store = await self._js.object_store(bucket)
                result = await store.get(name)
        except (NotFound, BrokerError):
            return None
        return bytes(result.data or b"")

    async def delete(self, bucket: str, name: str) -> None:
        with contextlib.suppress(NotFound, BrokerError), self._guard:
            store = await self._js.object_store(bucket)
            await store.delete(name)
