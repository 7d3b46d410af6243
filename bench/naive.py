"""Naive: the same HTTP call and insert with no Temporal — what a team would write instead.

The driver (the "service") POSTs each message to the emulator with a StatusCallback URL;
`bench.receiver` verifies the final callback's signature and inserts the delivery row.
Latency ends at that row's `delivered_at` (clock_timestamp() in PostgreSQL, same machine clock).
No retries, no record before the send, no reconciliation: nothing survives a crash.

E-mail (`channel="email"`): one SMTP transaction per message to the bench's ESP (`bench.floor_email`),
16 at a time, and the receiver inserts the row on the final SendGrid event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiosmtplib
import httpx

from bench.common import BODY_TEMPLATE, Phase, fresh_address, fresh_recipient, new_tag, offer, wait_until
from bench.context import ROLES_BY_CHANNEL, Bench
from bench.floor_email import email_message, send_email

MAX_IN_FLIGHT = 16  # the same cap as Herald's adapter and the floor's activity
# What a send that fails raises: counted as failed to start, and the run goes on.
SEND_ERRORS = (httpx.HTTPError, aiosmtplib.SMTPException, OSError)
Send = Callable[[str, int], Awaitable[None]]


@asynccontextmanager
async def _sms(bench: Bench) -> AsyncIterator[Send]:
    """POST one message to the emulator with a StatusCallback naming the intent."""
    account, token, sender = bench.twilio
    url = f"{bench.stack.emulator_url}/2010-04-01/Accounts/{account}/Messages.json"
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
    async with httpx.AsyncClient(auth=(account, token), limits=limits, timeout=10.0) as http:

        async def send(intent_id: str, i: int) -> None:
            form = {"To": fresh_recipient(), "From": sender, "Body": BODY_TEMPLATE.format(n=i),
                    "StatusCallback": f"{bench.stack.receiver_url}/naive?id={intent_id}"}  # fmt: skip
            (await http.post(url, data=form)).raise_for_status()

        yield send


@asynccontextmanager
async def _email(bench: Bench) -> AsyncIterator[Send]:
    """Hand one message to the bench's ESP; its unique args name the intent."""
    email = bench.settings.email
    port, sender = bench.stack.esp_bench_ports[0], email.from_address or ""
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def send(intent_id: str, i: int) -> None:
        message = email_message(sender, fresh_address(), BODY_TEMPLATE.format(n=i), intent_id, "naive")
        async with slots:
            await send_email(email.host or "127.0.0.1", port, message, email.read_timeout)

    yield send


async def run_naive(bench: Bench, n: int, rate: float | None, timeout: float, channel: str = "sms") -> Phase:
    phase = Phase("naive", rate, n)
    tag = new_tag()
    starts: dict[str, float] = {}

    async with (_email if channel == "email" else _sms)(bench) as send:

        async def start_one(i: int) -> None:
            intent_id = f"naive-{tag}-{i}"
            starts[intent_id] = time.time()
            try:
                await send(intent_id, i)
            except SEND_ERRORS:
                phase.failed_to_start += 1

        async def delivered_rows() -> int:
            async with bench.pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) FROM bench_deliveries WHERE intent_id LIKE %s", (f"naive-{tag}-%",)
                )
                return (await cursor.fetchone())[0]

        async def run() -> bool:
            await offer(n, rate, start_one)
            return await wait_until(
                lambda: _at_least(delivered_rows, n - phase.failed_to_start), timeout, interval=0.05
            )

        await bench.measured(phase, ROLES_BY_CHANNEL[channel]["naive"], run)

    async with bench.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT intent_id, extract(epoch FROM delivered_at)::float8, status FROM bench_deliveries WHERE intent_id LIKE %s",
            (f"naive-{tag}-%",),
        )
        rows = await cursor.fetchall()
    ends = {intent_id: at for intent_id, at, _ in rows}
    phase.states.update(status for _, _, status in rows)
    phase.completed = len(ends)
    phase.latencies = [ends[i] - starts[i] for i in ends]
    phase.first_start = min(starts.values())
    phase.last_end = max(ends.values(), default=phase.first_start)
    return phase


async def _at_least(count, expected: int) -> bool:
    return await count() >= expected
