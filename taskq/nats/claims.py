"""Claim checks: a body too large for one message (over the server's `max_payload`) is
stored in the object store, and a small reference travels in its place (DESIGN §3,
`<PREFIX>_BLOBS`). Readers fetch it back transparently; it is deleted when its task settles.

A reference is `CLAIM | JSON {"bucket", "name", "size"}`; like a sealed body it starts with a
NUL byte, which no JSON body can. The stored object holds the body exactly as it would have
been published: sealed when encryption is on (seal first, then claim: the object store holds
no plaintext either, and a reader opens one way whatever the size).

Task messages and dead letters go to `<PREFIX>_BLOBS` (kept until the task settles; a dead
letter's original is kept with the dead letter); result, progress and workflow values go to
`<PREFIX>_RESULT_BLOBS`, whose objects expire with the results TTL, as the records do.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from taskq.errors import DecodeError, PayloadTooLarge
from taskq.nats.objects import Objects
from taskq.sealing import sealed_subjects
from taskq.settings import Settings
from taskq.topology.names import Names

CLAIM = b"\x00TQC1"
HEADROOM = 1024  # room for the subject, headers and protocol framing around a body


def is_claim(data: bytes) -> bool:
    return data[:1] == b"\x00" and data.startswith(CLAIM)


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
            return cls(str(fields["bucket"]), str(fields["name"]), int(fields["size"]))
        except (ValueError, KeyError, TypeError):
            raise DecodeError("a claim-check reference that cannot be read") from None


class Claims:
    """Checks large bodies in and out of the object store for one connection."""

    def __init__(self, objects: Objects, settings: Settings) -> None:
        self._objects = objects
        names = Names(settings.prefix)
        self._blobs = names.blobs_bucket
        self._kv_blobs = f"{names.blobs_bucket[: -len('_BLOBS')]}_RESULT_BLOBS"
        buckets = (names.results_bucket, names.flows_bucket, names.progress_bucket)
        self._sealed_kv = tuple(f"$KV.{bucket}." for bucket in buckets)
        self._task_subjects = tuple(
            kind for kind in sealed_subjects(settings.prefix) if not kind.startswith("$")
        )
        self._limit = settings.payload_limit
        self._replicas = settings.replicas
        self._results_ttl = settings.results_ttl

    async def check_in(self, subject: str, body: bytes, size: int, max_payload: int) -> bytes:
        """The reference to publish instead of `body` (stored first), or PayloadTooLarge
        when the subject takes no claim checks or the body is over `payload_limit`."""
        bucket, ttl = self._bucket_for(subject)
        if bucket is None or len(body) > self._limit:
            raise PayloadTooLarge(size, max_payload if bucket is None else self._limit)
        claim = Claim(bucket, f"claim.{uuid.uuid4().hex}", len(body))
        await self._objects.put(bucket, claim.name, body, self._replicas, ttl=ttl, raw=True)
        return claim.reference()

    async def check_out(self, reference: bytes) -> tuple[Claim, bytes]:
        """The claim and the body it stands for, as stored (still sealed, if it was)."""
        claim = Claim.parse(reference)
        body = await self._objects.get(claim.bucket, claim.name, raw=True)
        if body is None:
            raise DecodeError(
                f"its body ({claim.size} bytes) was claim-checked as {claim.bucket}/"
                f"{claim.name}, which is missing"
            )
        return claim, body

    async def release(self, claim: Claim) -> None:
        """Delete a settled task's claim-checked body (best effort: a failure leaves one
        object behind, never a task without its body)."""
        await self._objects.delete(claim.bucket, claim.name)

    def _bucket_for(self, subject: str) -> tuple[str | None, float | None]:
        if subject.startswith(self._sealed_kv):
            return self._kv_blobs, self._results_ttl
        if subject.startswith(self._task_subjects):
            return self._blobs, None
        return None, None
