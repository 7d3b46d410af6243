"""Reading a request body within a bound: nothing past the limit is read, nothing is held beyond it.

The receipt routes and the codec server read untrusted bodies before anything can vouch for them;
a declared Content-Length over the limit is refused unread, and a streamed body is dropped as soon
as it passes the limit.
"""

from __future__ import annotations

from starlette.requests import Request


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is known to exceed ``limit`` bytes (nothing past it is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
