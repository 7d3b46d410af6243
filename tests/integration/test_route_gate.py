"""The route chosen in the submit's transaction, against the real ledger: drains, pins, probes, a repeated
or raced submit.

The submit activity runs as the submit worker runs it (``ActivityEnvironment``), with the session's
PostgreSQL and vault; the providers are doubles that count their calls (names as data, unique per
test, so the outage marks of one test are no other's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.testing import ActivityEnvironment

from activities.provider import ProviderActivities
from herald.core.contracts import Called, Held, SubmitInput, SubmitStep, attempt_ref
from herald.core.intent import Intent
from herald.core.message import Channel, MessageReference
from herald.core.outcomes import (
    Accepted,
    LookupOutcome,
    ProviderStatus,
    ReferenceSearch,
    SubmitOutcome,
    Unavailable,
    Unknown,
)
from herald.core.routes import IntentRoute
from herald.core.rows import AttemptRow, LedgerBatch, RecordIntentInput
from herald.core.send_policy import Category, Decision, PolicyRules
from herald.intake.requests import build_intent, parse_request
from herald.ledger import store
from herald.ledger.policy_store import publish_policy
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.port import CancelOutcome, OutboundMessage
from herald.providers.registry import Providers
from herald.providers.twilio import TwilioAdapter
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING


class Double:
    """A provider that accepts every submit and counts them."""

    capabilities = TwilioAdapter.capabilities

    def __init__(self, name: str) -> None:
        self.name = name
        self.route = f"{name}-account"
        self.submits: list[str] = []
        # Set, a submit waits for it before answering (a provider still holding the call).
        self.holding: asyncio.Event | None = None

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        self.submits.append(outbound.attempt_ref)
        if self.holding is not None:
            await self.holding.wait()
        return SubmitOutcome(result=Accepted(provider_id=f"{self.name}-{len(self.submits)}", status=ProviderStatus.QUEUED))

    async def fetch(self, provider_id: str) -> LookupOutcome:
        return LookupOutcome(result=Unavailable(reason="not asked here"))

    async def find_by_reference(self, reference: MessageReference) -> ReferenceSearch:
        return ReferenceSearch(result=Unavailable(reason="not asked here"))

    async def cancel(self, provider_id: str) -> CancelOutcome:
        return CancelOutcome(canceled=False, reason="not asked here")

    async def aclose(self) -> None:
        pass


class Routed:
    def __init__(self, pool: AsyncConnectionPool, providers: tuple[Double, Double] | None = None) -> None:
        tag = secrets.token_hex(3)
        self.alpha, self.beta = providers or (Double(f"alpha-{tag}"), Double(f"beta-{tag}"))
        self.activities = ProviderActivities(
            Providers({Channel.SMS: [self.alpha, self.beta]}), "http://127.0.0.1:9", pool,
            vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING,
        )  # fmt: skip
        self.pool = pool

    async def publish(self, *names: str) -> None:
        """A policy whose SMS routes are `names` then "twilio" (for the session's own workers)."""
        rules = PolicyRules(sms_routes={category: {"*": [*names, "twilio"]} for category in Category})
        await publish_policy(self.pool, rules, effective_from=datetime.now(UTC), owner="tests", note="routes")

    async def submit(self, input: SubmitInput) -> SubmitStep:
        environment = ActivityEnvironment()
        environment.info = dataclasses.replace(environment.info, start_to_close_timeout=timedelta(seconds=30))
        return await environment.run(self.activities.submit, input)

    async def row(self, ref: str) -> tuple[str | None, str | None]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute("SELECT provider, route_reason FROM attempts WHERE attempt_ref = %s", (ref,))
            found = await cursor.fetchone()
        return (found[0], found[1]) if found else (None, None)


@pytest.fixture
async def routed(pool: AsyncConnectionPool) -> AsyncIterator[Routed]:
    yield Routed(pool)
    await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")


async def _intent(pool: AsyncConnectionPool, recipient: str | None = None) -> Intent:
    request = receipt_request(fresh_key(), recipient or fresh_recipient())
    intent = build_intent(parse_request(request), datetime.now(UTC), SESSION_KEYRING)
    return await RecipientVault(pool, SESSION_KEKS).seal_intent(intent)


def _attempt(intent: Intent, number: int, run_id: str, route: IntentRoute = IntentRoute()) -> SubmitInput:
    """Attempt `number` as the workflow prepares it (the intent row with the first)."""
    ref, now = attempt_ref(intent.workflow_id, number), datetime.now(UTC)
    rows = LedgerBatch(
        record=RecordIntentInput(intent=intent, run_id=run_id) if number == 1 else None,
        attempts=[AttemptRow(attempt_ref=ref, workflow_id=intent.workflow_id, number=number, prepared_at=now)],
    )
    return SubmitInput(attempt_ref=ref, message=intent.message, workflow_id=intent.workflow_id, policy_at=now,
                       validity_seconds=60, ledger=rows, route=route)  # fmt: skip


async def test_a_drained_provider_gets_no_new_attempt_and_a_pin_to_it_is_held(routed: Routed) -> None:
    """Published without alpha: a new intent goes to beta; an intent pinned to alpha (its attempt 1
    may have produced a message there) is held, nothing written or sent, until the policy offers alpha again."""
    alpha, beta = routed.alpha, routed.beta
    await routed.publish(alpha.name, beta.name)
    pinned, run = await _intent(routed.pool), f"run-{secrets.token_hex(4)}"
    first = await routed.submit(_attempt(pinned, 1, run))
    assert isinstance(first, Called) and first.provider == alpha.name
    assert (await routed.row(attempt_ref(pinned.workflow_id, 1)))[0] == alpha.name

    await routed.publish(beta.name)  # alpha drained: no deploy
    fresh = await _intent(routed.pool)
    step = await routed.submit(_attempt(fresh, 1, f"run-{secrets.token_hex(4)}"))
    assert isinstance(step, Called) and step.provider == beta.name
    provider, reason = await routed.row(attempt_ref(fresh.workflow_id, 1))
    assert provider == beta.name and reason is not None and "route transactional/* v" in reason

    # The machine does not know attempt 1's provider (say its submit never answered): the row tells.
    second = _attempt(pinned, 2, run, IntentRoute(pinned_attempt=attempt_ref(pinned.workflow_id, 1)))
    held = await routed.submit(second)
    assert isinstance(held, Held) and held.decision.decision is Decision.DEFER and held.decision.rule == "route"
    assert f"pinned to {alpha.name}" in held.decision.reason and held.decision.not_before is not None
    assert await routed.row(second.attempt_ref) == (None, None)  # nothing written
    assert alpha.submits == [attempt_ref(pinned.workflow_id, 1)]

    await routed.publish(beta.name, alpha.name)  # offered again (as a fallback): the pin goes there
    # Asked again after the hold, at the workflow's clock then (the policy in force then decides).
    again = await routed.submit(second.model_copy(update={"policy_at": datetime.now(UTC)}))
    assert isinstance(again, Called) and again.provider == alpha.name and beta.submits == [fresh_ref(fresh)]


def fresh_ref(intent: Intent) -> str:
    return attempt_ref(intent.workflow_id, 1)


async def test_racing_workers_send_one_probe_to_a_provider_in_outage(routed: Routed) -> None:
    """Alpha in outage, quiet for longer than the probe interval: of two attempts admitted at once,
    exactly one probes alpha; the other goes to beta."""
    alpha, beta = routed.alpha, routed.beta
    await routed.publish(alpha.name, beta.name)
    async with routed.pool.connection() as conn:
        for seconds in (45, 44, 43):
            await conn.execute(
                "INSERT INTO provider_marks (provider, mark, attempt_ref, marked_at) "
                "VALUES (%s, 'unreachable', 'att_test', clock_timestamp() - %s)",
                (alpha.name, timedelta(seconds=seconds)),
            )
    intents = [await _intent(routed.pool) for _ in range(2)]
    # Alpha holds its call until the other attempt has been routed: the probe's answer, which ends
    # the outage, must not come first (then the other attempt would rightly go to alpha, no probe).
    alpha.holding = asyncio.Event()
    racing = [asyncio.create_task(routed.submit(_attempt(i, 1, f"run-{secrets.token_hex(4)}"))) for i in intents]
    done, _ = await asyncio.wait(racing, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1, "both attempts are held at alpha: two probes"
    alpha.holding.set()
    steps = await asyncio.gather(*racing)
    assert sorted(step.provider for step in steps if isinstance(step, Called)) == sorted([alpha.name, beta.name])
    reasons = [(await routed.row(fresh_ref(i)))[1] or "" for i in intents]
    assert sum("this attempt probes it" in reason for reason in reasons) == 1
    assert sum(f"{alpha.name} in outage since" in r and "skipped" in r for r in reasons) == 1
    async with routed.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT mark FROM provider_marks WHERE provider = %s ORDER BY marked_at DESC LIMIT 2", (alpha.name,)
        )
        # The probe's answer is marked: the outage is over.
        assert [row[0] for row in await cursor.fetchall()] == ["answered", "probe"]
    third = await _intent(routed.pool)
    step = await routed.submit(_attempt(third, 1, f"run-{secrets.token_hex(4)}"))
    assert isinstance(step, Called) and step.provider == alpha.name


async def test_an_attempt_submitted_again_calls_no_provider_and_answers_unknown_where_its_row_says(
    routed: Routed,
) -> None:
    """A submit repeated after its commit's answer was lost finds its row handed to alpha: the first
    execution may have called alpha, so this one calls nobody (not alpha again, not beta, which the
    route would choose now that alpha is in outage) and answers Unknown at alpha, to be looked up there."""
    alpha = routed.alpha
    await routed.publish(alpha.name, routed.beta.name)
    intent, run = await _intent(routed.pool), f"run-{secrets.token_hex(4)}"
    input = _attempt(intent, 1, run)
    assert isinstance(await routed.submit(input), Called)
    async with routed.pool.connection() as conn:
        for _ in range(3):
            await conn.execute(
                "INSERT INTO provider_marks (provider, mark, attempt_ref) VALUES (%s, 'unreachable', 'att_test')",
                (alpha.name,),
            )
    again = await routed.submit(input)
    assert isinstance(again, Called) and again.provider == alpha.name
    assert isinstance(again.outcome.result, Unknown) and "earlier execution" in again.outcome.result.reason
    assert alpha.submits == [input.attempt_ref] and routed.beta.submits == []


async def test_two_workers_racing_one_failover_attempt_call_one_provider_once(pool: AsyncConnectionPool) -> None:
    """Attempt 2 of an intent whose attempt 1 found alpha unreachable, executed by two workers (each
    its own activities and connection pool) released by one barrier: one of them hands it to beta and
    calls it; the other finds the row and calls nobody. One message in all, at one provider."""
    first, second = Routed(pool), None
    async with AsyncConnectionPool(pool.conninfo, min_size=1, max_size=2, open=False) as other_pool:
        second = Routed(other_pool, providers=(first.alpha, first.beta))
        alpha, beta = first.alpha, first.beta
        await first.publish(alpha.name, beta.name)
        intent, run = await _intent(pool), f"run-{secrets.token_hex(4)}"
        demoted = IntentRoute(demoted=[alpha.name])
        # Attempt 1's row (its submit found alpha unreachable) is already in the ledger.
        await store.write_batch(pool, _attempt(intent, 1, run).ledger)
        attempt = _attempt(intent, 2, run, demoted)
        barrier = asyncio.Barrier(2)

        async def race(worker: Routed) -> SubmitStep:
            await barrier.wait()
            return await worker.submit(attempt)

        steps = await asyncio.gather(race(first), race(second))
        await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
    assert alpha.submits == [] and beta.submits == [attempt.attempt_ref]
    assert all(isinstance(step, Called) and step.provider == beta.name for step in steps), steps
    kinds = sorted(step.outcome.result.kind for step in steps if isinstance(step, Called))
    assert kinds == ["accepted", "unknown"]
