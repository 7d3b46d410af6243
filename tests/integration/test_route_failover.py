"""Failover only on proof against the real providers' emulators, counted at the emulators.

Twilio (the stack's Twilio emulator, behind a TCP proxy that can refuse connections:
``tests/integration/refusing_proxy.py``) is the primary and Infobip (the stack's Infobip emulator,
through Herald's Infobip adapter) the fallback: the send policy routes SMS to ["twilio", "infobip"].
Two workers serve the test's own queue, so failovers race between them. Each provider reports to
the one receipt server on its own route (Twilio's signed form, Infobip's JSON with its callbackData
HMAC), and each report names its attempt, so each settles its own intent.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.message import Channel
from herald.core.routes import OUTAGE_AFTER
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.history import intent_history
from herald.ledger.policy_store import publish_policy
from herald.ledger.report import ledger_report
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.registry import Providers
from herald.providers.infobip import InfobipAdapter
from herald.providers.twilio import TwilioAdapter
from herald.temporal.client import connect
from tests import reads
from tests.integration.refusing_proxy import RefusingProxy
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import ADAPTER_READ_TIMEOUT, TEST_POLICY, Emulator, Infobip
from worker import build_submit_worker, build_worker

WAIT = 90.0
# The published policy's probe interval (the default is 30 s): the probe's mechanics, in less time.
PROBE_SECONDS = 8


class TwoProviders:
    def __init__(self, herald: HeraldClient, proxy: RefusingProxy, primary: Emulator, fallback: Infobip) -> None:
        self.herald, self.proxy, self.primary, self.fallback = herald, proxy, primary, fallback

    async def counts(self, to: str) -> tuple[int, int]:
        """Messages Twilio's and Infobip's emulators accepted for `to`."""
        return len(await self.primary.messages(to)), len(await self.fallback.messages(to))


@pytest.fixture(scope="module")
async def two(
    stack: LocalStack, settings: Any, temporal: Client, pool: AsyncConnectionPool, receipt_server: str,
    infobip: Infobip, twilio_answering: None,
) -> AsyncIterator[TwoProviders]:
    e = stack.config.emulator
    proxy = RefusingProxy(e.host, e.port)
    await proxy.start()
    try:
        primary = TwilioAdapter(settings.twilio.model_copy(update={"api_base": proxy.url}))
        fallback = InfobipAdapter(settings.infobip)
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
        rules = PolicyRules(sms_routes={category: {"*": ["twilio", "infobip"]} for category in Category},
                            provider_probe_after_seconds=PROBE_SECONDS)  # fmt: skip
        await publish_policy(pool, rules, effective_from=datetime.now(UTC), owner="tests", note="two providers")
        herald = HeraldClient(temporal, queue, policy=TEST_POLICY, keyring=SESSION_KEYRING)
        async with Emulator.of(stack) as at_twilio:
            yield TwoProviders(herald, proxy, at_twilio, infobip)
        await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
        await asyncio.gather(*(worker.shutdown() for worker in workers), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)
        await primary.aclose()
        await fallback.aclose()
    finally:
        await proxy.accept()
        await proxy.close()


async def _route_reasons(pool: AsyncConnectionPool, workflow_id: str) -> list[tuple[str | None, str | None]]:
    # As an operator reads them: `starter.py status KEY --channel sms` prints the ledger's history.
    history = await intent_history(pool, workflow_id)
    assert history is not None
    return [(attempt.provider, attempt.route_reason) for attempt in history.attempts]


async def test_twilio_refusing_connections_every_intent_goes_once_through_infobip(
    two: TwoProviders, pool: AsyncConnectionPool
) -> None:
    """Primary down (connection refused): each intent is delivered once, by the fallback (0 at the
    primary); after three Unreachable the primary is skipped outright; back, it gets one probe after
    the published policy's probe interval of quiet (8 s here, 30 s by default), and once that is answered
    new intents go to it again."""
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
        assert [a.provider for a in final.attempts] in (["twilio", "infobip"], ["infobip"])
        assert final.attempts[0].submit_result in (SubmitResult.UNREACHABLE, SubmitResult.ACCEPTED)
        assert await two.counts(to) == (0, 1)
    failed_over = [f for f in finals if len(f.attempts) == 2]
    assert len(failed_over) >= OUTAGE_AFTER  # an outage is three Unreachable, then intents skip it
    # Failed over at once: no backoff between a's Unreachable and b's submit.
    gaps = [(f.attempts[1].started_at - f.attempts[0].started_at).total_seconds() for f in failed_over]
    assert max(gaps) < TEST_POLICY.backoff_initial.total_seconds() + 1.0, gaps
    # Three Unreachable marked the primary in outage: the next intent skipped it.
    assert later.state is IntentState.DELIVERED and [a.provider for a in later.attempts] == ["infobip"]
    assert await two.counts(later_to) == (0, 1)
    [(provider, reason)] = await _route_reasons(pool, later.workflow_id)
    assert provider == "infobip" and "twilio in outage since" in reason and "skipped" in reason
    [state] = [s for s in report.provider_states if s.provider == "twilio"]
    assert state.outage_since is not None and state.outage_since >= started
    # Other tests' providers (this process's ledger) may be listed beside it.
    [skipped] = [line for line in report.render().splitlines() if line.startswith("providers skipped by routes")]
    assert " twilio since " in skipped, skipped

    # Back: the first intent after the quiet period probes the primary; its answer ends the outage.
    await asyncio.sleep(PROBE_SECONDS + 1)
    probe_key, probe_to = fresh_key(), fresh_recipient()
    await two.herald.send(receipt_request(probe_key, probe_to))
    probe = await reads.final(two.herald, probe_key, Channel.SMS, WAIT)
    assert [a.provider for a in probe.attempts] == ["twilio"] and await two.counts(probe_to) == (1, 0)
    [(_, reason)] = await _route_reasons(pool, probe.workflow_id)
    assert "this attempt probes it" in reason
    after_key, after_to = fresh_key(), fresh_recipient()
    await two.herald.send(receipt_request(after_key, after_to))
    after = await reads.final(two.herald, after_key, Channel.SMS, WAIT)
    assert [a.provider for a in after.attempts] == ["twilio"] and await two.counts(after_to) == (1, 0)
    assert not [s for s in (await ledger_report(pool)).provider_states if s.provider == "twilio" and s.outage_since]
    print(f"\nprimary refusing: {len(window)} intents, {len(failed_over)} tried the primary first (1 request there, "
          f"nothing sent), the rest skipped it; failover gap "
          f"max {max(gaps):.2f} s; probe after {PROBE_SECONDS} s quiet answered, outage ended")  # fmt: skip


async def test_twilio_accepting_and_hanging_never_fails_over_to_infobip(two: TwoProviders, pool: AsyncConnectionPool) -> None:
    """Primary accepts and hangs (answers lost): each intent is resolved at the primary by lookups
    and delivered there; the fallback receives nothing (0 copies)."""
    window = {fresh_key(): fresh_recipient() for _ in range(3)}
    for to in window.values():
        await two.primary.arm(to, "accept_then_hang", hang_seconds=ADAPTER_READ_TIMEOUT * 3, count=1)
    await asyncio.gather(*(two.herald.send(receipt_request(key, to)) for key, to in window.items()))
    finals = await asyncio.gather(*(reads.final(two.herald, key, Channel.SMS, WAIT) for key in window))
    for final, to in zip(finals, window.values(), strict=True):
        assert final.state is IntentState.DELIVERED, final.transitions
        assert [(a.provider, a.submit_result) for a in final.attempts] == [("twilio", SubmitResult.UNKNOWN)]
        assert await two.counts(to) == (1, 0)


async def test_twilio_answering_5xx_after_acceptance_never_fails_over_to_infobip(two: TwoProviders) -> None:
    """Twilio creates the message, then answers 500 or 503 (the answer says nothing was done, the
    provider did it anyway): each intent is looked up at Twilio, found and delivered there; 0 at
    Infobip, 1 at Twilio."""
    window = {fresh_key(): (fresh_recipient(), status) for status in (500, 503, 500)}
    for to, status in window.values():
        await two.primary.arm(to, "accept_then_error", status=status, count=1)
    await asyncio.gather(*(two.herald.send(receipt_request(key, to)) for key, (to, _) in window.items()))
    finals = await asyncio.gather(*(reads.final(two.herald, key, Channel.SMS, WAIT) for key in window))
    for final, (to, _) in zip(finals, window.values(), strict=True):
        assert final.state is IntentState.DELIVERED, final.transitions
        assert [(a.provider, a.submit_result) for a in final.attempts] == [("twilio", SubmitResult.UNKNOWN)]
        assert await two.counts(to) == (1, 0)
