"""The app as it was before a deploy: it knows `greet` only (tests/test_rolling_deploy.py)."""

from __future__ import annotations

from taskq import App

app = App()


@app.task(name="deploy.greet")
async def greet(name: str) -> str:
    return f"hello {name}"
