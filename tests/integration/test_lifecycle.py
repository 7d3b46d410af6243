"""The delivery lifecycle against the real emulator: retries, lookups, horizons, clocks and cancellation.

The scenarios play at once, each on its own key and recipient (`tests/played.py`); each test awaits its own.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.lifecycle import IntentState, SubmitResult
from herald.ledger.history import IntentHistory, intent_history
from herald.providers.twilio_signature import compute_signature
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.played import Scenario, play
from tests.stack import TEST_POLICY, Emulator

WAIT = 60


async def _history(pool: AsyncConnectionPool, key: str) -> IntentHistory:
    history = await intent_history(pool, f"{key}/sms")
    assert history is not None
    return history


async def _sent_once_faulted(
    herald: HeraldClient, emulator: Emulator, fault: str, **params: Any
) -> tuple[str, str, IntentStatus]:
    """An intent to a fresh number whose first send meets `fault`: its key, number and final status."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, fault, **params, count=1)
    await herald.send(receipt_request(key, to))
    return key, to, await reads.final(herald, key, wait=WAIT)


def _states(history: IntentHistory) -> list[str]:
    return [t.to_state for t in history.transitions]


async def _500_then_success_retries_after_proving_absence(herald: HeraldClient, emulator: Emulator, pool) -> None:
    key, to, final = await _sent_once_faulted(herald, emulator, "error_500")
    assert final.state is IntentState.DELIVERED
    assert [a.submit_result for a in final.attempts] == ["not_accepted", "accepted"]
    assert len(await emulator.messages(to)) == 1
    history = await _history(pool, key)
    assert _states(history) == ["submitting", "retryable_failure", "pending", "submitting", "accepted", "delivered"]
    proof = [o for o in history.observations if o.kind == "not_found" and o.applied]
    assert proof and "not accepted" in proof[0].reason


async def _429_retry_after_is_honoured(herald: HeraldClient, emulator: Emulator, pool) -> None:
    key, to, final = await _sent_once_faulted(herald, emulator, "rate_limit", retry_after=2)
    assert final.state is IntentState.DELIVERED
    first, second = (await _history(pool, key)).attempts
    assert second.prepared_at - first.prepared_at >= timedelta(seconds=2)
    assert final.attempts[0].retry_delay_seconds >= 2.0
    assert len(await emulator.messages(to)) == 1


async def _http_date_retry_after_is_honoured(herald: HeraldClient, emulator: Emulator, pool) -> None:
    key, _, final = await _sent_once_faulted(
        herald, emulator, "rate_limit", retry_after=3, retry_after_format="http-date"
    )
    assert final.state is IntentState.DELIVERED
    first, second = (await _history(pool, key)).attempts
    # HTTP dates have one-second resolution, so the hint can shrink by up to a second.
    assert second.prepared_at - first.prepared_at >= timedelta(seconds=2)


async def _permanent_error_ends_the_intent_at_once(herald: HeraldClient, emulator: Emulator, pool) -> None:
    _, to, final = await _sent_once_faulted(herald, emulator, "reject", code=21610)
    assert final.state is IntentState.PERMANENT_FAILURE
    assert len(final.attempts) == 1
    assert "21610" in final.transitions[-1].reason
    assert await emulator.messages(to) == []


async def _retry_budget_runs_out_into_a_terminal_state(herald: HeraldClient, emulator: Emulator, pool) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "reject", code=14107)
    # 14107 asks for 30 s between tries, which the test policy caps at 5 s: 20 s of waiting that
    # proves nothing here (the budget is counted in attempts). A 1 s cap keeps each hint honoured.
    hint_capped = TEST_POLICY.model_copy(update={"retry_after_cap": timedelta(seconds=1)})
    await herald.send(receipt_request(key, to), policy=hint_capped)
    final = await reads.final(herald, key, wait=WAIT)
    assert final.state is IntentState.PERMANENT_FAILURE
    assert len(final.attempts) == TEST_POLICY.max_attempts
    assert f"retry budget exhausted after {TEST_POLICY.max_attempts} attempts" in final.transitions[-1].reason
    assert await emulator.messages(to) == []


async def _a_provider_that_keeps_answering_429_is_retried_until_the_intent_expires(
    herald: HeraldClient, emulator: Emulator, pool
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "rate_limit", retry_after=0)
    # Long enough for more attempts than the budget allows even on a loaded machine (backoff capped at 2 s).
    expires = datetime.now(UTC) + timedelta(seconds=12)
    await herald.send(receipt_request(key, to, expires_at=expires.isoformat()))
    final = await reads.final(herald, key, wait=WAIT)
    assert final.state is IntentState.EXPIRED, final.transitions
    assert len(final.attempts) > TEST_POLICY.max_attempts
    assert {a.submit_result for a in final.attempts} == {SubmitResult.UNREACHABLE}
    reason = final.transitions[-1].reason
    assert reason.startswith("intent expired at") and "provider unreachable since" in reason and "HTTP 429" in reason
    assert await emulator.messages(to) == []


async def _accept_then_hang_without_id_is_found_by_our_reference(
    herald: HeraldClient, emulator: Emulator, pool
) -> None:
    key, to, final = await _sent_once_faulted(herald, emulator, "accept_then_hang", hang_seconds=3, callbacks=False)
    assert final.state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    assert len(messages) == 1
    assert final.attempts[0].provider_id == messages[0]["sid"]
    history = await _history(pool, key)
    found = [o for o in history.observations if o.kind == "found" and o.applied]
    assert found and found[0].provider_id == messages[0]["sid"]
    assert len(history.attempts) == 1


async def _hang_without_acceptance_is_proven_and_sent_once(herald: HeraldClient, emulator: Emulator, pool) -> None:
    _, to, final = await _sent_once_faulted(herald, emulator, "hang_without_accept", hang_seconds=2)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 2
    assert len(await emulator.messages(to)) == 1


async def _no_report_is_resolved_by_polling(herald: HeraldClient, emulator: Emulator, pool) -> None:
    _, to, final = await _sent_once_faulted(herald, emulator, "no_callback")
    assert final.state is IntentState.DELIVERED
    assert final.transitions[-1].source.value == "poll"
    assert len(await emulator.messages(to)) == 1


async def _silence_ends_unknown_at_the_horizon_across_runs(herald: HeraldClient, emulator: Emulator, pool) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "silent", count=1)
    policy = TEST_POLICY.model_copy(
        update={"resolution_horizon": timedelta(seconds=12), "poll_max": timedelta(seconds=1)}
    )
    receipt = await herald.send(receipt_request(key, to), policy=policy)
    final = await reads.final(herald, key, wait=WAIT)
    assert final.state is IntentState.UNKNOWN
    assert final.closed_by == "clock:resolution_horizon"
    assert final.attempts[0].lookups >= 3
    description = await herald.handle(key).describe()
    assert description.run_id != receipt.run_id, "the polling intent should have continued as new"
    history = await _history(pool, key)
    assert _states(history) == ["submitting", "accepted", "unknown"]
    assert [t.seq for t in history.transitions] == [1, 2, 3]
    assert [o.seq for o in history.observations] == list(range(1, len(history.observations) + 1))


async def test_cancel_racing_an_accepted_submit_tracks_the_attempt(
    herald: HeraldClient, emulator: Emulator, pool
) -> None:
    """A cancel that races an accepted submit closes the intent, and the accepted attempt is still tracked to delivered."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "delayed_callback", delay_seconds=2, count=1)
    await herald.send(receipt_request(key, to))
    # Cancel only once the provider holds the message: the reports are held back two seconds.
    await reads.eventually(lambda: emulator.messages(to), "the message at the provider", 5, every=0.05)
    answer = await herald.cancel(key, reason="order refunded", operator="bob")
    assert answer.cancelled
    final = await reads.final(herald, key, wait=WAIT)
    assert final.state is IntentState.CANCELLED
    assert final.attempts[0].provider_status.value == "delivered"
    assert len(await emulator.messages(to)) == 1
    history = await _history(pool, key)
    delivered = [o for o in history.observations if o.provider_status == "delivered" and o.applied]
    assert delivered and "intent stays cancelled" in delivered[0].reason
    assert _states(history)[-1] == "cancelled"


async def _cancelling_a_closed_intent_is_a_clear_no_op(herald: HeraldClient, emulator: Emulator) -> None:
    key, to = fresh_key(), fresh_recipient()
    await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    answer = await herald.cancel(key, reason="too late", operator="carol")
    assert not answer.cancelled
    assert answer.state is IntentState.DELIVERED and "nothing to cancel" in answer.message


async def _report_for_a_closed_intent_is_still_recorded(
    herald: HeraldClient, emulator: Emulator, pool, settings
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await herald.send(receipt_request(key, to))
    final = await reads.final(herald, key, wait=WAIT)
    assert final.state is IntentState.DELIVERED
    attempt = final.attempts[0]
    url = f"{settings.receipts.public_url}/twilio/status?attempt={attempt.attempt_ref}"
    form = {"MessageSid": attempt.provider_id, "MessageStatus": "undelivered", "ErrorCode": "30005"}
    signature = compute_signature(settings.twilio.auth_token.get_secret_value(), url, form)
    async with httpx.AsyncClient(timeout=5) as http:
        response = await http.post(url, data=form, headers={"X-Twilio-Signature": signature})
    assert response.status_code == 200

    async def recorded():
        history = await _history(pool, key)
        return [o for o in history.observations if o.provider_status == "undelivered"]

    deadline = asyncio.get_running_loop().time() + 15
    while not (late := await recorded()) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    assert late and not late[0].applied and "closed" in late[0].reason
    assert (await herald.status(key)).state is IntentState.DELIVERED


# ---- played at once ------------------------------------------------------------------------------

# The cancel race stays a test of its own, played alone: it cancels within the 2 s its reports are held.
SCENARIOS: list[Scenario] = [
    _500_then_success_retries_after_proving_absence,
    _429_retry_after_is_honoured,
    _http_date_retry_after_is_honoured,
    _permanent_error_ends_the_intent_at_once,
    _retry_budget_runs_out_into_a_terminal_state,
    _a_provider_that_keeps_answering_429_is_retried_until_the_intent_expires,
    _accept_then_hang_without_id_is_found_by_our_reference,
    _hang_without_acceptance_is_proven_and_sent_once,
    _no_report_is_resolved_by_polling,
    _silence_ends_unknown_at_the_horizon_across_runs,
    _cancelling_a_closed_intent_is_a_clear_no_op,
    _report_for_a_closed_intent_is_still_recorded,
]


@pytest.fixture(scope="module")
async def played(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, settings: Any
) -> dict[str, asyncio.Task[None]]:
    """Every scenario above started at once, each on its own key and recipient: they mostly wait on the
    test policy's clocks (one after another they took 59 s)."""
    return play(SCENARIOS, herald=herald, emulator=emulator, pool=pool, settings=settings)


async def test_500_then_success_retries_after_proving_absence(played: dict[str, asyncio.Task[None]]) -> None:
    """A 500 is an unknown outcome: the lookup proves absence, and only then a second attempt delivers one message."""
    await played["500_then_success_retries_after_proving_absence"]


async def test_429_retry_after_is_honoured(played: dict[str, asyncio.Task[None]]) -> None:
    """After a 429 with Retry-After: 2, the next attempt is not prepared earlier than two seconds later."""
    await played["429_retry_after_is_honoured"]


async def test_http_date_retry_after_is_honoured(played: dict[str, asyncio.Task[None]]) -> None:
    """A Retry-After given as an HTTP date is honoured like seconds (the next attempt waits for it)."""
    await played["http_date_retry_after_is_honoured"]


async def test_permanent_error_ends_the_intent_at_once(played: dict[str, asyncio.Task[None]]) -> None:
    """An opt-out (21610) ends the intent as permanent_failure after one attempt, with the code in the reason."""
    await played["permanent_error_ends_the_intent_at_once"]


async def test_retry_budget_runs_out_into_a_terminal_state(played: dict[str, asyncio.Task[None]]) -> None:
    """A provider that refuses the message with a retryable code every time exhausts the budget:
    permanent_failure with the reason, never a silent stop."""
    await played["retry_budget_runs_out_into_a_terminal_state"]


async def test_a_provider_that_keeps_answering_429_is_retried_until_the_intent_expires(
    played: dict[str, asyncio.Task[None]],
) -> None:
    """429 turns the account's traffic away without judging the message: the attempts never spend the
    budget, go on past max_attempts, and the intent ends `expired` naming the outage, nothing sent."""
    await played["a_provider_that_keeps_answering_429_is_retried_until_the_intent_expires"]


async def test_accept_then_hang_without_id_is_found_by_our_reference(played: dict[str, asyncio.Task[None]]) -> None:
    """With no provider id and no reports, the lookup by recipient, send date and body hash finds the one message."""
    await played["accept_then_hang_without_id_is_found_by_our_reference"]


async def test_hang_without_acceptance_is_proven_and_sent_once(played: dict[str, asyncio.Task[None]]) -> None:
    """When the provider hung without accepting, the lookup proves it and the second attempt is the only message."""
    await played["hang_without_acceptance_is_proven_and_sent_once"]


async def test_no_report_is_resolved_by_polling(played: dict[str, asyncio.Task[None]]) -> None:
    """Without any status callback, status polling by provider id finds the delivery."""
    await played["no_report_is_resolved_by_polling"]


async def test_silence_ends_unknown_at_the_horizon_across_runs(played: dict[str, asyncio.Task[None]]) -> None:
    """A message that never reaches a final status ends `unknown` at the horizon (never failed), after continuing as new."""
    await played["silence_ends_unknown_at_the_horizon_across_runs"]


async def test_cancelling_a_closed_intent_is_a_clear_no_op(played: dict[str, asyncio.Task[None]]) -> None:
    """Cancelling a delivered intent answers that there is nothing to cancel, and changes nothing."""
    await played["cancelling_a_closed_intent_is_a_clear_no_op"]


async def test_report_for_a_closed_intent_is_still_recorded(played: dict[str, asyncio.Task[None]]) -> None:
    """A signed report that arrives after the workflow closed is stored and recorded as an ignored observation."""
    await played["report_for_a_closed_intent_is_still_recorded"]
