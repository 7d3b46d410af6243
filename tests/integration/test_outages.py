"""Outages, for real: a webhook endpoint that refuses connections while ambiguous e-mails go out, an ESP
lookup that answers, lags, throttles or fails, and a relay and a Twilio API that refuse connections.

Everything down is really down: a TCP proxy in front of the receipt server, the relay and the Twilio
emulator stops listening and cuts its connections (``tests/integration/refusing_proxy.py``). The ESP here is its
own emulator instance (signing with the stack's key, so the real receipt server verifies it) whose
events reach the receipt server only through that proxy, and which redelivers failed posts as SendGrid
does, for a bounded period. Copies are counted at the relay and the emulator, never in Herald.

The outages are compressed to seconds with the test policy's clocks (backoff capped at 2 s instead of
10 min); ``HERALD_OUTAGE_SECONDS`` stretches them (the closing note's 2-minute runs).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.stack import LocalStack
from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer, load_private_key
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus, attempt_ref
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.message import Channel
from herald.core.send_policy import Category, CategoryRules, PolicyRules
from herald.ledger.policy_store import publish_policy
from herald.ledger.report import ledger_report
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.sendgrid_activity import SendGridActivity
from herald.providers.smtp import SmtpAdapter
from herald.providers.twilio import TwilioAdapter
from herald.settings import SendGridActivitySettings
from tests import reads
from tests.integration.refusing_proxy import RefusingProxy
from tests.intents import email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator, Esp
from worker import build_submit_worker, build_worker

OUTAGE = float(os.environ.get("HERALD_OUTAGE_SECONDS", "12"))
ACTIVITY_KEY = "SG.outage-test-activity-key"
# The emulator redelivers a failed post 0.5, 1, 2 s later, then at a capped interval: past the outage,
# as SendGrid does for 24 hours. The policy's redelivery period says the same of it (a few seconds
# more), as production's says 24 hours of SendGrid.
REDELIVERY = {
    "webhook_max_attempts": 10 if OUTAGE <= 12 else 20,
    "webhook_first_retry_seconds": 0.5,
    "webhook_max_retry_seconds": 4.0 if OUTAGE <= 12 else 15.0,
}
REDELIVERY_SPAN = sum(EspConfig(**REDELIVERY).webhook_retry_delays())
assert REDELIVERY_SPAN > OUTAGE + 10, "the emulator must still be redelivering when the webhook returns"
POLICY = TEST_POLICY.model_copy(
    update={
        "event_redelivery_period": timedelta(seconds=REDELIVERY_SPAN + 3),
        "resolution_horizon": timedelta(seconds=REDELIVERY_SPAN + 60),
    }
)
WAIT = REDELIVERY_SPAN + 90


class Outages:
    """The proxies that take things down, the ESP behind them, and a client per worker set."""

    def __init__(self, webhook: RefusingProxy, relay: RefusingProxy, twilio: RefusingProxy, esp: EspServer) -> None:
        self.webhook, self.relay, self.twilio, self.esp = webhook, relay, twilio, esp
        self.admin = Esp(f"http://127.0.0.1:{esp.admin_port}")
        self.events_only: HeraldClient
        self.with_feed: HeraldClient


@pytest.fixture(scope="module")
async def outages(
    stack: LocalStack, settings: Any, temporal: Client, pool: AsyncConnectionPool, receipt_server: str
) -> AsyncIterator[Outages]:
    webhook = RefusingProxy("127.0.0.1", settings.receipts.port)
    await webhook.start()
    esp = EspServer(
        EspConfig(
            smtp_port=0,
            admin_port=0,
            webhook_url=f"{webhook.url}/sendgrid/events",
            step_ms=20,
            activity_api_key=ACTIVITY_KEY,
            activity_lag_ms=500,
            activity_requests_per_minute=None,
            **REDELIVERY,
        ),  # fmt: skip
        private_key=load_private_key(stack.config.esp_signing_key_path),
    )
    await esp.start()
    relay = RefusingProxy("127.0.0.1", esp.smtp_port)
    twilio = RefusingProxy(stack.config.emulator.host, stack.config.emulator.port)
    await relay.start()
    await twilio.start()
    found = Outages(webhook, relay, twilio, esp)
    smtp = settings.email.model_copy(update={"host": "127.0.0.1", "port": relay.port})
    sms = settings.twilio.model_copy(update={"api_base": twilio.url})
    feed = SendGridActivitySettings(
        api_base=f"http://127.0.0.1:{esp.admin_port}", api_key=ACTIVITY_KEY, requests_per_minute=600, lag_seconds=2
    )
    adapters = [
        TwilioAdapter(sms),
        SmtpAdapter(smtp, keyring=SESSION_KEYRING),
        TwilioAdapter(sms),
        SmtpAdapter(smtp, SendGridActivity(feed), keyring=SESSION_KEYRING),
    ]
    workers = []
    for name, (twilio_adapter, smtp_adapter) in {"events": adapters[:2], "feed": adapters[2:]}.items():
        queue = f"herald-outages-{name}-{secrets.token_hex(3)}"
        on_queue = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": queue})})
        providers = {Channel.SMS: twilio_adapter, Channel.EMAIL: smtp_adapter}
        activities = ProviderActivities(
            providers,
            settings.receipts.public_url,
            pool,
            vault=RecipientVault(pool, SESSION_KEKS),
            keyring=SESSION_KEYRING,
        )
        ledger = LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS))
        workers += [build_worker(temporal, on_queue, ledger, activities),
                    build_submit_worker(temporal, on_queue, activities)]  # fmt: skip
        client = HeraldClient(temporal, queue, policy=POLICY, keyring=SESSION_KEYRING)
        if name == "events":
            found.events_only = client
        else:
            found.with_feed = client
    runs = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        yield found
    finally:
        for proxy in (webhook, relay, twilio):
            await proxy.accept()
        await asyncio.gather(*(worker.shutdown() for worker in workers), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)
        for adapter in adapters:
            await adapter.aclose()
        await found.admin.aclose()
        await esp.stop()
        for proxy in (webhook, relay, twilio):
            await proxy.close()


# ---- the event webhook down while ambiguous e-mails go out ------------------------------------------


async def test_webhook_down_ambiguous_emails_settle_on_their_redelivered_events_with_no_second_copy(
    outages: Outages, pool: AsyncConnectionPool
) -> None:
    """With the receipt server unreachable, e-mails whose connection dropped after DATA (the relay has
    them, their events wait in the ESP's redelivery) and one the relay never took go out. While the
    stream is silent each says why it waits; none is resent. When the webhook is back, each accepted
    one settles on its redelivered events (one copy each); the one never taken is resent only once the
    stream has passed it and the ESP's redelivery period after the interruption has ended (one copy)."""
    herald, esp = outages.events_only, outages.admin
    await outages.webhook.refuse()
    ambiguous = {fresh_key(): fresh_address() for _ in range(4)}
    for to in ambiguous.values():
        await esp.arm(to, "drop_after_data", count=1)
    never_key, never_to = fresh_key(), fresh_address()
    await esp.arm(never_to, "drop_during_data", count=1)
    for key, to in [*ambiguous.items(), (never_key, never_to)]:
        await herald.send(email_request(key, to))

    async def all_waiting() -> list[str] | None:
        statuses = [await herald.status(key, Channel.EMAIL) for key in [*ambiguous, never_key]]
        reasons = [s.attempts[0].waiting for s in statuses if s.attempts and s.attempts[0].waiting]
        return reasons if len(reasons) == len(statuses) else None

    waiting = await reads.eventually(all_waiting, "every ambiguous e-mail waiting on the silent stream", OUTAGE)
    assert waiting and all(reason.startswith("waiting: event stream silent since") for reason in waiting), waiting

    async def reported_waiting() -> int:
        during = await ledger_report(pool, stream_lag=POLICY.event_stream_lag)
        return sum(s.waiting_intents for s in during.event_streams if s.provider == "sendgrid") >= len(waiting)

    await reads.eventually(reported_waiting, "the report counting them as waiting", 10)
    await asyncio.sleep(max(0.0, OUTAGE - POLICY.event_evidence_window.total_seconds()))
    assert [len(await esp.messages(to)) for to in ambiguous.values()] == [1] * len(ambiguous)
    assert await esp.messages(never_to) == []

    await outages.webhook.accept()
    # Traffic after the outage: fresh events for a later submission show the stream flowing past.
    later_key, later_to = fresh_key(), fresh_address()
    await herald.send(email_request(later_key, later_to))
    keys = [*ambiguous, never_key, later_key]
    finals = await asyncio.gather(*(reads.final(herald, key, Channel.EMAIL, WAIT) for key in keys))
    for final, to in zip(finals[: len(ambiguous)], ambiguous.values(), strict=True):
        assert final.state is IntentState.DELIVERED, final.transitions
        assert [a.submit_result for a in final.attempts] == [SubmitResult.UNKNOWN]
        assert len(await esp.messages(to)) == 1
    never = finals[len(ambiguous)]
    assert never.state is IntentState.DELIVERED, never.transitions
    assert [a.submit_result for a in never.attempts] == [SubmitResult.NO_EVIDENCE, SubmitResult.ACCEPTED]
    [copy] = await esp.messages(never_to)
    assert copy["unique_args"]["herald_attempt"] == attempt_ref(f"{never_key}/email", 2)
    presumed = next(t.reason for t in never.transitions if t.to_state is IntentState.RETRYABLE_FAILURE)
    assert "rule event_stream_silence" in presumed and "redelivery period after an interruption" in presumed
    resent_at = (never.attempts[1].started_at - never.attempts[0].started_at).total_seconds()
    print(f"\nwebhook down {OUTAGE:g} s: {len(ambiguous)} ambiguous e-mails, 1 copy each at the relay; "
          f"the one never taken resent {resent_at:.1f} s after its first attempt, 1 copy")  # fmt: skip
    after = await ledger_report(pool, stream_lag=POLICY.event_stream_lag)
    [stream] = [s for s in after.event_streams if s.provider == "sendgrid"]
    assert stream.redelivered_posts_24h >= 1 and stream.last_post_at is not None


# ---- the ESP's lookup: found, absent past its lag, throttled or failing ------------------------------


async def test_with_the_activity_api_an_ambiguous_email_is_looked_up_found_or_proven_absent(
    outages: Outages, pool: AsyncConnectionPool
) -> None:
    """Webhook down, so only the lookup can tell. A copy the relay has is found in the activity feed (no
    resend, delivered by the feed's word); one it never took is absent past the in-flight bound plus the
    feed's lag and is resent once; while the feed answers 503, the lookup waits and never guesses."""
    herald, esp = outages.with_feed, outages.admin
    await outages.webhook.refuse()
    found_key, found_to = fresh_key(), fresh_address()
    await esp.arm(found_to, "drop_after_data", count=1)
    absent_key, absent_to = fresh_key(), fresh_address()
    await esp.arm(absent_to, "drop_during_data", count=1)
    await herald.send(email_request(found_key, found_to))
    await herald.send(email_request(absent_key, absent_to))
    found = await reads.final(herald, found_key, Channel.EMAIL, WAIT)
    assert found.state is IntentState.DELIVERED, found.transitions
    assert [a.submit_result for a in found.attempts] == [SubmitResult.UNKNOWN]
    assert found.transitions[-1].source.value == "poll"
    assert len(await esp.messages(found_to)) == 1

    async def resent() -> IntentStatus | None:
        status = await herald.status(absent_key, Channel.EMAIL)
        return status if len(status.attempts) == 2 and status.attempts[1].submit_result else None

    absent = await reads.eventually(resent, "the absent copy resent", 30)
    assert absent is not None and [a.submit_result for a in absent.attempts] == [
        SubmitResult.NOT_ACCEPTED, SubmitResult.ACCEPTED
    ]  # fmt: skip
    [copy] = await esp.messages(absent_to)
    assert copy["unique_args"]["herald_attempt"] == attempt_ref(f"{absent_key}/email", 2)

    failing_key, failing_to = fresh_key(), fresh_address()
    await esp.arm(failing_to, "drop_after_data", count=1)
    await esp.activity_fault(503)
    await herald.send(email_request(failing_key, failing_to))

    async def looked_up_unavailable() -> bool:
        history = await _rows(pool, f"{failing_key}/email")
        return sum(1 for kind, reason in history if kind == "unavailable" and "503" in reason) >= 2

    await reads.eventually(looked_up_unavailable, "two lookups answered 503", 20)
    status = await herald.status(failing_key, Channel.EMAIL)
    assert status.state is IntentState.SUBMITTING and len(status.attempts) == 1
    await esp.activity_fault(None)
    failing = await reads.final(herald, failing_key, Channel.EMAIL, WAIT)
    assert failing.state is IntentState.DELIVERED and len(failing.attempts) == 1
    assert len(await esp.messages(failing_to)) == 1
    await outages.webhook.accept()
    assert (await reads.final(herald, absent_key, Channel.EMAIL, WAIT)).state is IntentState.DELIVERED


async def _rows(pool: AsyncConnectionPool, workflow_id: str) -> list[tuple[str, str]]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT kind, reason FROM observations WHERE workflow_id = %s ORDER BY seq", (workflow_id,)
        )
        return await cursor.fetchall()


# ---- a relay and Twilio's API refusing connections ---------------------------------------------------


async def test_a_relay_and_twilio_refusing_connections_delay_delivery_and_never_fail_it(
    outages: Outages, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    """Relay and Twilio API both down: every intent of the window is retried past max_attempts without
    spending the budget, the report shows them waiting on an unreachable provider, and each is delivered
    exactly once when the providers return; intents whose expiry passes meanwhile end `expired` naming
    the outage, with nothing sent."""
    herald, esp = outages.events_only, outages.admin
    await outages.relay.refuse()
    await outages.twilio.refuse()
    emails = {fresh_key(): fresh_address() for _ in range(3)}
    texts = {fresh_key(): fresh_recipient() for _ in range(3)}
    soon = (datetime.now(UTC) + timedelta(seconds=OUTAGE / 3)).isoformat()
    short_email = (fresh_key(), fresh_address())
    short_text = (fresh_key(), fresh_recipient())
    started = datetime.now(UTC)
    for key, to in emails.items():
        await herald.send(email_request(key, to))
    for key, to in texts.items():
        await herald.send(receipt_request(key, to))
    await herald.send(email_request(*short_email, expires_at=soon))
    await herald.send(receipt_request(*short_text, expires_at=soon))

    async def both_waiting() -> dict[str, int] | None:
        report = await ledger_report(pool)
        counts = {o.provider: o.intents for o in report.outages if o.since >= started - timedelta(seconds=1)}
        return counts if counts.get("sendgrid", 0) >= 3 and counts.get("twilio", 0) >= 3 else None

    await reads.eventually(both_waiting, "three intents of each provider in the report's outages", OUTAGE)
    await asyncio.sleep(max(0.0, OUTAGE - (datetime.now(UTC) - started).total_seconds()))
    await outages.relay.accept()
    await outages.twilio.accept()

    figures = []
    for key, to in emails.items():
        final = await reads.final(herald, key, Channel.EMAIL, WAIT)
        assert final.state is IntentState.DELIVERED, final.transitions
        results = [a.submit_result for a in final.attempts]
        assert results[-1] is SubmitResult.ACCEPTED and set(results[:-1]) == {SubmitResult.UNREACHABLE}
        assert len(results) > TEST_POLICY.max_attempts
        assert len(await esp.messages(to)) == 1
        figures.append(("email", len(results), (final.transitions[-1].at - started).total_seconds()))
    for key, to in texts.items():
        final = await reads.final(herald, key, Channel.SMS, WAIT)
        assert final.state is IntentState.DELIVERED, final.transitions
        results = [a.submit_result for a in final.attempts]
        assert results[-1] is SubmitResult.ACCEPTED and set(results[:-1]) == {SubmitResult.UNREACHABLE}
        assert len(await emulator.messages(to)) == 1
        figures.append(("sms", len(results), (final.transitions[-1].at - started).total_seconds()))
    # The closing note's figures (pytest -s): attempts per intent, and seconds from send to delivered.
    print(f"\noutage {OUTAGE:g} s: " + ", ".join(f"{ch} {n} attempts, delivered at {t:.1f} s" for ch, n, t in figures))
    for (key, to), channel in ((short_email, Channel.EMAIL), (short_text, Channel.SMS)):
        final = await reads.final(herald, key, channel, WAIT)
        assert final.state is IntentState.EXPIRED, final.transitions
        assert "; provider unreachable since" in final.transitions[-1].reason
    assert await esp.messages(short_email[1]) == [] and await emulator.messages(short_text[1]) == []


async def test_a_category_that_gives_up_sooner_ends_expired_at_its_give_up_naming_the_outage(
    outages: Outages, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    """The send policy's unreachable_give_up_seconds for the category ends an outage before the intent's
    own expiry: `expired`, naming the give-up and the outage, with nothing sent."""
    rules = PolicyRules(
        categories={
            **PolicyRules().categories,
            Category.TRANSACTIONAL: CategoryRules(urgent=True, unreachable_give_up_seconds=3),
        }
    )
    await publish_policy(pool, rules, effective_from=datetime.now(UTC), owner="tests", note="give up after 3 s")
    await outages.twilio.refuse()
    key, to = fresh_key(), fresh_recipient()
    try:
        await outages.events_only.send(receipt_request(key, to))
        final = await reads.final(outages.events_only, key, Channel.SMS, WAIT)
    finally:
        await outages.twilio.accept()
        await publish_policy(
            pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again"
        )
    assert final.state is IntentState.EXPIRED, final.transitions
    reason = final.transitions[-1].reason
    assert reason.startswith("gave up at") and "gives up on an unreachable provider 3s after" in reason
    assert "; provider unreachable since" in reason
    assert {a.submit_result for a in final.attempts} == {SubmitResult.UNREACHABLE}
    assert await emulator.messages(to) == []
