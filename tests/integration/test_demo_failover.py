"""`make run`'s Twilio outage scene (devstack/failover_demo.py) against the session's stack: Twilio
refusing connections behind the scene's gate, notices counted at both emulators' admin APIs."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from devstack.failover_demo import AFTER, FIRST_WAVE, PROBE_SECONDS, SECOND_WAVE, play_failover
from devstack.stack import LocalStack
from herald.core.lifecycle import IntentState
from herald.ledger.policy_store import policy_in_force
from herald.runtime.process import ProcessRuntime
from tests.stack import TEST_POLICY, Infobip

# The probe's 30 s wait, the waves' few seconds each, and room for a loaded machine.
BOUND_SECONDS = PROBE_SECONDS + 60


async def test_the_twilio_outage_scene_sends_each_notice_once_through_infobip_then_twilio_again(
    stack: LocalStack, settings: Any, pool: AsyncConnectionPool, receipt_server: str, infobip: Infobip,
    twilio_answering: None,
) -> None:
    """During the outage every notice is delivered once, by Infobip (0 at Twilio; the second wave skips
    Twilio outright); after it the first notice probes Twilio and every later one goes there (0 at
    Infobip); the scene says what it waits for, withdraws its route, and stays within its bound."""
    async with pool.connection() as conn:
        _, before = await policy_in_force(conn, datetime.now(UTC))
    said: list[str] = []
    e = stack.config.emulator
    started = time.monotonic()
    scene = await play_failover(
        ProcessRuntime(settings), pool, f"http://{e.host}:{e.port}", infobip.base_url, TEST_POLICY, say=said.append
    )
    elapsed = time.monotonic() - started
    during = [row for row in scene.rows if row.phase == "outage"]
    after = [row for row in scene.rows if row.phase == "after"]
    assert len(during) == FIRST_WAVE + SECOND_WAVE and len(after) == AFTER
    assert [row.final.state for row in scene.rows] == [IntentState.DELIVERED] * len(scene.rows)
    assert [(row.at_twilio, row.at_infobip, row.delivered_by) for row in during] == [(0, 1, "infobip")] * len(during)
    assert [(row.at_twilio, row.at_infobip, row.delivered_by) for row in after] == [(1, 0, "twilio")] * len(after)
    assert sum(row.second_copies for row in scene.rows) == 0
    # Three Unreachable made the outage: the second wave never tried Twilio.
    for row in during[FIRST_WAVE:]:
        assert [a.provider for a in row.final.attempts] == ["infobip"] and "skipped" in row.route_reason
    assert "probes it" in after[0].route_reason
    assert scene.summary() == (
        f"twilio outage: {len(during)} notices, {len(during)} delivered via infobip, 0 second copies "
        f"(messages at twilio 0, at infobip {len(during)}); after: {AFTER} via twilio "
        f"(messages at twilio {AFTER}, at infobip 0)"
    )
    assert any("waiting" in line and "probe" in line for line in said), said
    async with pool.connection() as conn:
        _, now_in_force = await policy_in_force(conn, datetime.now(UTC))
    assert now_in_force == before
    assert elapsed < BOUND_SECONDS
    print(f"\n{scene.render()}")
