"""Naive: the same HTTP call and insert with no Temporal — what a team would write instead.

The driver (the "service") POSTs each message to the emulator with a StatusCallback URL;
`bench.receiver` verifies the final callback's signature and inserts the delivery row.
Latency ends at that row's `delivered_at` (clock_timestamp() in PostgreSQL, same machine clock).
No retries, no record before the send, no reconciliation: nothing survives a crash.
"""

from __future__ import annotations

import time

import httpx

from bench.common import BODY_TEMPLATE, Phase, fresh_recipient, new_tag, offer, wait_until
from bench.context import ROLES, Bench

MAX_IN_FLIGHT = 16  # the same cap as Herald's adapter and the floor's activity


async def run_naive(bench: Bench, n: int, rate: float | None, timeout: float) -> Phase:
    phase = Phase("naive", rate, n)
    tag = new_tag()
    account, token, sender = bench.twilio
    url = f"{bench.stack.emulator_url}/2010-04-01/Accounts/{account}/Messages.json"
    starts: dict[str, float] = {}
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)

    async with httpx.AsyncClient(auth=(account, token), limits=limits, timeout=10.0) as http:

        async def start_one(i: int) -> None:
            intent_id = f"naive-{tag}-{i}"
            starts[intent_id] = time.time()
            form = {"To": fresh_recipient(), "From": sender, "Body": BODY_TEMPLATE.format(n=i),
                    "StatusCallback": f"{bench.stack.receiver_url}/naive?id={intent_id}"}  # fmt: skip
            try:
                (await http.post(url, data=form)).raise_for_status()
            except httpx.HTTPError:
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

        await bench.measured(phase, ROLES["naive"], run)

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
