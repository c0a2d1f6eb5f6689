"""The codec of one client's bodies, above the transport (the `BodyCodec` taskq.nats asks):
encryption at rest and claim checks in one place. Users' data is sealed on its way out and
opened on its way in, bound to its place (taskq.records.places: which subjects hold users'
data, and the context each is sealed for); a body over the server's `max_payload` is stored
in the object store and a reference bound to its message travels instead
(taskq.records.claims). The rest of taskq sees plaintext, and the transport only bytes."""

from __future__ import annotations

import uuid

from taskq.nats import Connection
from taskq.nats.codec import Checked, Headers
from taskq.nats.objects import Objects
from taskq.records.claims import Claim, Claims
from taskq.records.envelope import MSG_ID
from taskq.records.places import Places, Seals, is_claim, object_context, shares_its_object
from taskq.records.sealing import is_sealed
from taskq.settings import Settings


class Codec:
    """Sealing by place and claim checks for one prefix and key (one per connection)."""

    def __init__(self, settings: Settings, objects: Objects) -> None:
        self.sealer = settings.sealer()
        self.sealing = self.sealer.active
        self.places = Places(settings.prefix)
        self.seals = Seals(self.sealer, self.places)
        self.claims = Claims(objects, settings)
        self._objects = objects

    def seal(self, subject: str, body: bytes, headers: Headers) -> bytes:
        return self.seals.seal(subject, body, headers)

    def open(self, subject: str, headers: Headers, data: bytes) -> bytes:
        return self.seals.open(subject, headers, data)

    def keep(self, subject: str, headers: Headers, data: bytes) -> bytes:
        return self.seals.keep(subject, headers, data)

    def is_sealed(self, data: bytes) -> bool:
        return is_sealed(data)

    def is_reference(self, data: bytes) -> bool:
        return is_claim(data)

    async def check_in(
        self,
        subject: str,
        headers: dict[str, str] | None,
        body: bytes,
        size: int,
        max_payload: int,
    ) -> tuple[bytes, dict[str, str] | None]:
        """The reference, and the headers with a message id added when a task or a dead
        letter had none (the id is the claim's owner)."""
        place = self.places.at(subject, headers)
        if place is not None and place.owner is None and place.kind in ("task", "dead"):
            headers = {**(headers or {}), MSG_ID: f"claim.{uuid.uuid4().hex}"}
            place = self.places.at(subject, headers)
        return await self.claims.check_in(place, body, size, max_payload), headers

    async def check_out(
        self, reference: bytes, subject: str, headers: Headers
    ) -> tuple[Checked, bytes]:
        return await self.claims.check_out(reference, self.places.at(subject, headers))

    def owned(self, reference: bytes, subject: str, headers: Headers) -> Checked:
        return self.claims.owned(reference, self.places.at(subject, headers))

    async def release(self, checked: Checked) -> None:
        assert isinstance(checked, Claim)
        await self.claims.release(checked)

    def shares_its_object(self, headers: Headers) -> bool:
        return shares_its_object(headers)

    async def put_object(self, bucket: str, name: str, data: bytes, replicas: int) -> None:
        """Store users' data (a dead letter's original) as an object, sealed for it."""
        sealed = self.sealer.seal(data, object_context(bucket, name))
        await self._objects.put(bucket, name, sealed, replicas)

    async def get_object(self, bucket: str, name: str) -> bytes | None:
        """An object `put_object` stored, opened; None when it does not exist."""
        data = await self._objects.get(bucket, name)
        return None if data is None else self.sealer.open(data, object_context(bucket, name))


async def connect(settings: Settings, name: str = "taskq") -> tuple[Connection, Codec]:
    """A connection whose bodies go through this settings' codec, and that codec."""
    connection = await Connection.connect(settings, name, lambda o: Codec(settings, o))
    codec = connection.codec
    assert isinstance(codec, Codec)
    return connection, codec
