"""The sweeper: moves crash-looped messages (MAX_DELIVERIES advisories) into the DLQ.

Placeholder until issue 3 lands: waits for shutdown and does nothing.
"""

from __future__ import annotations

import asyncio

from taskq.app import App
from taskq.jetstream import Broker


async def run_sweeper(app: App, broker: Broker, stopping: asyncio.Event) -> None:
    """Run until `stopping` is set."""
    await stopping.wait()
