"""Reading what a stream holds after a power cut, with plain nats-py."""

from __future__ import annotations

import json

import nats
from nats.js.errors import NotFoundError

from taskq import App
from taskq.errors import NotFound


async def ids_in_stream(app: App, stream: str) -> set[str]:
    """The `tid` argument of every task stored in `stream` (NotFound if it is gone)."""
    nc = await nats.connect(servers=app.settings.url.split(","), allow_reconnect=False)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(stream)
        except NotFoundError:
            raise NotFound(f"stream {stream} not found") from None
        found: set[str] = set()
        seq = 1
        while True:
            try:
                msg = await js.get_msg(stream, seq=seq, subject=">", next=True)
            except NotFoundError:
                return found
            found.add(_tid(msg.data or b"", msg.seq or seq))
            seq = (msg.seq or seq) + 1
    finally:
        await nc.close()


def _tid(body: bytes, seq: int) -> str:
    """The reliability apps' tasks carry their test id as `tid` (first argument)."""
    try:
        envelope = json.loads(body)
        return str(envelope.get("kwargs", {}).get("tid") or envelope["args"][0])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return f"seq:{seq}"
