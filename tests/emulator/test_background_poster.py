"""The emulators' poster under a burst: posts beyond the connection pool wait for a slot, never fail.

A burst of callbacks larger than httpx's pool (a bench, a slow receiver) used to queue inside httpcore,
where the pool timeout counted against each post: posts failed without ever leaving, were retried,
and the retries fed the burst (58,238 attempts, 54,788 failed in one bench run).
"""

from __future__ import annotations

import asyncio

from emulator.background import MAX_POSTS_IN_FLIGHT, BackgroundPoster

# A post's answer time and timeout: ten rounds of answers must outlast the timeout (the bug queued
# the burst behind the pool, against the timeout); one answer must leave room inside it.
ANSWER_AFTER, TIMEOUT = 0.4, 2.0
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"


async def test_a_burst_larger_than_the_pool_waits_for_slots_and_every_post_succeeds() -> None:
    """Ten times the in-flight bound, each answered after ANSWER_AFTER s, with a TIMEOUT s timeout: all 200.

    Queued in httpcore instead, the last posts would wait about 10 × 0.4 = 4 s for a connection
    (past the timeout); each post here is out for 0.4 s, leaving 1.6 s for a busy host's scheduling
    (0.8 s was too little on 2 cores under the whole suite)."""
    peak = 0
    in_flight = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal peak, in_flight
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                in_flight += 1
                peak = max(peak, in_flight)
                await asyncio.sleep(ANSWER_AFTER)
                in_flight -= 1
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    poster = BackgroundPoster(timeout_seconds=TIMEOUT)
    await poster.start()
    try:
        posts = [
            poster.post(f"http://127.0.0.1:{port}/cb", content=b"", headers={}) for _ in range(10 * MAX_POSTS_IN_FLIGHT)
        ]
        responses = await asyncio.gather(*posts)
    finally:
        await poster.aclose()
        server.close()
    assert [r.status_code for r in responses] == [200] * len(posts)
    assert peak <= MAX_POSTS_IN_FLIGHT
