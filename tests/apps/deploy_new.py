"""The app after a deploy: `greet` as before, and a new task `welcome`
(tests/test_rolling_deploy.py)."""

from __future__ import annotations

from taskq import App

app = App()


@app.task(name="deploy.greet")
async def greet(name: str) -> str:
    return f"hello {name}"


@app.task(name="deploy.welcome")
async def welcome(name: str) -> str:
    return f"welcome {name}"
