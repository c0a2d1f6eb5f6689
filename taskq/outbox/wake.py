"""Waiting for new outbox rows: on Postgres a LISTEN on the outbox channel (every commit
that wrote rows notifies it), with the poll interval as a fallback; elsewhere the poll."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from taskq.outbox.database import libpq, parse
from taskq.outbox.table import CHANNEL

log = logging.getLogger("taskq.outbox")


class Waker:
    """`wait(poll)`: returns when rows may have been committed, at most `poll` seconds on."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._listening = parse(url).get_backend_name() == "postgresql"
        self._connection: Any = None

    async def listen(self) -> None:
        """LISTEN now (before the relay's first pass: a commit between that pass and a later
        LISTEN would notify no one). A failure is logged; `wait` tries again."""
        if not self._listening or self._connection is not None:
            return
        try:
            import psycopg  # the outbox extra's Postgres driver

            connection = await psycopg.AsyncConnection.connect(libpq(self._url), autocommit=True)
            await connection.execute(f"LISTEN {CHANNEL}")
            self._connection = connection
        except Exception as exc:
            log.warning("outbox: LISTEN failed (%s); polling meanwhile", exc)

    async def wait(self, poll: float) -> None:
        if self._connection is None:
            await asyncio.sleep(poll)
            await self.listen()  # listening again: the relay passes at once after this
            return
        try:
            async for _ in self._connection.notifies(timeout=poll, stop_after=1):
                break
        except Exception as exc:  # the LISTEN connection lost: poll until it is back
            log.warning("outbox: LISTEN connection lost (%s)", exc)
            await self.close()

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()
