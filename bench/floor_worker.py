"""The floor's worker process: `python -m bench.floor_worker [email]` (the bench starts it).

Settings come from the same HERALD_* variables and DATABASE_URL as Herald's worker, plus
BENCH_RECEIVER_URL (where the floor's callbacks go). The HTTP client is capped like Herald's
adapter (16 connections) and the worker runs as many activities at once as Herald's (32),
so the two differ only in what runs inside the workflow and activities.

With `email`, the same workflow on the e-mail task queue, its submit an SMTP transaction
(`bench.floor_email`) to the bench's ESP on BENCH_ESP_SMTP_PORT, whose events reach the receiver.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import httpx
from psycopg_pool import AsyncConnectionPool
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from bench.floor import (
    EMAIL_TASK_QUEUE,
    INSERT_ACTIVITY,
    SUBMIT_ACTIVITY,
    TASK_QUEUE,
    FloorInput,
    FloorInsert,
    FloorWorkflow,
)
from bench.floor_email import FloorEmailSubmit

MAX_IN_FLIGHT = 16

INSERT_SQL = """INSERT INTO bench_deliveries (intent_id, variant, provider_sid, status)
                VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"""


class FloorActivities:
    def __init__(self, http: httpx.AsyncClient, messages_url: str, from_number: str, receiver_url: str,
                 pool: AsyncConnectionPool) -> None:  # fmt: skip
        self._http = http
        self._messages_url = messages_url
        self._from = from_number
        self._receiver_url = receiver_url
        self._pool = pool

    @activity.defn(name=SUBMIT_ACTIVITY)
    async def submit(self, input: FloorInput) -> str:
        callback = f"{self._receiver_url}/floor?wf={activity.info().workflow_id}"
        response = await self._http.post(
            self._messages_url,
            data={"To": input.to, "From": self._from, "Body": input.body, "StatusCallback": callback},
        )
        response.raise_for_status()
        return response.json()["sid"]

    @activity.defn(name=INSERT_ACTIVITY)
    async def insert(self, row: FloorInsert) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(INSERT_SQL, (row.intent_id, "floor", row.provider_sid, row.status))


async def main() -> None:
    env = os.environ
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    account = env["HERALD_TWILIO_ACCOUNT_SID"]
    messages_url = f"{env['HERALD_TWILIO_API_BASE']}/2010-04-01/Accounts/{account}/Messages.json"
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=MAX_IN_FLIGHT)
    async with (
        httpx.AsyncClient(auth=(account, env["HERALD_TWILIO_AUTH_TOKEN"]), limits=limits, timeout=10.0) as http,
        AsyncConnectionPool(env["DATABASE_URL"], min_size=1, max_size=8, open=False) as pool,
    ):
        client = await Client.connect(env["HERALD_TEMPORAL_ADDRESS"], namespace=env["HERALD_TEMPORAL_NAMESPACE"])
        activities = FloorActivities(http, messages_url, env["HERALD_TWILIO_FROM"], env["BENCH_RECEIVER_URL"], pool)
        submit, task_queue = activities.submit, TASK_QUEUE
        if sys.argv[1:] == ["email"]:
            timeout = float(env["HERALD_SMTP_READ_TIMEOUT"])
            email = FloorEmailSubmit(
                env["HERALD_SMTP_HOST"], int(env["BENCH_ESP_SMTP_PORT"]), env["HERALD_EMAIL_FROM"], timeout
            )
            submit, task_queue = email.submit, EMAIL_TASK_QUEUE
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[FloorWorkflow],
            activities=[submit, activities.insert],
            max_concurrent_activities=MAX_IN_FLIGHT * 2,
        ):
            await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
