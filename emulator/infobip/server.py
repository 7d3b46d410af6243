"""Runs one Infobip emulator on a fixed port, so a test can stop it (clients then have their
connections refused, as during an outage) and start it again at the same URL.

``InfobipServer(config).start()`` binds ``config.port`` (0 lets the OS choose; read ``port`` after),
``stop()`` closes the listener and the open connections but keeps the state: messages accepted before
the stop keep their lifecycles and their reports keep going out, as Infobip's platform goes on while
its API is unreachable. ``start()`` again listens on the same port; ``aclose()`` ends everything.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from emulator.infobip.app import InfobipState, build_state, create_app
from emulator.infobip.config import InfobipConfig

_STARTUP_SECONDS = 10.0
_SHUTDOWN_SECONDS = 5.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the process (or the test) decides when to stop."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class InfobipServer:
    """One emulator's state, and its HTTP listener that can be stopped and started again."""

    def __init__(self, config: InfobipConfig) -> None:
        self.config = config
        self.state: InfobipState = build_state(config)
        self._app = create_app(self.state, own_poster=False)
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None
        self._poster_started = False
        self.port = config.port

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on the port (the same one after a stop); returns once connections are accepted."""
        if self._server is not None:
            return
        if not self._poster_started:
            await self.state.poster.start()
            self._poster_started = True
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        # A restart binds the port its previous listener just left (its connections in TIME_WAIT).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.port))
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app, lifespan="off", access_log=False, log_config=None, timeout_graceful_shutdown=1
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="infobip-emulator")
        deadline = asyncio.get_running_loop().time() + _STARTUP_SECONDS
        while not self._server.started:
            if self._task.done():
                await self.stop()
                raise RuntimeError("the Infobip emulator stopped during startup")
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise RuntimeError(f"the Infobip emulator did not start within {_STARTUP_SECONDS:.0f} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop listening: new connections are refused, open ones closed; the state stays."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            done, _ = await asyncio.wait({self._task}, timeout=_SHUTDOWN_SECONDS)
            if not done:
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1)
        self._server = None
        self._task = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def aclose(self) -> None:
        """Stop listening and end every lifecycle and report post."""
        await self.stop()
        if self._poster_started:
            await self.state.poster.aclose()
            self._poster_started = False

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set or the listener dies, whichever comes first."""
        assert self._task is not None, "start() first"
        stopping = asyncio.create_task(stop.wait(), name="infobip-stop")
        try:
            await asyncio.wait({stopping, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
