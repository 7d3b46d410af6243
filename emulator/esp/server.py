"""Builds one ESP emulator and runs its SMTP server and admin API together in one asyncio loop.

``EspServer(config).start()`` binds both (port 0 lets the OS choose; read
``smtp_port`` and ``admin_port`` afterwards; the admin port also serves SendGrid's
Email Activity API), ``stop()`` closes the listeners,
the open SMTP connections and the pending event tasks. Both servers share the
loop so that faults armed through the admin API and messages accepted over
SMTP are one state, with no locks.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from emulator.esp.activity_api import ActivityApi
from emulator.esp.admin import EspState, create_admin_app
from emulator.esp.config import EspConfig
from emulator.esp.events import EventPoster
from emulator.esp.faults import FaultRegistry
from emulator.esp.listener import SmtpListener
from emulator.esp.messages import EspStats, MessageStore
from emulator.esp.smtp import EspHandler
from herald.providers.sendgrid_signature import new_private_key, public_key_text

_STARTUP_SECONDS = 10.0
_ADMIN_SHUTDOWN_SECONDS = 5.0


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """The event-signing key from an unencrypted PEM file.

    Raises:
        ValueError: the file does not hold an ECDSA P-256 private key.
    """
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path}: not an unencrypted PEM private key") from error
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError(f"{path}: not an ECDSA P-256 private key")
    return key


class _AdminServer(uvicorn.Server):
    """uvicorn without its own signal handling: the ESP process stops both servers together."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class EspServer:
    """One ESP emulator: SMTP listener, admin API, event poster and their shared state."""

    def __init__(self, config: EspConfig, private_key: ec.EllipticCurvePrivateKey | None = None) -> None:
        self.config = config
        if private_key is None:
            private_key = load_private_key(config.private_key_file) if config.private_key_file else new_private_key()
        stats = EspStats()
        store = MessageStore()
        faults = FaultRegistry()
        poster = EventPoster(config, stats, private_key)
        self._handler = EspHandler(config, store, faults, stats, poster)
        self.state = EspState(
            config=config,
            store=store,
            faults=faults,
            stats=stats,
            poster=poster,
            public_key=public_key_text(private_key),
            activity=ActivityApi(config, store, stats),
            listener=SmtpListener(self._handler.protocol_factory, config.host, self._handler.close_connections),
        )
        for assignment in config.initial_faults:
            self.state.faults.arm(assignment.to, assignment.fault)
        self._admin: _AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._admin_socket: socket.socket | None = None
        self.smtp_port = 0
        self.admin_port = 0

    @property
    def public_key(self) -> str:
        """The verification key (base64 DER), as SendGrid's console shows it."""
        return self.state.public_key

    async def start(self) -> None:
        """Bind both servers and start serving; returns once both accept connections."""
        await self.state.poster.start()
        try:
            self.smtp_port = await self.state.listener.open(self.config.smtp_port)
            await self._start_admin()
        except BaseException:
            await self.stop()
            raise

    async def _start_admin(self) -> None:
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        self._admin_socket = sock
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.host, self.config.admin_port))
        self.admin_port = sock.getsockname()[1]
        uvicorn_config = uvicorn.Config(
            create_admin_app(self.state),
            lifespan="off",
            access_log=False,
            # The process configures logging once (emulator.esp.__main__); tests keep theirs.
            log_config=None,
            timeout_graceful_shutdown=1,
        )
        self._admin = _AdminServer(uvicorn_config)
        self._admin_task = asyncio.create_task(self._admin.serve(sockets=[sock]), name="esp-admin")
        deadline = asyncio.get_running_loop().time() + _STARTUP_SECONDS
        while not self._admin.started:
            if self._admin_task.done():
                self._admin_task.result()  # raises what stopped it
                raise RuntimeError("the admin API stopped during startup")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"the admin API did not start within {_STARTUP_SECONDS:.0f} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop listening, close SMTP connections, cancel pending events, stop the admin API."""
        self.state.listener.close()
        await self.state.poster.aclose()
        if self._admin is not None and self._admin_task is not None:
            self._admin.should_exit = True
            done, _ = await asyncio.wait({self._admin_task}, timeout=_ADMIN_SHUTDOWN_SECONDS)
            if not done:
                self._admin_task.cancel()
                await asyncio.wait({self._admin_task}, timeout=1)
            self._admin = None
            self._admin_task = None
        if self._admin_socket is not None:
            self._admin_socket.close()
            self._admin_socket = None

    async def wait_for_stop(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set or the admin API dies, whichever comes first."""
        assert self._admin_task is not None, "start() first"
        stopping = asyncio.create_task(stop.wait(), name="esp-stop")
        try:
            await asyncio.wait({stopping, self._admin_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
