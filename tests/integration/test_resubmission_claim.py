"""The submit activity's resubmission path against the real ledger: the one deliberate second call
of an attempt, let through the "one execution per attempt" guard by its own claim row, once.

Providers are in-process doubles (``tests.integration.test_route_gate.Double``) that count calls;
the ledger is the session's PostgreSQL, the activity the real ``ProviderActivities.submit``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from herald.core.contracts import Called, NotSent, Refused, Resubmission, SubmitInput
from herald.core.intent import Intent
from herald.core.lifecycle import ObservationKind, Source
from herald.core.outcomes import ProviderStatus, SubmitOutcome, Unknown, Unreachable
from herald.core.rows import LedgerBatch, ObservationRow
from herald.core.send_policy import PolicyRules
from herald.ledger.policy_store import publish_policy
from herald.ledger.recipient_requests import RecipientRequest, record_requests
from herald.providers.port import OutboundMessage
from tests.integration.test_route_gate import Double, Routed, _attempt, _intent
from tests.intents import fresh_recipient
from tests.keys import SESSION_KEYRING


class Deduping(Double):
    """A provider that refuses a repeated id within its grace; its first answer is lost."""

    capabilities = Double.capabilities.model_copy(update={"resubmit_dedupe_seconds": 300})

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        if not self.submits:
            self.submits.append(outbound.attempt_ref)
            return SubmitOutcome(result=Unknown(reason="ReadTimeout after the request may have been sent"))
        return await super().submit(outbound)


@pytest.fixture(autouse=True)
async def _defaults_again(pool: AsyncConnectionPool) -> AsyncIterator[None]:
    """Each test publishes routes to its own doubles: the default policy is published again after it."""
    yield
    await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")


def _resubmission(first: SubmitInput, provider: str, seq: int, call_by: datetime) -> SubmitInput:
    """Resubmission 1 of `first`'s attempt as the machine prepares it: its claim row first in the batch."""
    claim = ObservationRow(
        workflow_id=first.workflow_id, seq=seq, attempt_number=1, source=Source.SUBMIT,
        kind=ObservationKind.RESUBMITTED, applied=True, reason="answer lost: resubmission 1",
        observed_at=datetime.now(UTC),
    )  # fmt: skip
    return first.model_copy(
        update={
            "ledger": LedgerBatch(observations=[claim]),
            "resubmission": Resubmission(number=1, provider=provider, claim_seq=seq, call_by=call_by),
        }
    )


async def _answer_lost(
    pool: AsyncConnectionPool, first_provider: type[Deduping] = Deduping, recipient: str | None = None
) -> tuple[Routed, Intent, SubmitInput]:
    """Routes [alpha, beta] published, and attempt 1 of a fresh intent submitted to alpha (a provider
    that dedupes), whose answer was lost."""
    tag = secrets.token_hex(3)
    routed = Routed(pool, providers=(first_provider(f"alpha-{tag}"), Double(f"beta-{tag}")))
    await routed.publish(routed.alpha.name, routed.beta.name)
    intent = await _intent(pool, recipient)
    first = _attempt(intent, 1, f"run-{tag}")
    step = await routed.submit(first)
    assert isinstance(step, Called) and isinstance(step.outcome.result, Unknown)
    return routed, intent, first


async def _claims(pool: AsyncConnectionPool, workflow_id: str) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM observations WHERE workflow_id = %s AND kind = %s",
            (workflow_id, ObservationKind.RESUBMITTED.value),
        )
        [(count,)] = await cursor.fetchall()
        return count


async def test_a_resubmission_calls_the_attempts_provider_once_by_its_own_claim(pool: AsyncConnectionPool) -> None:
    """The attempt's row is committed (its first call's answer lost): a resubmission goes through to
    the same provider under the same id and is recorded; the same resubmission executed again finds
    its claim committed and calls nobody, answering Unknown."""
    tag = secrets.token_hex(3)
    routed = Routed(pool, providers=(Deduping(f"alpha-{tag}"), Double(f"beta-{tag}")))
    alpha = routed.alpha
    await routed.publish(alpha.name, routed.beta.name)
    intent = await _intent(pool)
    first = _attempt(intent, 1, f"run-{tag}")
    step = await routed.submit(first)
    assert isinstance(step, Called) and isinstance(step.outcome.result, Unknown)
    assert step.capabilities.resubmit_dedupe_seconds == 300

    again = _resubmission(first, alpha.name, seq=1, call_by=datetime.now(UTC) + timedelta(minutes=1))
    step = await routed.submit(again)
    assert isinstance(step, Called) and step.provider == alpha.name
    assert step.outcome.result.kind == "accepted" and step.outcome.result.status is ProviderStatus.QUEUED
    assert alpha.submits == [first.attempt_ref, first.attempt_ref] and routed.beta.submits == []
    assert await _claims(pool, intent.workflow_id) == 1

    repeated = await routed.submit(again)
    assert isinstance(repeated, Called) and isinstance(repeated.outcome.result, Unknown)
    assert "already made by an earlier execution" in repeated.outcome.result.reason
    assert len(alpha.submits) == 2 and routed.beta.submits == []


async def test_a_resubmission_past_its_call_by_time_or_to_a_provider_without_dedupe_calls_nobody(
    pool: AsyncConnectionPool,
) -> None:
    """Past its call-by time the provider's grace may be over: not sent. To a provider that (on this
    worker) declares no dedupe, a repeat could be a second message: refused. Neither calls anyone."""
    routed, intent, first = await _answer_lost(pool)
    late = _resubmission(first, routed.alpha.name, seq=1, call_by=datetime.now(UTC) - timedelta(seconds=1))
    step = await routed.submit(late)
    assert isinstance(step, NotSent) and "call-by time" in step.reason
    plain = _resubmission(first, routed.beta.name, seq=2, call_by=datetime.now(UTC) + timedelta(minutes=1))
    step = await routed.submit(plain)
    assert isinstance(step, Refused) and "declares no dedupe" in step.reason
    assert routed.alpha.submits == [first.attempt_ref] and routed.beta.submits == []


class LostThenUnreachable(Deduping):
    """Its first answer lost, every later call refused a connection (the provider went down)."""

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        if not self.submits:
            return await super().submit(outbound)
        self.submits.append(outbound.attempt_ref)
        return SubmitOutcome(result=Unreachable(reason="ConnectError: connection refused"))


async def test_a_recipient_suppressed_since_the_admission_is_not_sent_again(pool: AsyncConnectionPool) -> None:
    """A STOP recorded after the attempt was admitted (and its answer lost): the resubmission is refused
    before any call, naming the suppression (the attempt is then looked up); the provider heard of it once."""
    recipient = fresh_recipient()
    routed, intent, first = await _answer_lost(pool, recipient=recipient)
    stop = RecipientRequest(
        fingerprint=SESSION_KEYRING.recipient_candidates(recipient)[0], channel="sms", request="opt_out",
        source="inbound_keyword", detail="keyword STOP", source_ref=f"SM{secrets.token_hex(16)}",
        requested_at=datetime.now(UTC),
    )  # fmt: skip
    async with pool.connection() as conn:
        assert await record_requests(conn, [stop]) == 1

    again = _resubmission(first, routed.alpha.name, seq=1, call_by=datetime.now(UTC) + timedelta(minutes=1))
    step = await routed.submit(again)
    assert isinstance(step, Refused) and step.provider == routed.alpha.name
    assert step.reason.startswith("not sent again: the recipient is suppressed since: opt_out (keyword STOP) at ")
    assert recipient not in step.reason
    assert routed.alpha.submits == [first.attempt_ref] and routed.beta.submits == []
    assert await _claims(pool, intent.workflow_id) == 1  # the claim row is written all the same


async def test_a_resubmission_that_finds_its_provider_unreachable_marks_it_for_the_outage_rule(
    pool: AsyncConnectionPool,
) -> None:
    """A resubmission answered Unreachable is the outage rule's evidence like a first submit's: one
    'unreachable' mark for the provider, naming the attempt."""
    routed, _, first = await _answer_lost(pool, LostThenUnreachable)
    again = _resubmission(first, routed.alpha.name, seq=1, call_by=datetime.now(UTC) + timedelta(minutes=1))
    step = await routed.submit(again)
    assert isinstance(step, Called) and step.outcome.result.kind == "unreachable"
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT mark, attempt_ref FROM provider_marks WHERE provider = %s",
                                    (routed.alpha.name,))  # fmt: skip
        assert await cursor.fetchall() == [("unreachable", first.attempt_ref)]
