"""Claim checks (part of the codec above the transport, taskq.records.codec): a body too
large for one message (over the server's `max_payload`) is stored in the object store
(`<PREFIX>_BLOBS`), and a small reference travels in its place (docs/wire-format.md,
"Large bodies"). Readers fetch it back transparently; it is deleted
when its task settles.

A reference is `CLAIM | JSON {"bucket", "name", "size"}`; like a sealed body it starts with a
NUL byte, which no JSON body can. The stored object holds the body exactly as it would have
been published: sealed when encryption is on (seal first, then claim: the object store holds
no plaintext either, and a reader opens one way whatever the size).

Task messages and dead letters go to `<PREFIX>_BLOBS` (kept until the task settles; a dead
letter's original is kept with the dead letter); result, progress and workflow values go to
`<PREFIX>_RESULT_BLOBS`, whose objects expire with the results TTL, as the records do.

References are bound to their message: anyone allowed to publish on a queue subject can
write a reference, so it is honoured only for the app's own bucket of that kind of body and
an object named `claim.<digest>.<random>`, `<digest>` the first 32 hex digits of the SHA-256
of the place's owner (`taskq.records.places`: the message's `Nats-Msg-Id`, the schedule of a firing,
the key of a KV value). A reference to anything else is `undecodable`, and nothing it names
is read or deleted. Object names hold a digest, never an id.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass

from taskq.errors import DecodeError, PayloadTooLarge
from taskq.nats.objects import Objects
from taskq.records.places import CLAIM as CLAIM
from taskq.records.places import Place
from taskq.records.places import is_claim as is_claim
from taskq.settings import Settings
from taskq.topology.names import Names

_NAME = re.compile(r"claim\.([0-9a-f]{32})\.[0-9a-f]{32}")
_KV_KINDS = frozenset({"result", "workflow", "progress"})


def owner_digest(owner: str) -> str:
    """The part of an object's name that ties it to its owner (never the owner itself)."""
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Claim:
    """Where a claim-checked body is."""

    bucket: str
    name: str
    size: int

    def reference(self) -> bytes:
        return CLAIM + json.dumps(self.__dict__).encode()

    @classmethod
    def parse(cls, data: bytes) -> Claim:
        try:
            fields = json.loads(data[len(CLAIM) :])
            bucket, name, size = fields["bucket"], fields["name"], fields["size"]
        except Exception:  # not JSON, too deep, not an object, a field missing
            raise DecodeError("a claim-check reference that cannot be read") from None
        if not (isinstance(bucket, str) and isinstance(name, str) and type(size) is int):
            raise DecodeError("a claim-check reference with fields of the wrong types")
        return cls(bucket, name, size)


class Claims:
    """Checks large bodies in and out of the object store for one connection."""

    def __init__(self, objects: Objects, settings: Settings) -> None:
        self._objects = objects
        names = Names(settings.prefix)
        self._blobs = names.blobs_bucket
        self._kv_blobs = f"{names.blobs_bucket[: -len('_BLOBS')]}_RESULT_BLOBS"
        self.limit = settings.payload_limit
        self._replicas = settings.replicas
        self._results_ttl = settings.results_ttl

    async def check_in(
        self, place: Place | None, body: bytes, size: int, max_payload: int
    ) -> bytes:
        """The reference to publish instead of `body` (stored first), or PayloadTooLarge
        when the place takes no claim checks or the body is over `payload_limit`."""
        if place is None or place.owner is None or len(body) > self.limit:
            raise PayloadTooLarge(size, max_payload if place is None else self.limit)
        bucket = self._bucket(place)
        claim = Claim(bucket, f"claim.{owner_digest(place.owner)}.{uuid.uuid4().hex}", len(body))
        ttl = self._results_ttl if bucket == self._kv_blobs else None
        await self._objects.put(bucket, claim.name, body, self._replicas, ttl=ttl)
        return claim.reference()

    async def provision(self) -> tuple[str, str]:
        """Create both buckets as their first use would (task bodies; result bodies,
        expiring with the results), for workers that may not create them."""
        await self._objects.ensure(self._blobs, self._replicas)
        await self._objects.ensure(self._kv_blobs, self._replicas, self._results_ttl)
        return self._blobs, self._kv_blobs

    async def check_out(self, reference: bytes, place: Place | None) -> tuple[Claim, bytes]:
        """The claim and the body it stands for, as stored (still sealed, if it was), when
        the reference is this place's own; DecodeError (reading nothing) otherwise."""
        claim = self.owned(reference, place)
        body = await self._objects.get(claim.bucket, claim.name)
        if body is None:
            raise DecodeError(
                f"its body ({claim.size} bytes) was claim-checked as {claim.bucket}/"
                f"{claim.name}, which is missing"
            )
        if len(body) != claim.size:
            raise DecodeError(
                f"claim {claim.bucket}/{claim.name} holds {len(body)} bytes, not {claim.size}"
            )
        return claim, body

    async def release(self, claim: Claim) -> None:
        """Delete a settled task's claim-checked body (best effort: a failure leaves one
        object behind, never a task without its body)."""
        await self._objects.delete(claim.bucket, claim.name)

    def owned(self, reference: bytes, place: Place | None) -> Claim:
        """The claim `reference` makes, when it is this place's own; else DecodeError."""
        claim = Claim.parse(reference)
        self._check(claim, place)
        return claim

    def _check(self, claim: Claim, place: Place | None) -> None:
        if place is None or place.owner is None:
            raise DecodeError("a claim-check reference where none is taken (no message id)")
        if claim.bucket != self._bucket(place):
            raise DecodeError(
                f"a claim-check reference to bucket {claim.bucket[:80]!r}, not this app's "
                f"{self._bucket(place)} (refused: nothing read or deleted)"
            )
        named = _NAME.fullmatch(claim.name)
        if named is None or named.group(1) != owner_digest(place.owner):
            raise DecodeError(
                f"a claim-check reference to {claim.name[:120]!r}, which was not stored for this "
                "message (refused: nothing read or deleted)"
            )

    def _bucket(self, place: Place) -> str:
        return self._kv_blobs if place.kind in _KV_KINDS else self._blobs
