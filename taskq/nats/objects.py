"""The object store: payloads too large for one message (e.g. dead letters' originals),
stored and read as the bytes given (the codec above seals what holds users' data)."""

from __future__ import annotations

import logging
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import BucketNotFoundError

from taskq.errors import BrokerError, NotFound, NotProvisioned, PermissionDenied
from taskq.nats.errors import Guard
from taskq.retrying import patiently

log = logging.getLogger("taskq.nats")


class Objects:
    """Object-store operations on one connection."""

    def __init__(self, js: JetStreamContext, guard: Guard) -> None:
        self._js = js
        self._guard = guard

    async def ensure(self, bucket: str, replicas: int = 1, ttl: float | None = None) -> Any:
        """The bucket's store, created first if it does not exist (its objects expiring
        after `ttl` seconds if given); `NotProvisioned` when this user may not create it."""
        creating = False
        try:
            with self._guard, self._guard.refusal_expected(f"$JS.API.STREAM.CREATE.OBJ_{bucket}"):
                try:
                    return await self._js.object_store(bucket)
                except BucketNotFoundError:
                    creating = True
                config = api.ObjectStoreConfig(
                    replicas=replicas, storage=api.StorageType.FILE, ttl=ttl
                )
                return await self._js.create_object_store(bucket, config)
        except PermissionDenied:
            if not creating:
                raise
            raise NotProvisioned("object store", bucket) from None

    async def put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        replicas: int = 1,
        *,
        ttl: float | None = None,
    ) -> None:
        """Store `data` under `name` in a bucket (created on first use)."""
        store = await self.ensure(bucket, replicas, ttl)
        with self._guard:
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
        """Delete an object; gone already is fine. A timeout (a busy server) is retried for
        a few seconds, then logged: a failure leaves the object behind, nothing worse."""

        async def once() -> None:
            with self._guard:
                store = await self._js.object_store(bucket)
                await store.delete(name)

        try:
            await patiently(once)
        except NotFound:
            return
        except BrokerError as exc:
            log.warning("object %s/%s not deleted: %s", bucket, name, exc)
