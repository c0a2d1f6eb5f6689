"""Tasks of the edge-site tests (tests/test_edge_sites.py), for `taskq provision` at a hub
and at a site: what the hub sends and the site runs."""

from __future__ import annotations

from taskq import App

app = App()


@app.task
async def add(n: int) -> int:
    return n + 1000


@app.task(max_retries=0)
async def doomed(n: int) -> None:
    raise ValueError(f"no {n}")
