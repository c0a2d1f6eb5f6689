"""Encryption at rest: the bodies taskq stores for users (task messages, result records,
progress, workflow state, dead letters) sealed with AES-256-GCM before they leave the
process, so stream and KV bytes on the server hold no plaintext (docs/wire-format.md).

A sealed body is `MAGIC | key id (4 bytes) | nonce (12 bytes) | ciphertext+tag`. The magic
starts with a NUL byte, which no JSON body can, so sealed and plaintext bodies are told apart
without a header. The key id (the first 4 bytes of the key's SHA-256) picks the key among the
current and old ones: rotation is adding a new key and keeping the old ones until nothing
sealed with them is left.

The additional data is the 9-byte head (magic and key id) followed by the body's *context*:
what kind of body it is and where it is stored (`taskq.records.places`), so a body copied under
another key, subject or kind does not open. Bodies sealed by earlier versions (`\0TQS1`,
bound to nothing) open only where `open_legacy_seals` allows it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os

from taskq.errors import ConfigError, DecodeError

MAGIC = b"\x00TQS2"  # bound to its context (this version)
LEGACY_MAGIC = b"\x00TQS1"  # bound to nothing: opened only when allowed
KEY_ID = 4
NONCE = 12
TAG = 16
HEAD = len(MAGIC) + KEY_ID + NONCE
KEY_SIZE = 32
LEGACY_REFUSED = (
    "sealed in the \\0TQS1 format, which binds a body to nothing (a copy opens anywhere); "
    "this process opens it only with open_legacy_seals (TASKQ_OPEN_LEGACY_SEALS=1)"
)
PLAINTEXT_REFUSED = (
    "a plaintext task message, and this app seals its tasks (an encryption key is set, "
    "allow_plaintext is not)"
)


def parse_key(value: bytes | str) -> bytes:
    """A 32-byte key from raw bytes or a URL-safe base64 string; anything else is a
    ConfigError that never shows the value."""
    if isinstance(value, bytes) and len(value) == KEY_SIZE:
        return value
    text = (value.decode("ascii", "replace") if isinstance(value, bytes) else value).strip()
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("encryption key: not URL-safe base64 (nor 32 raw bytes)") from None
    if len(key) != KEY_SIZE:
        raise ConfigError(f"encryption key: {len(key)} bytes, not 32 (AES-256)")
    return key


def new_key() -> str:
    """A fresh key as the URL-safe base64 text `TASKQ_ENCRYPTION_KEY` takes."""
    return base64.urlsafe_b64encode(os.urandom(KEY_SIZE)).decode()


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:KEY_ID]


def is_sealed(data: bytes) -> bool:
    return data[:1] == b"\x00" and data[: len(MAGIC)] in (MAGIC, LEGACY_MAGIC)


def sealed_with(data: bytes) -> str:
    """The hex key id a sealed body names."""
    return data[len(MAGIC) : len(MAGIC) + KEY_ID].hex()


class Sealer:
    """Seals with the current key; opens with it or any old one. Without a key it seals
    nothing and opens nothing (a sealed body it meets stays as it is, see `open`)."""

    def __init__(
        self, key: bytes | None = None, old_keys: tuple[bytes, ...] = (), legacy: bool = False
    ) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.active = key is not None
        self._seal_id = key_id(key) if key is not None else b""
        self._sealer = AESGCM(key) if key is not None else None
        keys = ((key,) if key is not None else ()) + old_keys
        self._openers = {key_id(k): AESGCM(k) for k in keys}
        self._legacy = legacy  # open `\0TQS1` bodies (sealed before contexts existed)

    def seal(self, data: bytes, context: bytes = b"") -> bytes:
        """`data` sealed for `context` (what and where it is: `taskq.records.places`)."""
        if self._sealer is None:
            return data
        nonce = os.urandom(NONCE)
        head = MAGIC + self._seal_id
        return head + nonce + self._sealer.encrypt(nonce, data, head + context)

    def open(self, data: bytes, context: bytes = b"") -> bytes:
        """The plaintext of a sealed body (a plaintext body is returned as it is); raises
        DecodeError, with the reason, for any body that does not open here: no key for it,
        too short, tampered, sealed for another context, or an old format not allowed."""
        if not is_sealed(data):
            return data
        ident = data[len(MAGIC) : len(MAGIC) + KEY_ID]
        opener = self._openers.get(ident)
        if opener is None:
            raise DecodeError(self._missing(ident.hex()))
        if len(data) < HEAD + TAG:
            raise DecodeError(f"a sealed body of {len(data)} bytes: too short to be one")
        legacy = data.startswith(LEGACY_MAGIC)
        if legacy and not self._legacy:
            raise DecodeError(LEGACY_REFUSED)
        aad = data[: len(MAGIC) + KEY_ID] + (b"" if legacy else context)
        try:
            return bytes(opener.decrypt(data[len(MAGIC) + KEY_ID : HEAD], data[HEAD:], aad))
        except Exception:  # InvalidTag, or anything the library says about odd input
            raise DecodeError(
                f"sealed body with key {ident.hex()} fails authentication here: tampered, "
                "truncated, or sealed for another place (copied or replayed)"
            ) from None

    def open_or_keep(self, data: bytes, context: bytes = b"") -> bytes:
        """The plaintext when this process can open `data`, else `data` as it is (for
        readers that show or move stored messages rather than run them)."""
        if not is_sealed(data):
            return data
        try:
            return self.open(data, context)
        except DecodeError:
            return data

    def _missing(self, ident: str) -> str:
        if not self._openers:
            return (
                f"sealed with encryption key {ident}, and this process has no encryption key "
                "(set TASKQ_ENCRYPTION_KEY)"
            )
        return (
            f"sealed with encryption key {ident}, which is neither this process's key nor "
            "one of its old keys"
        )
