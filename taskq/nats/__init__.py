"""The NATS boundary: the only package that imports `nats` (nats-py).

Everything above it speaks the types exported here. nats-py exceptions are translated into
the `TaskqError` tree inside this package and never leak to callers.
"""

from taskq.nats.connection import Connection
from taskq.nats.messages import MULTI_LAST
from taskq.nats.pull import Delivery, Puller
from taskq.nats.types import (
    ConsumerPause,
    ConsumerState,
    KVEntry,
    PubAck,
    StoredMessage,
    StreamState,
)

__all__ = [
    "MULTI_LAST",
    "Connection",
    "ConsumerPause",
    "ConsumerState",
    "Delivery",
    "KVEntry",
    "PubAck",
    "Puller",
    "StoredMessage",
    "StreamState",
]
