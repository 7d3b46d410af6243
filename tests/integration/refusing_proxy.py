"""A TCP proxy on 127.0.0.1 that can refuse connections: a provider, a relay or a webhook endpoint that is down.

While refusing, nothing listens on its port (a connect gets ECONNREFUSED, as from a stopped server or a
firewall's reject rule) and every connection it was carrying is cut, so a client's kept-alive socket
cannot slip past the outage. ``accept()`` listens on the same port again.
"""

from __future__ import annotations

import asyncio

from tests.receipts.freezing_proxy import FreezingProxy


class RefusingProxy(FreezingProxy):
    async def refuse(self) -> None:
        """Stop listening and cut every carried connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        # Cut before waiting: from Python 3.12 on, wait_closed() waits for the carried connections.
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def accept(self) -> None:
        """Listen again, on the port clients were given."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
