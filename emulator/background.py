"""What both emulators' report posters share: a loopback HTTP client and the background tasks that
use it, bounded and cancellable (status callbacks for SMS, signed events for e-mail)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import httpx

log = logging.getLogger(__name__)

_SHUTDOWN_WAIT_SECONDS = 5.0
# Posts in flight at once. httpx's pool holds 100 connections and queues the rest inside httpcore,
# whose queue costs time per queued request on every assignment: with thousands of callbacks due at
# once (a bench burst, a receiver that refuses), the emulator spent its CPU there instead of posting.
# Waiting here instead costs nothing while waiting.
MAX_POSTS_IN_FLIGHT = 64


class BackgroundPoster:
    """Owns an httpx client for posting to loopback receivers and the tasks that post."""

    def __init__(self, timeout_seconds: float) -> None:
        self._timeout_seconds = timeout_seconds
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = asyncio.Semaphore(MAX_POSTS_IN_FLIGHT)

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        # trust_env=False: a proxy from the environment must never see (or reroute) loopback posts.
        self._client = httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=httpx.Timeout(self._timeout_seconds)
        )

    async def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST once, waiting for a slot when MAX_POSTS_IN_FLIGHT posts are already out."""
        assert self._client is not None, "start() first"
        async with self._in_flight:
            return await self._client.post(url, content=content, headers=headers)

    async def aclose(self) -> None:
        await self.cancel_all()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run `work` in the background, remembered until it ends (a failure is logged, not lost)."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    async def cancel_all(self) -> None:
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_SHUTDOWN_WAIT_SECONDS)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())
