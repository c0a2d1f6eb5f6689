"""A TCP forwarder on 127.0.0.1 that a test can cut and restore: a network fault between a
NATS client (or a cluster route) and a server, without touching either process.

`cut()` drops every connection through it (reset, as a failed link looks to both ends) and
refuses new ones until `restore()`; bytes are forwarded as they come otherwise. `freeze_after`
sets a tripwire: once a client sends bytes holding one of the given patterns (a NATS
publish's subject, say), those bytes still go through and nothing more does, either way, on
any open connection, until `restore()`: the moment right after one protocol step, held.
"""

from __future__ import annotations

import asyncio
import contextlib


class Proxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target`; runs on the test's event loop."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0  # bound by start(): the system's choice, taken as it is chosen
        self.cut_off = False
        self.frozen = False
        self.tripped: bytes | None = None  # the pattern that froze the proxy
        self._tripwires: tuple[bytes, ...] = ()
        self.accepted = 0  # connections forwarded, over the proxy's life
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._clients: set[asyncio.StreamWriter] = set()  # the client ends of the links
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until `restore`."""
        self.cut_off = True
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    def restore(self) -> None:
        self.cut_off = False
        self.frozen = False
        self._tripwires = ()

    async def inject(self, data: bytes) -> None:
        """Send `data` to every connected client as if the server had sent it."""
        for writer in list(self._clients):
            if not writer.is_closing():
                writer.write(data)
                await writer.drain()

    def freeze_after(self, *patterns: bytes) -> None:
        """Freeze every link right after a client sends any of `patterns`."""
        self.tripped = None
        self._tripwires = patterns

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
        self._clients.add(writer)
        for source, sink, up in ((reader, up_writer, True), (up_reader, writer, False)):
            pump = asyncio.create_task(self._pump(source, sink, up, writer, up_writer))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        upstream: bool,
        *ends: asyncio.StreamWriter,
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, RuntimeError):
            while chunk := await source.read(65536):
                if self.frozen:
                    continue  # held: the bytes are lost, as on a link that went dark
                sink.write(chunk)
                await sink.drain()
                if upstream and self._tripwires:
                    self._trip(chunk)
        for end in ends:  # one side ended: so does the link, as with a real connection
            end.transport.abort()
            self._links.discard(end)

    def _trip(self, chunk: bytes) -> None:
        for pattern in self._tripwires:
            if pattern in chunk:
                self.frozen, self.tripped, self._tripwires = True, pattern, ()
                return
