"""Settings of an App: where NATS is, how to authenticate, and topology defaults.

Read from keyword arguments first, then `TASKQ_*` environment variables, then defaults.
Environment values are a trust boundary, so pydantic validates them.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from taskq.errors import ConfigError
from taskq.records.sealing import Sealer, parse_key
from taskq.timings import Timings
from taskq.topology.names import check_prefix

DEFAULT_URL = "nats://127.0.0.1:4222"

# environment variable -> field; kept explicit so `docs/` can list them
ENV_FIELDS: dict[str, str] = {
    "TASKQ_URL": "url",
    "TASKQ_PREFIX": "prefix",
    "TASKQ_USER": "user",
    "TASKQ_PASSWORD": "password",
    "TASKQ_TOKEN": "token",
    "TASKQ_NKEY_SEED": "nkey_seed",
    "TASKQ_CREDS": "creds",
    "TASKQ_INBOX_PREFIX": "inbox_prefix",
    "TASKQ_NATS_FAST_PATHS": "nats_fast_paths",
    "TASKQ_TLS_CA": "tls_ca",
    "TASKQ_TLS_CERT": "tls_cert",
    "TASKQ_TLS_KEY": "tls_key",
    "TASKQ_REPLICAS": "replicas",
    "TASKQ_RESULTS_PARTITIONS": "results_partitions",
    "TASKQ_WORKFLOWS_MAX_BYTES": "workflows_max_bytes",
    "TASKQ_HISTORY_MAX_WINDOWS": "history_max_windows",
    "TASKQ_UNKNOWN_TASK_GRACE": "unknown_task_grace",
    "TASKQ_HEARTBEAT": "heartbeat",
    "TASKQ_TIMINGS": "timings",
    "TASKQ_SPARK_MASTER": "spark_master",
    "TASKQ_SPARK_CONF": "spark_conf",
    "TASKQ_ENCRYPTION_KEY": "encryption_key",
    "TASKQ_OLD_KEYS": "old_keys",
    "TASKQ_OPEN_LEGACY_SEALS": "open_legacy_seals",
    "TASKQ_MONITOR_URL": "monitor_url",
}


class Settings(BaseModel):
    """Connection and topology settings shared by producers and workers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = DEFAULT_URL
    prefix: str = "taskq"
    # connection security (docs/security.md): passed through to the NATS client
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_seed: str | None = None
    creds: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    # where replies and pull deliveries come back: a role's own prefix (`_INBOX_worker`),
    # so that no other role may subscribe to them (docs/security.md)
    inbox_prefix: str = Field(default="_INBOX", pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    connect_timeout: float = Field(default=2.0, gt=0)
    # the transport's fast paths on nats-py's private attributes (taskq/nats/wire.py);
    # off: nats-py's public API only (taskq/nats/wire.py), e.g. on an untested nats-py
    nats_fast_paths: bool = True
    # topology
    replicas: int = Field(default=1, ge=1, le=5)
    duplicate_window: float = Field(default=120.0, gt=0)
    dlq_max_age: float = Field(default=30 * 86400.0, gt=0)
    results_ttl: float = Field(default=86400.0, gt=0)
    # result records spread over this many buckets by task id (taskq.records.result_buckets):
    # producers and workers of a prefix must agree; 1 is the one `<PREFIX>_RESULTS` bucket
    results_partitions: int = Field(default=1, ge=1, le=64)
    # durable runs' journals, all of them, at most (the workflows stream refuses more: a
    # producer flooding runs with signals cannot fill the server's disk); 0: no bound of
    # its own. Not set by default: the server reserves a stream's bound against its
    # storage at creation, and refuses one larger than what it has
    workflows_max_bytes: int = Field(default=0, ge=0)

    @field_validator("workflows_max_bytes")
    @classmethod
    def _workflows_max_bytes(cls, value: int) -> int:
        if 0 < value < 64 * 1024**2:
            raise ValueError("workflows_max_bytes is 0 (no bound) or at least 64 MiB")
        return value

    # the history's windows, all of them, at most (taskq.records.history): past it the
    # oldest go first. ~190 B each: 350,000 is ~65 MiB, a day of ~540 series busy all day
    history_max_windows: int = Field(default=350_000, ge=1000)

    # seconds a task no worker of its queue knows (a rolling deploy's new task, another
    # app's on a shared queue) keeps coming back for one that does, before its dead letter
    unknown_task_grace: float = Field(default=300.0, ge=0)
    # seconds between worker heartbeats (`taskq workers`); a silent worker is gone after 3
    heartbeat: float = Field(default=5.0, gt=0)
    # every other delay the engine waits out (taskq.timings; tests shorten them)
    timings: Timings = Field(default_factory=Timings)
    # consumer backstop: the server stops redelivering after this many deliveries
    max_deliver_floor: int = Field(default=20, ge=2)
    # an explicit backstop replaces the computed one (the sweeper dead-letters what hits it)
    max_deliver: int | None = Field(default=None, ge=1)
    max_ack_pending: int = Field(default=20_000, ge=1)
    # encryption at rest (taskq.records.sealing): URL-safe base64 of 32 bytes (bytes accepted);
    # old keys still open what they sealed; plaintext task messages are refused unless allowed
    encryption_key: str | None = Field(default=None, repr=False)
    old_keys: tuple[str, ...] = Field(default=(), repr=False)
    allow_plaintext: bool = False
    # open `\0TQS1` bodies (sealed before bodies were bound to their place): for draining
    # what an older version stored; such bodies open wherever they are copied
    open_legacy_seals: bool = False
    # bodies over the server's max_payload go through the object store up to this size
    payload_limit: int = Field(default=64 * 2**20, ge=1)
    # nats-server monitoring endpoint(s), comma-separated (`http://127.0.0.1:8222`): read by
    # `taskq doctor` and by a starting worker for the sync setting (docs/operations.md)
    monitor_url: str | None = None
    spark_master: str = "local[*]"
    spark_conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_conf(cls, value: Any) -> Any:
        # from the environment it is a JSON object: TASKQ_SPARK_CONF='{"spark.cores.max": "4"}'
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("must be a JSON object of Spark conf keys and values") from None
        return value

    @field_validator("timings", mode="before")
    @classmethod
    def _timings(cls, value: Any) -> Any:
        # from the environment: `short` (Timings.short()) or a JSON object of its fields
        if isinstance(value, str):
            if value.strip() == "short":
                return Timings.short()
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("must be `short` or a JSON object of Timings fields") from None
        return value

    @field_validator("results_partitions", mode="before")
    @classmethod
    def _results_partitions(cls, value: Any) -> Any:
        if isinstance(value, bool):  # an int to pydantic: True would be one partition
            raise ValueError("must be a whole number from 1 to 64")
        return value

    @field_validator("encryption_key", mode="before")
    @classmethod
    def _encryption_key(cls, value: Any) -> Any:
        return None if value is None else _key_text(value)

    @field_validator("old_keys", mode="before")
    @classmethod
    def _old_keys(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: TASKQ_OLD_KEYS=key1,key2
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, bytes):
            value = [value]
        return tuple(_key_text(key) for key in value)

    def sealer(self) -> Sealer:
        """The sealer these settings describe (inactive without an encryption key)."""
        key = parse_key(self.encryption_key) if self.encryption_key else None
        old = tuple(parse_key(k) for k in self.old_keys)
        return Sealer(key, old, legacy=self.open_legacy_seals)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        for part in value.split(","):
            check_url(part.strip())
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return check_prefix(value)

    @classmethod
    def load(cls, **given: Any) -> Settings:
        """Build settings: explicit (non-None) arguments win over `TASKQ_*` variables."""
        values: dict[str, Any] = {}
        for env, field in ENV_FIELDS.items():
            if os.environ.get(env):
                values[field] = os.environ[env]
        values.update({k: v for k, v in given.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            why = first["msg"].removeprefix("Value error, ")  # pydantic's for a ValueError
            raise ConfigError(f"invalid setting {where}: {why}") from None

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes` applied (None values are ignored)."""
        merged = self.model_dump()
        merged.update({k: v for k, v in changes.items() if v is not None})
        return Settings.load(**merged)


URL_SCHEMES = ("nats", "tls", "ws", "wss")


def check_url(url: str) -> str:
    """One server URL as nats-py takes it (`nats://host:port`, `tls://`, `ws://`, `wss://`,
    or a bare `host:port`), else ValueError saying what is wrong with it: a typo is a
    usage error, not a server that cannot be reached."""
    full = url if "://" in url else f"nats://{url}"
    try:
        parsed = urlsplit(full)
        port = parsed.port
    except ValueError as exc:
        raise ValueError(f"invalid URL {url[:200]!r}: {exc}") from None
    if parsed.scheme not in URL_SCHEMES:
        raise ValueError(
            f"invalid URL {url[:200]!r}: the scheme must be one of {', '.join(URL_SCHEMES)}"
        )
    if not parsed.hostname:
        raise ValueError(f"invalid URL {url[:200]!r}: no host")
    if port == 0:
        raise ValueError(f"invalid URL {url[:200]!r}: port 0")
    return url


def _key_text(value: Any) -> str:
    """A key as its URL-safe base64 text, checked (bytes or text in; never echoed back)."""
    if not isinstance(value, bytes | str):
        raise ValueError("an encryption key is 32 bytes or their URL-safe base64 text")
    return base64.urlsafe_b64encode(parse_key(value)).decode()
