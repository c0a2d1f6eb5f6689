"""Raw JetStream API requests, for what nats-py has no call (or no option) for.

The reply is the server's JSON as a dict; `reply_error` (taskq.nats.errors) reads the error
in it. Used for deletes without erasing, purges with a filter, and create-only consumers.
"""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client

from taskq.errors import TransientError
from taskq.nats.errors import Guard, reply_error


async def request(client: Client, guard: Guard, what: str, body: dict[str, Any]) -> dict[str, Any]:
    """Send `body` to `$JS.API.<what>` and return the JSON reply (errors included in it),
    but raise TransientError for one the server answers "temporarily unavailable" (an
    election), which the caller's retry then rides out as it does a timeout."""
    with guard:
        raw = await client.request(f"$JS.API.{what}", json.dumps(body).encode(), timeout=10)
    reply: dict[str, Any] = json.loads(raw.data)
    error = reply_error(reply, what)
    if isinstance(error, TransientError):
        raise error
    return reply
