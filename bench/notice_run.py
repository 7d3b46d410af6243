"""Two-channel notices for the bench: the order receipt as one notice (an SMS and an e-mail), sent n at a time.

Herald sends a notice with `HeraldClient.send_notice`: one intent per channel under one business
key (`<key>/sms`, `<key>/email`). The notice pass (`python -m bench --channel email --notice`,
bench/email_bench.py) runs them through `run_herald` against the floor's two workflows a notice
(`run_floor`); the scale-out check counts their actions per channel.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from bench.common import Phase, fresh_address, fresh_recipient, offer
from bench.context import Bench


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


async def notice_states(bench: Bench, prefix: str) -> Counter[str]:
    """The final states of the notices keyed `prefix...`, by channel ("sms delivered": count)."""
    async with bench.pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT channel || ' ' || state, count(*) FROM intent_current_state WHERE business_key LIKE %s GROUP BY 1",
            (prefix + "%",))).fetchall()  # fmt: skip
    return Counter({name: count for name, count in rows})
