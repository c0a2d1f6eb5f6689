"""The floor: a raw nats-py work-queue loop, fetch(256) + ack, nothing else.

Usage: python -m bench.raw_consumer URL STREAM DURABLE
"""

from __future__ import annotations

import asyncio
import sys

import nats
import nats.errors


async def main(url: str, stream: str, durable: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
    print("ready", flush=True)
    while True:
        try:
            msgs = await sub.fetch(256, timeout=1)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            await msg.ack()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main(*sys.argv[1:4]))
    except ImportError:
        asyncio.run(main(*sys.argv[1:4]))
