"""An app with a 1-second periodic task (for `taskq schedules` tests)."""

from __future__ import annotations

from taskq import App

app = App()


@app.periodic(every=1, args=("tick",))
async def heartbeat(label: str) -> str:
    return label
