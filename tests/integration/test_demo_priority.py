"""`make run`'s priority scene (devstack/demo.py): an account reminder sent on a paced route ahead of
a queued marketing batch, counted at the emulator; and the dev server it plays on, with fairness on."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from devstack.config import DEV_SERVER_MATCHING, PacedRouteDev, load_stack_config
from devstack.demo import Overtaking, PacedRoute, overtaking, urgent_overtakes_batch
from herald.core.lifecycle import IntentState
from tests.integration.routes import route_paced_at
from tests.stack import Emulator

PACE = PacedRouteDev().submit_rate_limit  # the demo route's
BATCH = 24  # the demo queues 40; fewer keep the suite quick and still leave a queue to overtake


def test_the_dev_server_runs_with_fairness_on_one_partition() -> None:
    """temporal-dev.yaml starts the dev server with fairness on and one partition per task queue."""
    assert load_stack_config().temporal.dynamic_config == DEV_SERVER_MATCHING
    assert DEV_SERVER_MATCHING["matching.enableFairness"] is True
    assert DEV_SERVER_MATCHING["matching.numTaskqueueReadPartitions"] == 1


def test_overtaking_is_read_from_the_emulators_creation_order() -> None:
    """The urgent message's position and the batch messages created after it come from the order alone."""
    assert overtaking(["a", "b", "u", "c", "d", "e"], "u") == Overtaking(position=3, sent=6, batch=5, batch_behind=3)
    assert overtaking(["a", "b"], "u") is None


async def test_the_reminder_is_sent_ahead_of_the_queued_batch(
    temporal: Client,
    settings: Any,
    pool: AsyncConnectionPool,
    owner_pool: AsyncConnectionPool,
    receipt_server: str,
    emulator: Emulator,
) -> None:
    """24 promotions (marketing, priority 5) queued on a route paced at 4/s, then a class reminder
    (account, priority 1) once the first promotion is out: each is delivered once, and the reminder
    goes ahead of at least a third of the batch, where first come, first served would send it last."""
    async with (
        route_paced_at(PACE, temporal, settings, pool, emulator.base_url, hold=True) as route,
        httpx.AsyncClient(base_url=emulator.base_url, timeout=5.0) as admin,
    ):
        paced = PacedRoute(route.herald, PACE, route.release)
        rows = await urgent_overtakes_batch(paced, admin, owner_pool, secrets.token_hex(4), 60, batch_size=BATCH)
        listed = (await admin.get("/_emulator/messages")).json()["messages"]
    urgent = rows[-1]
    assert [row.state for row in rows] == [IntentState.DELIVERED] * (BATCH + 1)
    assert [row.messages_at_provider for row in rows] == [1] * (BATCH + 1)
    order = [m["to"] for m in listed if m["to"] in {row.recipient for row in rows}]
    found = overtaking(order, urgent.recipient)
    assert found is not None and found.batch == BATCH
    assert found.batch_behind >= BATCH // 3, found
    # The summary's row says what the emulator's order says.
    said = rf"urgent \(account, priority 1\) sent {found.position}(st|nd|rd|th) of {BATCH + 1} at the emulator, "
    assert re.search(said + rf"{found.batch_behind} of the {BATCH} marketing \(priority 5\)", urgent.note), urgent.note
