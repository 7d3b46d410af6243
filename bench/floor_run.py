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
from bench.context import ROLES_BY_CHANNEL, Bench
from bench.floor import EMAIL_TASK_QUEUE, TASK_QUEUE, WORKFLOW_NAME, FloorInput


# The floor's task queue by channel: its worker's submit POSTs to the emulator, or makes one SMTP
# transaction to the bench's ESP (`python -m bench.floor_worker email`).
QUEUES = {"sms": TASK_QUEUE, "email": EMAIL_TASK_QUEUE}


async def run_floor(bench: Bench, n: int, rate: float | None, timeout: float, channel: str = "sms") -> Phase:
    """n floor runs on `channel`: "sms", "email", or "notice" (an SMS and an e-mail workflow each, one
    started after the other, done when both completed, at the later close)."""
    phase = Phase("floor", rate, n)
    channels = list(QUEUES) if channel == "notice" else [channel]
    prefix = f"floor-{'' if channel == 'sms' else channel + '-'}{new_tag()}-"
    client = bench.floor_temporal
    starts: dict[str, float] = {}
    runs: dict[str, str | None] = {}

    async def start_one(i: int) -> None:
        unit = f"{prefix}{i}"
        starts[unit] = time.time()
        try:
            for each in channels:
                # A notice's workflows are `<notice>-sms` and `<notice>-email` (not `/`: the id travels in
                # the SMS floor's callback URL).
                workflow_id = f"{unit}-{each}" if channel == "notice" else unit
                handle = await client.start_workflow(
                    WORKFLOW_NAME,
                    FloorInput(
                        intent_id=workflow_id,
                        to=fresh_address() if each == "email" else fresh_recipient(),
                        body=BODY_TEMPLATE.format(n=i),
                    ),
                    id=workflow_id,
                    task_queue=QUEUES[each],
                )
                runs[workflow_id] = handle.first_execution_run_id or handle.result_run_id
        except Exception:  # noqa: BLE001 - a start that fails is counted as such; the run goes on
            phase.failed_to_start += 1

    async def run() -> bool:
        await offer(n, rate, start_one)
        return await wait_until(lambda: workflows_closed(client, prefix, len(runs)), timeout)

    await bench.measured(phase, ROLES_BY_CHANNEL[channel]["floor"], run)
    group = (lambda workflow_id: workflow_id.rsplit("-", 1)[0]) if channel == "notice" else None
    completed_latencies(phase, starts, await read_histories(client, runs), group)
    phase.states.update({"completed": phase.completed})
    return phase
