"""A TCP gate on 127.0.0.1 in front of a server, for scenes and tests that need the network to fail
for real: closed, a provider, relay, webhook or database that is down; frozen, one that hangs.

Closed, nothing listens on its port (a connect gets ECONNREFUSED, as from a stopped server or a
firewall's reject rule) and every connection it was carrying is cut, so a client's kept-alive socket
cannot slip past the outage; opened again, it listens on the same port, the one clients were given.
Frozen, it keeps every socket open and forwards nothing, as a server stuck on a lock, a full disk or
a dead network path does: the client's reads wait forever unless the client bounds them itself.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpGate:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        """``upstream_host`` is a host name or address, or a directory holding PostgreSQL's Unix socket."""
        self._upstream = (upstream_host, upstream_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen: on a free port the first time, on the same port after ``refuse``."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    # Opened again after an outage: the same as the first start, on the port clients were given.
    accept = start

    async def refuse(self) -> None:
        """Stop listening and cut every carried connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        await self._cut()
        if server is not None:
            await server.wait_closed()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        """For good: thawed, not listening, every connection cut."""
        self.thaw()
        await self.refuse()

    async def _cut(self) -> None:
        # Cut before waiting: from Python 3.12 on, wait_closed() waits for the carried connections.
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        host, port = self._upstream
        try:
            if host.startswith("/"):  # a PostgreSQL socket directory (the embedded server listens only there)
                upstream_reader, upstream_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
            else:
                upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        for reader, writer in ((client_reader, upstream_writer), (upstream_reader, client_writer)):
            pump = asyncio.create_task(self._pump(reader, writer))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                await self._flowing.wait()  # frozen: hold the bytes, keep the socket open
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
