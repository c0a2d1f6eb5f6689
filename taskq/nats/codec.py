"""The transport's one port for bodies: what it asks of the layer above (taskq.records.codec)
on the way out and on the way in. The transport moves bytes and knows no kinds of record:
whether a body is sealed, for which place, and whether a reference stands in for a body
too large for one message is the codec's to say."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

Headers = Mapping[str, str] | None


class Checked(Protocol):
    """A claim-checked body's stored object, as the codec found it (released once the
    message that carried its reference is settled)."""


class BodyCodec(Protocol):
    """Seals and opens bodies by where they go, and checks large ones in and out."""

    # whether a key is set: without one `seal` returns its body unchanged (an attribute:
    # the transport reads it per publish)
    sealing: bool

    def seal(self, subject: str, body: bytes, headers: Headers) -> bytes:
        """`body` as it is to be stored on `subject`."""
        ...

    def open(self, subject: str, headers: Headers, data: bytes) -> bytes:
        """The plaintext of a body read from `subject`; DecodeError when it does not open."""
        ...

    def keep(self, subject: str, headers: Headers, data: bytes) -> bytes:
        """The plaintext when it opens here, else the bytes as they came."""
        ...

    def is_sealed(self, data: bytes) -> bool: ...

    def is_reference(self, data: bytes) -> bool:
        """Whether `data` is a claim-check reference rather than a body."""
        ...

    async def check_in(
        self,
        subject: str,
        headers: dict[str, str] | None,
        body: bytes,
        size: int,
        max_payload: int,
    ) -> tuple[bytes, dict[str, str] | None]:
        """The reference to publish instead of `body` (`size` bytes with its headers;
        stored first) and the headers to publish it with; PayloadTooLarge when bodies on
        `subject` take none or this one is over the limit."""
        ...

    async def check_out(
        self, reference: bytes, subject: str, headers: Headers
    ) -> tuple[Checked, bytes]:
        """The stored object and the body it holds (still sealed if it was); DecodeError,
        reading nothing, when the reference is not this message's own."""
        ...

    def owned(self, reference: bytes, subject: str, headers: Headers) -> Checked:
        """The object a reference on `subject` names, when it is that message's own."""
        ...

    async def release(self, checked: Checked) -> None:
        """Delete a settled message's stored object (best effort)."""
        ...

    def shares_its_object(self, headers: Headers) -> bool:
        """Whether a message with `headers` reads an object others read too (a periodic
        schedule's firing): then settling it deletes nothing."""
        ...
