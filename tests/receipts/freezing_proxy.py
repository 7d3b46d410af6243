"""A TCP proxy on 127.0.0.1 that can stop passing bytes: a database that hangs without closing anything.

Stopping PostgreSQL would refuse connections (a different fault, already covered). A frozen proxy
keeps every socket open and simply forwards nothing, as a server stuck on a lock, a full disk or a
dead network path does: the client's reads wait forever unless the client bounds them itself.
"""

from __future__ import annotations

import asyncio
import contextlib


class FreezingProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        """``upstream_host`` is a host name or address, or a directory holding PostgreSQL's Unix socket."""
        self._upstream = (upstream_host, upstream_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.close()
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
