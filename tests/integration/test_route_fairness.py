"""Tenants share a backlogged route: the Temporal server's fairness keys (the intent's tenant)
let a tenant that starts after another's large batch through at its share, not behind it."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.core.lifecycle import IntentState
from herald.core.send_policy import PolicyRules
from herald.ledger.policy_store import publish_policy
from tests.integration.routes import route_paced_at
from tests.integration.test_route_priority import _accepted_order
from tests.intents import fresh_key, fresh_recipient, receipt_request

PACE = 5.0
BIG, SMALL = 60, 10


async def _small_among_big(
    emulator_url: str, big: list[tuple[str, str]], small: list[tuple[str, str]]
) -> tuple[list[int], int, int]:
    """Where the small tenant's messages stand in the order the provider accepted them all (each once):
    their positions, the big tenant's messages among them, and the big tenant's after the last of them."""
    small_to = {to for _, to in small}
    order = await _accepted_order(emulator_url, small_to | {to for _, to in big})
    assert len(order) == len(big) + len(small) and len(set(order)) == len(big) + len(small)  # each sent once
    positions = [n for n, to in enumerate(order) if to in small_to]
    big_between = sum(1 for to in order[positions[0] : positions[-1] + 1] if to not in small_to)
    big_after = sum(1 for to in order[positions[-1] + 1 :] if to not in small_to)
    return positions, big_between, big_after


async def test_a_small_tenant_is_not_queued_behind_a_large_tenants_batch(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, receipt_server: str, limited_emulator: str
) -> None:
    """Tenant "big" queues 60 intents on a route paced at 5/s; tenant "small" then queues 10 at the
    same priority and weight, behind them. The small tenant's 10 are all submitted while the big one
    still has a backlog, the two alternating (measured: small at 2, 5, 6, 8, ..., 20; 9 big submits
    among its 10, 50 big ones after its last)."""
    big = [(fresh_key(), fresh_recipient()) for _ in range(BIG)]
    small = [(fresh_key(), fresh_recipient()) for _ in range(SMALL)]
    async with route_paced_at(PACE, temporal, settings, pool, limited_emulator, hold=True) as route:
        herald = route.herald
        # The big tenant's backlog is queued at the server first, then the small tenant's.
        for tenant, intents in (("big", big), ("small", small)):
            await asyncio.gather(*(herald.send(receipt_request(k, to, tenant=tenant)) for k, to in intents))
            while not all(status.attempts for status in await asyncio.gather(*(herald.status(k) for k, _ in intents))):
                await asyncio.sleep(0.5)  # each round queries every workflow: not too often
        await route.release()
        finals = await asyncio.wait_for(asyncio.gather(*(herald.wait(k) for k, _ in [*big, *small])), BIG / PACE + 60)
    assert [final.state for final in finals] == [IntentState.DELIVERED] * (BIG + SMALL)
    positions, big_between, big_after = await _small_among_big(limited_emulator, big, small)
    print(f"\nsmall tenant at positions {[p + 1 for p in positions]}: {big_between} big submits among its "
          f"{SMALL}, {big_after} big ones still queued after its last")  # fmt: skip
    # Shared, not queued behind: the big tenant still had a backlog when the small one finished
    # (first come, first served would put the small tenant's 10 after all 60: none after), and while
    # both waited they took turns about one for one, as their weights (1 and 1) say.
    assert big_after >= 10, positions
    assert SMALL // 2 <= big_between <= 2 * SMALL, positions


async def test_a_tenants_published_weight_gives_it_that_share_of_the_route(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, receipt_server: str, limited_emulator: str
) -> None:
    """As above, with the policy giving the small tenant weight 3 (the big one has none: weight 1):
    while both wait, the small tenant's submits go out about three for each of the big one's.
    Measured: the 12 small submits at positions 1-3, 5-7, 9-11, 13-15, 3 big ones among them (4 : 1;
    with equal weights 9 big among 10 small, about 1 : 1)."""
    big_tenant, small_tenant = f"big-{secrets.token_hex(3)}", f"small-{secrets.token_hex(3)}"
    rules = PolicyRules(tenant_weights={small_tenant: 3.0})
    await publish_policy(pool, rules, effective_from=datetime.now(UTC), owner="tests", note="weighted tenant")
    small_count = 12
    big = [(fresh_key(), fresh_recipient()) for _ in range(BIG)]
    small = [(fresh_key(), fresh_recipient()) for _ in range(small_count)]
    try:
        async with route_paced_at(PACE, temporal, settings, pool, limited_emulator, hold=True) as route:
            herald = route.herald
            for tenant, intents in ((big_tenant, big), (small_tenant, small)):
                await asyncio.gather(*(herald.send(receipt_request(k, to, tenant=tenant)) for k, to in intents))
                while not all(s.attempts for s in await asyncio.gather(*(herald.status(k) for k, _ in intents))):
                    await asyncio.sleep(0.5)
            await route.release()
            finals = await asyncio.wait_for(
                asyncio.gather(*(herald.wait(k) for k, _ in [*big, *small])), BIG / PACE + 60
            )
            weights = {a.fairness_weight for k, _ in small for a in (await herald.status(k)).attempts}
    finally:
        await publish_policy(
            pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again"
        )
    assert [final.state for final in finals] == [IntentState.DELIVERED] * (BIG + small_count)
    assert weights == {3.0}  # each attempt records the weight it was dispatched with
    positions, big_between, big_after = await _small_among_big(limited_emulator, big, small)
    print(f"\nweighted 3:1, small tenant at positions {[p + 1 for p in positions]}: {big_between} big submits "
          f"among its {small_count} ({small_count / max(big_between, 1):.1f} : 1), {big_after} big ones after")  # fmt: skip
    assert big_after >= 30, positions
    # About 3 : 1 while both wait (equal weights gave about 1 : 1); at least 2 : 1 on a busy host.
    assert big_between <= small_count // 2, positions
