""" "Not found" must be proof: the provider's queue, a busy recipient, a provider that contradicts
itself, and the last lookup at the horizon, against the real emulator, Temporal and PostgreSQL.

Sends are counted at the emulator, never in Herald's code. The scenarios play at once, each on its
own key and recipient (the `played` fixture), and each test awaits its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.outcomes import ProviderStatus
from herald.intake.requests import build_intent, parse_request
from herald.ledger.history import intent_history
from herald.ledger.report import ledger_report
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator


def _ours(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages Herald sent: only they carry a StatusCallback (the tests' own carry none)."""
    return [message for message in messages if message["status_callback"]]


# ---- the provider's own queue -------------------------------------------------------------------

# Proof window 2 + 30 s: longer than any queue time below, which Twilio (and the emulator) would
# otherwise cut short with 30036.
QUEUE_POLICY = TEST_POLICY.model_copy(
    update={
        "submit_in_flight_bound": timedelta(seconds=2),
        "provider_queue_validity": timedelta(seconds=30),
        "resolution_horizon": timedelta(seconds=60),
    }
)


async def _held_in_the_senders_queue(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, callbacks: bool
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, queue_seconds=8, callbacks=callbacks, count=1)
    await herald.send(receipt_request(key, to), policy=QUEUE_POLICY)
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 1
    messages = await emulator.messages(to)
    assert len(messages) == 1
    (message,) = messages
    history = await intent_history(pool, f"{key}/sms")
    found_queued = [
        o for o in history.observations if o.kind == "found" and o.provider_status == "queued" and o.applied
    ]
    assert found_queued, "the lookup never saw the message while it was queued"
    # The lookup found it before it had a date_sent: no DateSent filter could have.
    assert found_queued[0].observed_at < datetime.fromisoformat(message["date_sent"])
    assert [t.to_state for t in history.transitions] == ["submitting", "accepted", "delivered"]


async def _outstays_its_validity(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    key, to = fresh_key(), fresh_recipient()
    policy = QUEUE_POLICY.model_copy(update={"provider_queue_validity": timedelta(seconds=3)})
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, queue_seconds=30, count=1)
    await herald.send(receipt_request(key, to), policy=policy)
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED
    first, second = await emulator.messages(to)
    assert first["validity_seconds"] == 3
    assert (first["status"], first["error_code"], first["date_sent"]) == ("failed", 30036, None)
    assert second["status"] == "delivered"
    assert [a.provider_status for a in final.attempts] == [ProviderStatus.FAILED, ProviderStatus.DELIVERED]
    assert (
        await reads.rows(pool, "SELECT * FROM presumed_not_accepted_then_seen WHERE workflow_id = %s", f"{key}/sms")
        == []
    )


# ---- a busy recipient ----------------------------------------------------------------------------


async def _create_messages(settings: Any, to: str, bodies: list[str]) -> None:
    """Messages from Herald's own sender to `to`, created through the Twilio API (no StatusCallback)."""
    twilio = settings.twilio
    url = f"{twilio.api_base}/2010-04-01/Accounts/{twilio.account_sid}/Messages.json"
    auth = (twilio.account_sid, twilio.auth_token.get_secret_value())
    slots = asyncio.Semaphore(16)
    async with httpx.AsyncClient(auth=auth, timeout=10, trust_env=False) as http:

        async def one(body: str) -> None:
            async with slots:
                response = await http.post(url, data={"To": to, "From": twilio.from_number, "Body": body})
                assert response.status_code == 201, response.text

        await asyncio.gather(*(one(body) for body in bodies))


async def _busy_recipient(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, settings: Any) -> None:
    key, to = fresh_key(), fresh_recipient()
    request = receipt_request(key, to)
    body = build_intent(parse_request(request), datetime.now(UTC), SESSION_KEYRING).message.body
    await _create_messages(settings, to, [body] * 300 + [f"Earlier notice {n}" for n in range(300)])
    # Earlier means earlier than the search's 2 s allowance for clock skew: a copy of the same text
    # created within it would make the search ambiguous (Unavailable, never a guess).
    await asyncio.sleep(2.5)
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, callbacks=False, count=1)
    policy = TEST_POLICY.model_copy(
        update={"lookup_first_delay": timedelta(seconds=6), "lookup_max": timedelta(seconds=6)}
    )
    await herald.send(request, policy=policy)

    async def ours_sent() -> bool:
        return any(m["date_sent"] for m in _ours(await emulator.messages(to)))

    await reads.eventually(ours_sent, "the attempt's message to be sent")
    await _create_messages(settings, to, [f"Later notice {n}" for n in range(250)])
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 1
    messages = await emulator.messages(to)
    assert len(messages) == 851
    assert len(_ours(messages)) == 1
    assert final.attempts[0].provider_id == _ours(messages)[0]["sid"]
    # 250 newer messages at 100 a page: the message is on the third page, and the search stopped there.
    assert (await emulator.stats())["list_pages_by_to"][to] >= 3


# ---- a provider that contradicts itself ----------------------------------------------------------

# "Not found" proves absence after 2 + 2 s; the emulator's `lost_then_reported` hides the message
# from every lookup, so the proof is wrong on purpose and its reports come when the test releases them.
LYING_POLICY = TEST_POLICY.model_copy(
    update={
        "submit_in_flight_bound": timedelta(seconds=2),
        "provider_queue_validity": timedelta(seconds=2),
        "resolution_horizon": timedelta(seconds=60),
    }
)


async def _contradictions(pool: AsyncConnectionPool, workflow_id: str) -> list[dict[str, Any]]:
    return await reads.rows(pool, "SELECT * FROM presumed_not_accepted_then_seen WHERE workflow_id = %s", workflow_id)


async def _conflict_observations(pool: AsyncConnectionPool, workflow_id: str) -> list[dict[str, Any]]:
    return await reads.rows(
        pool,
        "SELECT * FROM observations WHERE workflow_id = %s AND kind = 'presumed_not_accepted_then_seen'",
        workflow_id,
    )


async def _report_during_the_backoff(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    key, to = fresh_key(), fresh_recipient()
    workflow_id = f"{key}/sms"
    await emulator.arm(to, "lost_then_reported", hang_seconds=3, count=1)
    policy = LYING_POLICY.model_copy(
        update={"backoff_initial": timedelta(seconds=40), "backoff_max": timedelta(seconds=40)}
    )
    await herald.send(receipt_request(key, to), policy=policy)

    async def waiting_to_retry() -> bool:
        return (await herald.status(key)).state is IntentState.RETRYABLE_FAILURE

    await reads.eventually(waiting_to_retry, "the lookup to conclude 'not accepted'")
    assert await emulator.release_callbacks(to) == 1
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 1
    assert final.attempts[0].submit_result is SubmitResult.NOT_ACCEPTED
    assert final.attempts[0].seen_after_presumed_absent
    assert len(await emulator.messages(to)) == 1
    history = await intent_history(pool, workflow_id)
    states = [t.to_state for t in history.transitions]
    assert states[:2] == ["submitting", "retryable_failure"] and states[-1] == "delivered"
    assert "pending" not in states, "the retry went ahead after the evidence"
    (row,) = await reads.eventually(lambda: _contradictions(pool, workflow_id), "the contradiction in the view")
    assert (row["cause"], row["provider"], row["later_copies"], row["after_close"]) == (
        "lookup_not_found",
        "twilio",
        0,
        False,
    )
    assert await reads.rows(pool, "SELECT * FROM duplicates_sent WHERE workflow_id = %s", workflow_id) == []
    assert len(await _conflict_observations(pool, workflow_id)) == 1


async def _report_while_the_retry_is_out(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    key, to = fresh_key(), fresh_recipient()
    workflow_id = f"{key}/sms"
    await emulator.arm(to, "lost_then_reported", hang_seconds=3, count=1)
    policy = LYING_POLICY.model_copy(update={"poll_initial": timedelta(seconds=45), "poll_max": timedelta(seconds=45)})
    await herald.send(receipt_request(key, to), policy=policy)

    def created(count: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return len(await emulator.messages(to)) >= count

        return check

    await reads.eventually(created(1), "attempt 1 at the emulator")
    # Attempt 2's own reports wait 20 s, so it is accepted and open when attempt 1 speaks up.
    await emulator.arm(to, "delayed_callback", delay_seconds=20, count=1)
    await reads.eventually(created(2), "attempt 2 at the emulator")

    async def attempt_two_accepted() -> bool:
        status = await herald.status(key)
        return len(status.attempts) == 2 and status.state is IntentState.ACCEPTED

    await reads.eventually(attempt_two_accepted, "attempt 2 to be accepted")
    assert await emulator.release_callbacks(to) == 1
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 2
    assert final.attempts[0].provider_status is ProviderStatus.DELIVERED
    assert "evidence about attempt 1 settles the intent" in final.transitions[-1].reason
    await asyncio.sleep(1)
    assert len(await emulator.messages(to)) == 2, "a third message went out after the evidence"
    (row,) = await reads.eventually(lambda: _contradictions(pool, workflow_id), "the contradiction in the view")
    assert (row["cause"], row["copy_went_out"], row["later_copies"], row["after_close"]) == (
        "lookup_not_found",
        True,
        1,
        False,
    )
    assert len(await reads.rows(pool, "SELECT * FROM duplicates_sent WHERE workflow_id = %s", workflow_id)) == 1
    report = await ledger_report(pool)
    assert report.duplicates_sent >= 1 and report.duplicates_by_cause.get("twilio/lookup_not_found", 0) >= 1
    assert "duplicates sent" in report.render()


# ---- the last look at the horizon ----------------------------------------------------------------

HORIZON_POLICY = TEST_POLICY.model_copy(
    update={
        "resolution_horizon": timedelta(seconds=5),
        # No poll and no lookup before the horizon: only the last look can find anything.
        "poll_initial": timedelta(seconds=60),
        "poll_max": timedelta(seconds=60),
        "lookup_first_delay": timedelta(seconds=60),
    }
)


async def _horizon_looks_once_more(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, fault: str, params: dict[str, Any]
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, fault, count=1, **params)
    started = datetime.now(UTC)
    await herald.send(receipt_request(key, to), policy=HORIZON_POLICY)
    final = await reads.final(herald, key)
    history = await intent_history(pool, f"{key}/sms")
    assert final.state is IntentState.DELIVERED, (final.transitions[-1].reason, history.observations)
    assert len(await emulator.messages(to)) == 1
    looks = [o for o in history.observations if o.source == "poll"]
    assert looks and all(o.observed_at >= started + HORIZON_POLICY.resolution_horizon for o in looks)
    assert "unknown" not in [t.to_state for t in history.transitions]


async def _unknown_only_after_a_last_lookup(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "silent", count=1)
    await herald.send(receipt_request(key, to), policy=HORIZON_POLICY)
    final = await reads.final(herald, key)
    assert final.state is IntentState.UNKNOWN
    assert "last lookup at" in final.transitions[-1].reason and "attempt 1 found sent" in final.transitions[-1].reason
    history = await intent_history(pool, f"{key}/sms")
    looks = [o for o in history.observations if o.source == "poll"]
    # One look found it sent. On a loaded machine the emulator may not answer the first try in time:
    # the last look asks again (a bounded number of times), and each such try is recorded as unavailable.
    assert [(o.kind, o.provider_status) for o in looks if o.kind != "unavailable"] == [("found", "sent")]
    assert [o.kind for o in looks][-1] == "found"


# ---- the scenarios, played together -------------------------------------------------------------


@pytest.fixture(scope="module")
async def played(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, settings: Any
) -> dict[str, asyncio.Task[None]]:
    """Every scenario but the one that counts the report's totals, started at once on its own key and
    recipient: each mostly waits on its policy's clocks (one after another they took 107 s). Each test
    awaits its own, so a scenario's failure is its test's."""
    scenarios = {
        "queue, reports": _held_in_the_senders_queue(herald, emulator, pool, callbacks=True),
        "queue, no reports": _held_in_the_senders_queue(herald, emulator, pool, callbacks=False),
        "validity": _outstays_its_validity(herald, emulator, pool),
        "busy": _busy_recipient(herald, emulator, pool, settings),
        "report in backoff": _report_during_the_backoff(herald, emulator, pool),
        "report in retry": _report_while_the_retry_is_out(herald, emulator, pool),
        "horizon, accepted": _horizon_looks_once_more(herald, emulator, pool, "no_callback", {}),
        "horizon, unknown": _horizon_looks_once_more(
            herald, emulator, pool, "accept_then_hang", {"hang_seconds": 3, "callbacks": False}
        ),
        "last lookup": _unknown_only_after_a_last_lookup(herald, emulator, pool),
    }
    return {name: asyncio.create_task(scenario) for name, scenario in scenarios.items()}


@pytest.mark.parametrize(
    "reports", ["queue, reports", "queue, no reports"], ids=["reports-after-the-queue", "no-reports"]
)
async def test_a_message_held_in_the_senders_queue_is_found_queued_and_never_resent(
    played: dict[str, asyncio.Task[None]], reports: str
) -> None:
    """Accepted, create answer lost, held `queued` with no date_sent for 8 s (longer than the in-flight
    bound, and than the whole proof window the suite used to have): the lookup sees it queued, the intent
    waits for it, exactly one message exists at the emulator, and the intent ends delivered."""
    await played[reports]


async def test_a_message_that_outstays_its_validity_period_is_dropped_then_retried_once(
    played: dict[str, asyncio.Task[None]],
) -> None:
    """The submit carries ValidityPeriod: held past it, the first copy fails unsent (30036), so the retry
    is the only message that reaches the handset; no duplicate, and none counted."""
    await played["validity"]


async def test_a_busy_recipient_is_searched_down_to_the_attempts_start(played: dict[str, asyncio.Task[None]]) -> None:
    """600 earlier messages from the same sender the same day (the same text among them), 250 more sent
    after the attempt began, callbacks unreachable, an ambiguous submit: the lookup pages past the 250
    to the attempt's start, finds the message and ends the intent delivered; exactly one message of ours."""
    await played["busy"]


async def test_a_report_during_the_backoff_stops_the_retry(played: dict[str, asyncio.Task[None]]) -> None:
    """Attempt 1 presumed not accepted, its report arriving while the retry waits: no attempt 2 is ever
    submitted, the intent ends delivered from attempt 1, and the contradiction is recorded (no duplicate)."""
    await played["report in backoff"]


async def test_a_report_while_the_retry_is_out_settles_the_intent_and_counts_the_duplicate(
    played: dict[str, asyncio.Task[None]],
) -> None:
    """Attempt 1 presumed not accepted, attempt 2 accepted and still open when attempt 1's reports arrive:
    the intent ends delivered on attempt 1's evidence, no attempt 3 exists, and the duplicate is counted
    in the view and in `starter.py report` by provider and cause."""
    await played["report in retry"]


@pytest.mark.parametrize(
    "case", ["horizon, accepted", "horizon, unknown"], ids=["accepted-never-reported", "unknown-submit-never-reported"]
)
async def test_the_horizon_looks_once_more_before_unknown(played: dict[str, asyncio.Task[None]], case: str) -> None:
    """The horizon fires while the provider has the message and nothing has looked yet: the last lookup
    (by id, or by our reference) finds it delivered and the intent ends delivered, not unknown."""
    await played[case]


async def test_unknown_only_after_a_last_lookup_found_nothing_final(played: dict[str, asyncio.Task[None]]) -> None:
    """A message stuck at `sent` with no report: the last lookup at the horizon finds it sent, and only then
    is the intent unknown, with what that look found in the reason."""
    await played["last lookup"]


async def test_a_report_after_the_close_is_recorded_and_counted(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, played: dict[str, asyncio.Task[None]]
) -> None:
    """Attempt 1 presumed not accepted, attempt 2 delivered and the intent closed, then attempt 1's reports:
    the ledger records the contradiction after the close, and the view and the report count the duplicate."""
    # Last, alone: it counts the report's duplicates before and after, which another scenario adds to.
    await asyncio.gather(*played.values(), return_exceptions=True)
    key, to = fresh_key(), fresh_recipient()
    workflow_id = f"{key}/sms"
    await emulator.arm(to, "lost_then_reported", hang_seconds=3, count=1)
    await herald.send(receipt_request(key, to), policy=LYING_POLICY)
    final = await reads.final(herald, key)
    assert final.state is IntentState.DELIVERED and len(final.attempts) == 2
    before = await ledger_report(pool)
    assert await emulator.release_callbacks(to) == 1
    (conflict,) = await reads.eventually(
        lambda: _conflict_observations(pool, workflow_id), "the conflicting observation"
    )
    assert conflict["attempt_number"] == 1 and "after the intent closed" in conflict["reason"]
    # The rule the machine applies before the close names the later copy after it too.
    assert "later attempt(s) [2] went to the provider too" in conflict["reason"]
    (row,) = await _contradictions(pool, workflow_id)
    assert (row["cause"], row["copy_went_out"], row["later_copies"], row["after_close"]) == (
        "lookup_not_found",
        True,
        1,
        True,
    )
    after = await ledger_report(pool)
    assert after.duplicates_sent == before.duplicates_sent + 1
    assert after.presumed_then_seen == before.presumed_then_seen + 1
    assert len(await emulator.messages(to)) == 2
