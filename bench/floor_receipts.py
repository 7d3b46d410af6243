"""The floor's report path, for comparison with Herald's (`bench.herald_run.run_receipts`).

m floor workflows are parked waiting for their one signal (emulator fault `silent`: accepted,
never reported), then the bench, playing Twilio, posts one signed `delivered` callback per
message to the floor's receiver, which verifies it and signals the workflow; each workflow then
runs its insert activity and completes. Same callbacks, same concurrency as Herald's run.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import httpx

from bench.common import BODY_TEMPLATE, fresh_recipient, new_tag, offer, wait_until, workflows_closed
from bench.context import ROLES, Bench
from bench.floor import TASK_QUEUE, WORKFLOW_NAME, FloorInput
from bench.herald_run import CALLBACK_CONCURRENCY, ReceiptsResult, make_room_at_emulator, park_rss
from bench.measure import CpuMeter
from herald.providers.twilio_signature import compute_signature


async def run_floor_receipts(bench: Bench, m: int, timeout: float) -> ReceiptsResult:
    result = ReceiptsResult(m)
    client = bench.floor_temporal
    prefix = f"floor-parked-{new_tag()}-"
    await make_room_at_emulator(bench, m)
    recipient = fresh_recipient()
    (await bench.admin.put(f"/_emulator/faults/{recipient}", json={"fault": "silent"})).raise_for_status()

    async def start_one(i: int) -> None:
        await client.start_workflow(
            WORKFLOW_NAME,
            FloorInput(intent_id=f"{prefix}{i}", to=recipient, body=BODY_TEMPLATE.format(n=i)),
            id=f"{prefix}{i}",
            task_queue=TASK_QUEUE,
        )

    await offer(m, None, start_one)

    async def all_accepted() -> bool:
        listed = (await bench.admin.get("/_emulator/messages", params={"to": recipient})).json()["messages"]
        return len(listed) >= m

    if not await wait_until(all_accepted, timeout, interval=max(1.0, m / 2000)):
        result.timed_out = True
        return result
    await asyncio.sleep(2.0)  # the last submit answers reach their workflows
    result.rss_after_parking = park_rss(bench, "floor_worker")
    listed = (await bench.admin.get("/_emulator/messages", params={"to": recipient})).json()["messages"]
    account, token, _ = bench.twilio
    done = datetime.now(UTC).strftime("%y%m%d%H%M")
    callbacks = []
    for message in listed:
        params = [("MessageSid", message["sid"]), ("SmsSid", message["sid"]), ("AccountSid", account),
                  ("From", message["from"] or ""), ("To", message["to"]), ("MessageStatus", "delivered"),
                  ("SmsStatus", "delivered"), ("ApiVersion", "2010-04-01"), ("RawDlrDoneDate", done)]  # fmt: skip
        url = message["status_callback"]
        callbacks.append((url, params, compute_signature(token, url, params)))
    limits = httpx.Limits(max_connections=CALLBACK_CONCURRENCY, max_keepalive_connections=CALLBACK_CONCURRENCY)
    meter = CpuMeter(bench.stack.pids)
    roles = {k: v for k, v in ROLES["floor"].items() if k != "emulator"}
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:

        async def post(i: int) -> None:
            url, params, signature = callbacks[i]
            response = await http.post(url, data=dict(params), headers={"X-Twilio-Signature": signature})
            if response.is_success:
                result.answered_2xx += 1

        before = meter.snapshot()
        first = time.time()
        await offer(len(callbacks), None, post)
        result.ingest_seconds = time.time() - first
        closed = await wait_until(lambda: workflows_closed(client, prefix, m), timeout)
        result.closed_seconds = time.time() - first
        after = meter.snapshot()
    result.timed_out = not closed
    delta = CpuMeter.delta(before, after)
    result.cpu = {column: delta.get(process, 0.0) for column, process in roles.items()}
    result.foreign_cores = CpuMeter.foreign(delta) / result.closed_seconds if result.closed_seconds else None
    # Applied = the workflow ran its insert: the floor's equivalent of Herald's verdict in the ledger.
    async with bench.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*), extract(epoch FROM max(delivered_at))::float8 FROM bench_deliveries WHERE intent_id LIKE %s",
            (prefix + "%",),
        )
        result.applied, last_applied = await cursor.fetchone()
    result.applied_seconds = (last_applied - first) if last_applied else 0.0
    result.states.update({"completed": result.applied})
    return result
