"""Serves one of Herald's ASGI apps under uvicorn until it stops, saying where once it listens."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn


async def serve_app(
    app: Any, *, host: str, port: int, log: logging.Logger, what: str, path: str = "/", **config: Any
) -> None:
    """Serve `app` on host:port; logs "`what` serving http://host:port`path`" once it listens (never, if
    it could not bind: the server's own error ends the call). `config`: more uvicorn.Config options."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **config))
    serving = asyncio.create_task(server.serve())
    while not (server.started or serving.done()):
        await asyncio.sleep(0.05)
    if server.started:
        log.info("%s serving http://%s:%s%s", what, host, port, path)
    await serving
