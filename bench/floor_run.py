"""Driving the floor workflow (`bench.floor`): start through a plain Temporal client, read the histories."""

from __future__ import annotations

import time

from bench.common import (
    BODY_TEMPLATE,
    Phase,
    completed_latencies,
    fresh_address,
    fresh_recipient,
    new_tag,
    offer,
    read_histories,
    wait_until,
    workflows_closed,
)
from bench.context import EMAIL_ROLES, ROLES, Bench
from bench.floor import EMAIL_TASK_QUEUE, TASK_QUEUE, WORKFLOW_NAME, FloorInput


async def run_floor(bench: Bench, n: int, rate: float | None, timeout: float, channel: str = "sms") -> Phase:
    phase = Phase("floor", rate, n)
    email = channel == "email"
    prefix = f"floor-{'email-' if email else ''}{new_tag()}-"
    client = bench.floor_temporal
    starts: dict[str, float] = {}
    runs: dict[str, str | None] = {}

    async def start_one(i: int) -> None:
        workflow_id = f"{prefix}{i}"
        starts[workflow_id] = time.time()
        try:
            handle = await client.start_workflow(
                WORKFLOW_NAME,
                FloorInput(
                    intent_id=workflow_id,
                    to=fresh_address() if email else fresh_recipient(),
                    body=BODY_TEMPLATE.format(n=i),
                ),
                id=workflow_id,
                task_queue=EMAIL_TASK_QUEUE if email else TASK_QUEUE,
            )
            runs[workflow_id] = handle.first_execution_run_id or handle.result_run_id
        except Exception:  # noqa: BLE001 - a start that fails is counted as such; the run goes on
            phase.failed_to_start += 1

    async def run() -> bool:
        await offer(n, rate, start_one)
        return await wait_until(lambda: workflows_closed(client, prefix, len(runs)), timeout)

    await bench.measured(phase, (EMAIL_ROLES if email else ROLES)["floor"], run)
    completed_latencies(phase, starts, await read_histories(client, runs))
    phase.states.update({"completed": phase.completed})
    return phase
