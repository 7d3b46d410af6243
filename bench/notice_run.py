"""The two-channel notice pass: one notice (an SMS and an e-mail) through Herald against two floor workflows.

Herald: `HeraldClient.send_notice`, one intent per channel under one business key (`<key>/sms`,
`<key>/email`), through the one worker and receipt server, to the SMS emulator and the ESP. The
floor: the same notice as a team without Herald would send it, two floor workflows started one
after the other (`bench.floor_run`, channel "notice"), one on the SMS queue and one on the e-mail
queue, to the SMS emulator and the bench's ESP. A notice is done when both of its workflows
completed, at the later close; its CPU and billable actions are both channels'.
"""

from __future__ import annotations

import time
from collections import Counter
from functools import partial
from typing import Any

from bench.common import (
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
from bench.context import NOTICE_ROLES, Bench
from bench.floor_run import run_floor
from bench.passes import Runner


def notice_request(key: str, index: int) -> dict[str, Any]:
    """The order receipt as one notice: the SMS and the e-mail template, to fresh recipients."""
    data = {"order_ref": f"ord_{index}", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    return {
        "business_key": key,
        "channels": [
            {"channel": "sms", "recipient": fresh_recipient(), "template_id": "order_receipt", "template_version": 1,
             "render_data": data},
            {"channel": "email", "recipient": fresh_address(), "template_id": "order_receipt_email",
             "template_version": 1, "render_data": data},
        ],
    }  # fmt: skip


async def send_notices(
    bench: Bench, n: int, rate: float | None, prefix: str, phase: Phase | None = None
) -> tuple[dict[str, float], dict[str, str | None]]:
    """Send n notices keyed `prefix<i>`; returns start times by key and first run ids by workflow id."""
    starts: dict[str, float] = {}
    runs: dict[str, str | None] = {}

    async def start_one(index: int) -> None:
        key = f"{prefix}{index}"
        starts[key] = time.time()
        try:
            receipt = await bench.herald.send_notice(notice_request(key, index))
        except Exception:  # noqa: BLE001 - a send that fails is counted as such; the run goes on
            if phase is None:
                raise
            phase.failed_to_start += 1
            return
        for sent in receipt.intents.values():
            runs[sent.workflow_id] = sent.run_id

    await offer(n, rate, start_one)
    return starts, runs


async def run_herald_notices(bench: Bench, n: int, rate: float | None, timeout: float) -> Phase:
    phase = Phase("herald", rate, n)
    prefix = f"order_receipt:notice_{new_tag()}_"
    started: dict[str, Any] = {}

    async def run() -> bool:
        started["starts"], started["runs"] = await send_notices(bench, n, rate, prefix, phase)
        return await wait_until(lambda: workflows_closed(bench.herald_temporal, prefix, len(started["runs"])), timeout)

    await bench.measured(phase, NOTICE_ROLES["herald"], run)
    figures = await read_histories(bench.herald_temporal, started["runs"])
    completed_latencies(phase, started["starts"], figures, group=lambda workflow_id: workflow_id.rsplit("/", 1)[0])
    phase.states = await notice_states(bench, prefix)
    return phase


async def notice_states(bench: Bench, prefix: str) -> Counter[str]:
    """The final states of the notices keyed `prefix...`, by channel ("sms delivered": count)."""
    async with bench.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT channel || ' ' || state, count(*) FROM intent_current_state WHERE business_key LIKE %s GROUP BY 1",
            (prefix + "%",))).fetchall()  # fmt: skip
    return Counter({name: count for name, count in rows})


NOTICE_RUNNERS: dict[str, Runner] = {"floor": partial(run_floor, channel="notice"), "herald": run_herald_notices}
