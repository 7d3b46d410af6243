"""Failover only on proof against real provider servers, counted at the servers.

Two Twilio emulators under two provider names ("primary" and "fallback") stand in for Twilio and
a second SMS provider until the Infobip adapter lands (two workers serve the test's queue, so
failovers race between them): the route rule and the submit activity know
providers only by name, so what is proven here is the routing, not Infobip's API. The primary sits
behind a TCP proxy that can refuse connections (``tests/integration/refusing_proxy.py``); the send
policy routes SMS to ["primary", "fallback", "twilio"] ("twilio" last, for the session's own
workers, which have neither of the others; this test's workers do not have "twilio").

Reports from both emulators reach the one receipt server as Twilio reports (the same account and
token sign them), and each names its attempt, so each settles its own intent.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.processes import ManagedProcess, free_port, wait_for_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.message import Channel
from herald.core.routes import OUTAGE_AFTER, PROBE_AFTER
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.policy_store import publish_policy
from herald.ledger.report import ledger_report
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.registry import Providers
from herald.providers.twilio import TwilioAdapter
from herald.temporal.client import connect
from tests import reads
from tests.integration.refusing_proxy import RefusingProxy
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import ADAPTER_READ_TIMEOUT, TEST_POLICY, Emulator
from worker import build_submit_worker, build_worker

WAIT = 90.0


class Primary(TwilioAdapter):
    """Twilio's adapter under the route name "primary" (the stack's emulator, behind the proxy)."""

    name: ClassVar[str] = "primary"


class Fallback(TwilioAdapter):
    """Twilio's adapter under the route name "fallback" (a second emulator of its own)."""

    name: ClassVar[str] = "fallback"


class TwoProviders:
    def __init__(self, herald: HeraldClient, proxy: RefusingProxy, primary: Emulator, fallback: Emulator) -> None:
        self.herald, self.proxy, self.primary, self.fallback = herald, proxy, primary, fallback

    async def counts(self, to: str) -> tuple[int, int]:
        """Messages the primary and the fallback server hold for `to`."""
        return len(await self.primary.messages(to)), len(await self.fallback.messages(to))


@pytest.fixture(scope="module")
async def two(
    stack: LocalStack, settings: Any, temporal: Client, pool: AsyncConnectionPool, receipt_server: str
) -> AsyncIterator[TwoProviders]:
    e = stack.config.emulator
    port = free_port()
    argv = [
        sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", str(port), "--account-sid", e.account_sid,
        "--auth-token", e.auth_token, "--step-ms", str(e.step_ms), "--log-level", "warning",
    ]  # fmt: skip
    process = ManagedProcess("emulator-fallback", argv, env={"PYTHONUNBUFFERED": "1"},
                             log_path=stack.log_dir / "emulator-fallback.log")  # fmt: skip
    process.start()
    proxy = RefusingProxy(e.host, e.port)
    await proxy.start()
    try:
        await asyncio.to_thread(wait_for_port, "127.0.0.1", port, 30, process.process)
        primary = Primary(settings.twilio.model_copy(update={"api_base": proxy.url}))
        fallback = Fallback(settings.twilio.model_copy(update={"api_base": f"http://127.0.0.1:{port}"}))
        queue = f"herald-routes-{secrets.token_hex(3)}"
        on_queue = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": queue})})
        workers = []
        # Two workers on one queue, each with its own client connection: failovers race between them.
        for client in (temporal, await connect(settings.temporal)):
            activities = ProviderActivities(
                Providers({Channel.SMS: [primary, fallback]}), settings.receipts.public_url, pool,
                vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING,
            )  # fmt: skip
            ledger = LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS))
            workers += [build_worker(client, on_queue, ledger, activities),
                        build_submit_worker(client, on_queue, activities)]  # fmt: skip
        runs = [asyncio.create_task(worker.run()) for worker in workers]
        route = ["primary", "fallback", "twilio"]
        rules = PolicyRules(sms_routes={category: {"*": route} for category in Category})
        await publish_policy(pool, rules, effective_from=datetime.now(UTC), owner="tests", note="two providers")
        herald = HeraldClient(temporal, queue, policy=TEST_POLICY, keyring=SESSION_KEYRING)
        async with Emulator.of(stack) as at_primary, Emulator(f"http://127.0.0.1:{port}") as at_fallback:
            yield TwoProviders(herald, proxy, at_primary, at_fallback)
        await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
        await asyncio.gather(*(worker.shutdown() for worker in workers), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)
        await primary.aclose()
        await fallback.aclose()
    finally:
        await proxy.accept()
        await proxy.close()
        process.stop()


async def _route_reasons(pool: AsyncConnectionPool, workflow_id: str) -> list[tuple[str, str]]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT provider, route_reason FROM attempts WHERE workflow_id = %s ORDER BY number", (workflow_id,)
        )
        return await cursor.fetchall()


async def test_primary_refusing_connections_every_intent_goes_once_through_the_fallback(
    two: TwoProviders, pool: AsyncConnectionPool
) -> None:
    """Primary down (connection refused): each intent is delivered once, by the fallback (0 at the
    primary); after three Unreachable the primary is skipped outright; back, it gets one probe after
    30 s of quiet, and once that is answered new intents go to it again."""
    await two.proxy.refuse()
    window = {fresh_key(): fresh_recipient() for _ in range(6)}
    started = datetime.now(UTC)
    try:
        await asyncio.gather(*(two.herald.send(receipt_request(key, to)) for key, to in window.items()))
        finals = await asyncio.gather(*(reads.final(two.herald, key, Channel.SMS, WAIT) for key in window))
        later_key, later_to = fresh_key(), fresh_recipient()
        await two.herald.send(receipt_request(later_key, later_to))
        later = await reads.final(two.herald, later_key, Channel.SMS, WAIT)
        report = await ledger_report(pool)
    finally:
        await two.proxy.accept()
    for final, to in zip(finals, window.values(), strict=True):
        assert final.state is IntentState.DELIVERED, final.transitions
        # Tried at the primary first, unless three others had already found it down.
        assert [a.provider for a in final.attempts] in (["primary", "fallback"], ["fallback"])
        assert final.attempts[0].submit_result in (SubmitResult.UNREACHABLE, SubmitResult.ACCEPTED)
        assert await two.counts(to) == (0, 1)
    failed_over = [f for f in finals if len(f.attempts) == 2]
    assert len(failed_over) >= OUTAGE_AFTER  # an outage is three Unreachable, then intents skip it
    # Failed over at once: no backoff between a's Unreachable and b's submit.
    gaps = [(f.attempts[1].started_at - f.attempts[0].started_at).total_seconds() for f in failed_over]
    assert max(gaps) < TEST_POLICY.backoff_initial.total_seconds() + 1.0, gaps
    # Three Unreachable marked the primary in outage: the next intent skipped it.
    assert later.state is IntentState.DELIVERED and [a.provider for a in later.attempts] == ["fallback"]
    assert await two.counts(later_to) == (0, 1)
    [(provider, reason)] = await _route_reasons(pool, later.workflow_id)
    assert provider == "fallback" and "primary in outage since" in reason and "skipped" in reason
    [state] = [s for s in report.provider_states if s.provider == "primary"]
    assert state.outage_since is not None and state.outage_since >= started
    assert "providers skipped by routes (in outage)   primary since" in report.render()

    # Back: the first intent after the quiet period probes the primary; its answer ends the outage.
    await asyncio.sleep(PROBE_AFTER.total_seconds() + 1)
    probe_key, probe_to = fresh_key(), fresh_recipient()
    await two.herald.send(receipt_request(probe_key, probe_to))
    probe = await reads.final(two.herald, probe_key, Channel.SMS, WAIT)
    assert [a.provider for a in probe.attempts] == ["primary"] and await two.counts(probe_to) == (1, 0)
    [(_, reason)] = await _route_reasons(pool, probe.workflow_id)
    assert "this attempt probes it" in reason
    after_key, after_to = fresh_key(), fresh_recipient()
    await two.herald.send(receipt_request(after_key, after_to))
    after = await reads.final(two.herald, after_key, Channel.SMS, WAIT)
    assert [a.provider for a in after.attempts] == ["primary"] and await two.counts(after_to) == (1, 0)
    assert not [s for s in (await ledger_report(pool)).provider_states if s.provider == "primary" and s.outage_since]
    print(f"\nprimary refusing: {len(window)} intents, {len(failed_over)} tried the primary first (1 request there, "
          f"nothing sent), the rest skipped it; failover gap "
          f"max {max(gaps):.2f} s; probe after {PROBE_AFTER.total_seconds():g} s quiet answered, outage ended")  # fmt: skip


async def test_primary_accepting_and_hanging_never_fails_over(two: TwoProviders, pool: AsyncConnectionPool) -> None:
    """Primary accepts and hangs (answers lost): each intent is resolved at the primary by lookups
    and delivered there; the fallback receives nothing (0 copies)."""
    window = {fresh_key(): fresh_recipient() for _ in range(3)}
    for to in window.values():
        await two.primary.arm(to, "accept_then_hang", hang_seconds=ADAPTER_READ_TIMEOUT * 3, count=1)
    await asyncio.gather(*(two.herald.send(receipt_request(key, to)) for key, to in window.items()))
    finals = await asyncio.gather(*(reads.final(two.herald, key, Channel.SMS, WAIT) for key in window))
    for final, to in zip(finals, window.values(), strict=True):
        assert final.state is IntentState.DELIVERED, final.transitions
        assert [(a.provider, a.submit_result) for a in final.attempts] == [("primary", SubmitResult.UNKNOWN)]
        assert await two.counts(to) == (1, 0)
