"""How the transport meets nats-py below a single `publish`: through nats-py's public API
(this module), or through the fast paths on its private attributes
(`taskq/nats/internals.py`). One switch per connection chooses (`nats_fast_paths`,
`TASKQ_NATS_FAST_PATHS`); the fast paths are also left off, with a warning, when the
installed nats-py lacks what they use. Both ways pass the transport's tests
(tests/test_transport_wire.py runs them on the public one).

The public way is the fallback for a nats-py whose internals changed: a batch of publishes
or acks goes out as one `publish` each, and a probe's "everything sent was read" is two
`flush()` round trips. One read-only look stays on both ways, with a default when nats-py
no longer has it: the server's INFO, which `taskq doctor` reports (nats-py exposes only its
version). Everything else in the transport is nats-py's public API on both ways: a
puller's deliveries and a publish pipeline's acks come through subscription callbacks
(reading nats-py's pending queues directly, as earlier versions did, measured no cheaper).
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

# one publish of a batch: subject, reply subject ("" for none), body, headers
Outgoing = tuple[str, str, bytes, "dict[str, str] | None"]


class Wire:
    """nats-py's public API for what the transport does below a single publish."""

    fast = False

    async def write_many(self, client: Client, messages: list[Outgoing]) -> None:
        """Queue `messages` for the socket in their order."""
        for subject, reply, body, headers in messages:
            await client.publish(subject, body, reply=reply, headers=headers)

    async def write_pending(self, client: Client) -> None:
        """Return once what was queued before the call has reached the server: a PING is
        written ahead of queued commands, so the first round trip gives the flusher its
        turn and the second one's PONG comes after what it wrote."""
        await client.flush()
        await client.flush()

    def server_info(self, client: Client) -> dict[str, Any]:
        """A copy of the INFO the connected server sent ({} beyond its version when this
        nats-py keeps it elsewhere)."""
        info = getattr(client, "_server_info", None)
        if isinstance(info, dict):
            return dict(info)
        version = client.connected_server_version
        return {"version": str(version)} if version else {}

    def last_error(self, client: Client) -> BaseException | None:
        """The error of the client's last connect attempt, if nats-py kept one."""
        return client.last_error
