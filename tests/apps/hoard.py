"""A task that keeps memory for as long as its process lives (for --max-memory-per-child)."""

from __future__ import annotations

from taskq import App
from tests.apps.ledger import note

app = App()

KEPT: list[bytes] = []  # module-level: what a leaking task would look like


@app.task(ack_wait=5.0)
def hoard(token: str, mb: int) -> int:
    KEPT.append(b"x" * (mb << 20))  # written, so resident (bytes(n) may stay unbacked)
    note(f"done {token}")
    return len(KEPT)
