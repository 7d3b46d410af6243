"""Scenario 8 of the fault matrix: a burst of signed reports, all at once, over as many waiting intents.

200 here, on the fault stack. The same at load size (2,000 and more) is the bench's report path,
which checks these invariants too and records its figure (`make bench ARGS="--intents 0
--latency-rate 0 --rate-limit 0 --backlog 0 --receipts 2000 --results bench/RESULTS-burst.md"`):
2,000 took 226 s of a 2-core machine's time as a test, a fifth of the whole suite.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import httpx
import pytest

from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.providers.twilio_signature import compute_signature
from herald.settings import load_settings
from tests import reads
from tests.faults.workers import worker
from tests.stack import TEST_POLICY

INTENTS = 200
# Reports are the only way these intents can finish: no callbacks from the emulator, no polls for an hour.
PARKED = TEST_POLICY.model_copy(
    update={
        "poll_initial": timedelta(hours=1),
        "poll_max": timedelta(hours=1),
        "resolution_horizon": timedelta(hours=2),
        "lookup_max": timedelta(seconds=5),
    }
)


async def _until(pool, sql: str, expected: int, timeout: float, *params) -> int:
    deadline = time.monotonic() + timeout
    value = await reads.scalar(pool, sql, *params)
    while value != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        value = await reads.scalar(pool, sql, *params)
    return value


# Starting 200 intents takes about 10 s at this machine's ~20 intents/s (bench/RESULTS.md).
@pytest.mark.timeout(300)
async def test_burst_of_reports_is_stored_once_and_applied(
    fault_stack: LocalStack, fault_herald: HeraldClient, fault_pool
) -> None:
    """200 signed reports sent at once are each answered 2xx, stored once, and applied: every intent delivered."""
    settings = load_settings(fault_stack.config.service_env(fault_stack.database_url))
    token = settings.twilio.auth_token.get_secret_value()
    emulator_url = f"http://{fault_stack.config.emulator.host}:{fault_stack.config.emulator.port}"
    run = f"burst{int(time.time())}"
    recipients = [f"+1556{index:07d}" for index in range(INTENTS)]
    slots = asyncio.Semaphore(32)
    with worker(fault_stack, "worker-burst"):
        # A pooled connection idle past the emulator's 5 s keep-alive (uvicorn's default) is closed by
        # it, and reusing one just closed is a ReadError: seen while a send waited on a loaded host.
        idle = httpx.Limits(keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=emulator_url, timeout=30, limits=idle) as admin:

            async def start(index: int) -> None:
                async with slots:
                    response = await admin.put(f"/_emulator/faults/{recipients[index]}", json={"fault": "no_callback"})
                    response.raise_for_status()
                    await fault_herald.send(
                        {"business_key": f"order_receipt:{run}_{index}", "recipient": recipients[index],
                         "template_id": "order_receipt", "template_version": 1,
                         "render_data": {"order_ref": f"o{index}", "amount": "1", "currency": "EUR", "merchant": "B"}},
                        policy=PARKED,
                    )  # fmt: skip

            began = time.monotonic()
            await asyncio.gather(*(start(i) for i in range(INTENTS)))
            print(f"\nstarted {INTENTS} intents in {time.monotonic() - began:.0f}s")
            like = f"order_receipt:{run}_%"
            # Parked = the provider holds every message. Counted at the emulator: the ledger records
            # `accepted` only at an intent's first checkpoint (its first poll, an hour away here).
            ours = set(recipients)
            deadline = time.monotonic() + 300
            while True:
                messages = [m for m in (await admin.get("/_emulator/messages")).json()["messages"] if m["to"] in ours]
                if len(messages) >= INTENTS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(1.0)
            if len(messages) != INTENTS:
                async with fault_pool.connection() as conn:
                    states = await (await conn.execute(
                        "SELECT state, count(*) FROM intent_current_state WHERE business_key LIKE %s GROUP BY state",
                        (like,))).fetchall()  # fmt: skip
                raise AssertionError(f"{len(messages)} messages at the provider for {INTENTS} intents; ledger states {states}")
        assert len(messages) == INTENTS  # I1: one message per intent, no more

        async def report(http: httpx.AsyncClient, message: dict) -> int:
            form = {"MessageSid": message["sid"], "MessageStatus": "delivered", "AccountSid": fault_stack.config.emulator.account_sid}
            headers = {"X-Twilio-Signature": compute_signature(token, message["status_callback"], form)}
            async with slots:
                # A post whose connection the loaded server dropped is posted again, as Twilio
                # redelivers a callback it got no answer to; the inbox keeps one row either way.
                for _ in range(2):
                    try:
                        return (await http.post(message["status_callback"], data=form, headers=headers)).status_code
                    except httpx.TransportError:
                        continue
                return (await http.post(message["status_callback"], data=form, headers=headers)).status_code

        began = time.monotonic()
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=32)) as http:
            answers = await asyncio.gather(*(report(http, m) for m in messages))
        stored_in = time.monotonic() - began
        assert answers.count(200) == INTENTS, {code: answers.count(code) for code in set(answers)}
        delivered = await _until(
            fault_pool, "SELECT count(*) FROM intent_current_state WHERE business_key LIKE %s AND state = 'delivered'",
            INTENTS, 240, like,
        )  # fmt: skip
        applied_in = time.monotonic() - began
    assert delivered == INTENTS
    sids = [m["sid"] for m in messages]
    assert await reads.scalar(fault_pool, "SELECT count(*) FROM receipt_inbox WHERE provider_message_id = ANY(%s)", sids) == INTENTS
    undecided = await _until(
        fault_pool, "SELECT count(*) FROM undecided_reports WHERE provider_message_id = ANY(%s)", 0, 60, sids
    )
    assert undecided == 0  # I3: every report ended with a verdict
    print(f"\n{INTENTS} reports: answered and stored in {stored_in:.1f}s ({INTENTS / stored_in:.0f}/s), "
          f"applied to every intent in {applied_in:.1f}s ({INTENTS / applied_in:.0f}/s)")  # fmt: skip
