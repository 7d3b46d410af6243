"""The relay's SMTP listener, which a fault can take down for a while: a relay that refuses connections.

``refuse_for(seconds)`` stops listening and closes every open SMTP connection, so a client's connect
gets ECONNREFUSED (as from a relay that is down or a firewall's reject rule) until the listener opens
again on the same port. Bounded: an outage ends by itself after at most ``MAX_OUTAGE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_OUTAGE_SECONDS = 600.0


class SmtpListener:
    def __init__(
        self,
        protocol_factory: Callable[[asyncio.AbstractEventLoop], Callable[[], Any]],
        host: str,
        close_connections: Callable[[], None],
    ) -> None:
        self._factory = protocol_factory
        self._host = host
        self._close_connections = close_connections
        self._server: asyncio.Server | None = None
        self._reopen: asyncio.Task[None] | None = None
        self.port = 0
        self.refusing_until: datetime | None = None

    async def open(self, port: int = 0) -> int:
        """Listen on `port` (0: one the OS chooses, the first time); the port listened on."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._factory(loop), self._host, port or self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.refusing_until = None
        return self.port

    def close(self) -> None:
        """Stop listening and close the open connections (also ends an outage's timer)."""
        if self._reopen is not None:
            self._reopen.cancel()
            self._reopen = None
        if self._server is not None:
            self._server.close()
            self._server = None
        self._close_connections()

    def refuse_for(self, seconds: float) -> datetime:
        """Refuse connections for `seconds` (at most MAX_OUTAGE_SECONDS), then listen again; when it ends."""
        if not 0 < seconds <= MAX_OUTAGE_SECONDS:
            raise ValueError(f"seconds: must be above 0 and at most {MAX_OUTAGE_SECONDS:g}")
        self.close()
        self.refusing_until = datetime.now(UTC) + timedelta(seconds=seconds)
        self._reopen = asyncio.create_task(self._open_after(seconds), name="esp-smtp-reopen")
        return self.refusing_until

    async def resume(self) -> None:
        """End an outage now."""
        if self._server is None:
            if self._reopen is not None:
                self._reopen.cancel()
                self._reopen = None
            await self.open(self.port)

    async def _open_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._reopen = None
        with contextlib.suppress(OSError):  # the port was taken meanwhile: stay down, the next resume() says so
            await self.open(self.port)
