"""A TCP forwarder on 127.0.0.1 that a test can cut and restore: a network fault between a
NATS client (or a cluster route) and a server, without touching either process.

`cut()` drops every connection through it (reset, as a failed link looks to both ends) and
refuses new ones until `restore()`; bytes are forwarded as they come otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib

from taskq.server import free_port


class Proxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target`; runs on the test's event loop."""

    def __init__(self, target: int, port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.cut_off = False
        self.accepted = 0  # connections forwarded, over the proxy's life
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until `restore`."""
        self.cut_off = True
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self.cut_off = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        self._links.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.create_task(self._pump(source, sink, writer, up_writer))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        *ends: asyncio.StreamWriter,
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, RuntimeError):
            while chunk := await source.read(65536):
                sink.write(chunk)
                await sink.drain()
        for end in ends:  # one side ended: so does the link, as with a real connection
            end.transport.abort()
            self._links.discard(end)
