"""What every HTTP provider adapter holds alike: one pooled client that never retries, a cap on
requests in flight, and closing it once.

Retries belong to Temporal, and a submit retried inside an adapter is the duplicate send; so the
transport is built with ``retries=0`` (httpx's default too, spelled out), redirects are not followed
(a provider answers; a redirect is a misconfigured base URL, which must show as such), and every
request holds a slot for its whole exchange, body included, so the cap counts real requests.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx


class HttpAdapter:
    """The connection half of an adapter; the provider's vocabulary is the subclass's."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_in_flight: int,
        transport: httpx.AsyncBaseTransport | None,
        **client: Any,
    ) -> None:
        """`client`: the provider's own httpx.AsyncClient options (base_url, auth, headers)."""
        if transport is None:
            limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
            transport = httpx.AsyncHTTPTransport(retries=0, limits=limits)
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout),
            follow_redirects=False,
            **client,
        )
        self._slots = asyncio.Semaphore(max_in_flight)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; the adapter is unusable afterwards."""
        await self._client.aclose()

    async def _request(self, method: str, url: str, **request: Any) -> httpx.Response:
        """One request, inside a slot for its whole exchange; httpx's errors are the caller's to classify."""
        async with self._slots:
            return await self._client.request(method, url, **request)


def json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The response's body when it is a JSON object; None for anything else (a proxy's HTML page)."""
    try:
        payload = response.json()
    except ValueError:  # covers JSONDecodeError and UnicodeDecodeError
        return None
    return payload if isinstance(payload, dict) else None


def iso_time(value: Any) -> datetime | None:
    """A JSON API's ISO 8601 time with its offset (``Z``, ``+01:00``, ``+0100``); None when absent,
    unreadable or without an offset (a time without one cannot be placed, and is not guessed)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None
