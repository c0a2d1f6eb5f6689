"""An app whose worker start hook fails (for the CLI's one-line error)."""

from taskq import App

app = App()


@app.on_worker_start
def open_pool() -> None:
    raise ConnectionError("no pool for you")


@app.task
async def noop() -> None:
    return None
