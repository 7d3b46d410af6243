"""NotificationWorkflow's SMS paths, one test each, on the time-skipping server with stand-in activities.

Every test asserts the intent's end (its status), what the stand-ins were asked (a submit whose
outcome is unknown is looked up, never sent again) and, where it matters, the ledger rows the
workflow handed to the submit activity and to ``append_ledger``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from herald.core.closing_clocks import HORIZON_REASON
from herald.core.contracts import IntentStatus, NotificationInput
from herald.core.lifecycle import IntentState, ObservationKind, Source, SubmitResult
from herald.core.message import Channel
from herald.core.outcomes import ProviderStatus
from herald.core.send_policy import Decision
from herald.temporal.workflow_api import ATTEMPTS_KEY, STATE_KEY
from tests.workflow import standins
from tests.workflow.harness import FAST_POLICY, TIMEOUT, Running, running, server_now, skip_until, sms_intent
from tests.workflow.standins import LOOKUP, SUBMIT, StandIns

pytestmark = pytest.mark.workflow_fast


async def eventually_state(run: Running, state: IntentState) -> IntentStatus:
    """Query until the intent is in `state` (real time, bounded)."""

    async def reached() -> IntentStatus:
        while (status := await run.status()).state is not state:
            await asyncio.sleep(0.05)
        return status

    return await asyncio.wait_for(reached(), TIMEOUT)


def kinds(st: StandIns) -> list[tuple[int | None, Source, ObservationKind, bool]]:
    return [(row.attempt_number, row.source, row.kind, row.applied) for row in st.observation_rows]


def moves(st: StandIns) -> list[tuple[IntentState, IntentState]]:
    return [(row.from_state, row.to_state) for row in st.transition_rows]


async def test_delivered_by_report(env: WorkflowEnvironment) -> None:
    """An accepted SMS is delivered by its report: one submit, no lookup, and the report's rows at the close."""
    st = StandIns(submit=[standins.accepted("SM1")])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        await st.called(SUBMIT)
        await run.report(ProviderStatus.DELIVERED, provider_id="SM1", inbox_id=101)
        status = await run.result()
        described = await asyncio.wait_for(run.handle.describe(), TIMEOUT)
    assert status.state is IntentState.DELIVERED and status.closed_by == "report:delivered"
    [submit] = st.submits
    assert submit.attempt_ref == run.attempt_ref(1) and st.lookups == []
    # The submit carries the intent row, the attempt row and the move into submitting, written before the call.
    assert submit.ledger.record is not None and submit.ledger.record.intent.workflow_id == run.intent.workflow_id
    assert [row.attempt_ref for row in submit.ledger.attempts] == [run.attempt_ref(1)]
    assert moves(st) == [
        (IntentState.PENDING, IntentState.SUBMITTING),
        (IntentState.SUBMITTING, IntentState.ACCEPTED),
        (IntentState.ACCEPTED, IntentState.DELIVERED),
    ]
    assert [row.seq for row in st.transition_rows] == [1, 2, 3]
    # Nothing written between the answer and the report: one write at the close, with the inbox verdict.
    [close] = st.calls(standins.APPEND_LEDGER)
    assert [(row.inbox_id, row.outcome) for row in close.receipt_outcomes] == [(101, "applied")]
    assert kinds(st) == [
        (1, Source.SUBMIT, ObservationKind.ACCEPTED, True),
        (1, Source.REPORT, ObservationKind.STATUS, True),
    ]
    # A straight delivery shows no state in the Web UI (the start request set none): no billed upsert.
    assert described.typed_search_attributes.get(STATE_KEY) is None
    assert described.typed_search_attributes.get(ATTEMPTS_KEY) is None


@pytest.mark.parametrize("how", ["activity_fails", "activity_times_out", "adapter_says_unknown"])
async def test_unknown_submit_found_by_lookup(env: WorkflowEnvironment, how: str) -> None:
    """A submit whose outcome is unknown is resolved by looking the same attempt up by reference, never by a second submit."""
    answer = {
        "activity_fails": standins.crashes(),
        "activity_times_out": standins.hangs(),
        "adapter_says_unknown": standins.unknown(),
    }[how]
    # The server does not skip an activity's start-to-close timeout: keep the hang short in real time.
    policy = FAST_POLICY.model_copy(update={"submit_timeout": timedelta(seconds=1)})
    st = StandIns(submit=[answer], lookup=[standins.found("SM2", ProviderStatus.DELIVERED)])
    async with running(env, st, sms_intent(await server_now(env)), policy) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED and status.closed_by == "poll:delivered"
    assert len(st.submits) == 1
    [lookup] = st.lookups
    assert lookup.provider_id is None and lookup.reference.attempt_ref == run.attempt_ref(1)
    [attempt] = status.attempts
    assert lookup.reference.since == attempt.started_at and attempt.provider_id == "SM2"
    assert st.times(LOOKUP)[0] - attempt.started_at >= policy.lookup_first_delay
    assert kinds(st) == [
        (1, Source.SUBMIT, ObservationKind.UNKNOWN, True),
        (1, Source.POLL, ObservationKind.FOUND, True),
    ]
    assert moves(st)[-1] == (IntentState.SUBMITTING, IntentState.DELIVERED)


async def test_unknown_at_the_horizon_after_lookups_find_nothing(env: WorkflowEnvironment) -> None:
    """Lookups that never find the attempt (still within the provider's queue bound) end it unknown at the horizon, after a last lookup, never resent."""
    # Ten hours of provider queue: "not found" cannot prove absence within a 30-minute horizon.
    policy = FAST_POLICY.model_copy(update={"provider_queue_validity": timedelta(hours=10)})
    st = StandIns(submit=[standins.crashes()], lookup=[standins.not_found()])
    async with running(env, st, sms_intent(await server_now(env)), policy) as run:
        status = await run.result()
    assert status.state is IntentState.UNKNOWN and status.closed_by == "clock:resolution_horizon"
    assert len(st.submits) == 1
    assert len(st.lookups) >= 5 and {lookup.provider_id for lookup in st.lookups} == {None}
    [attempt] = status.attempts
    horizon = attempt.started_at + policy.resolution_horizon
    assert st.times(LOOKUP)[-1] >= horizon > st.times(LOOKUP)[-2]  # the last lookup came after the horizon
    final = status.transitions[-1]
    assert final.to_state is IntentState.UNKNOWN and final.reason.startswith(HORIZON_REASON)
    assert "last lookup at" in final.reason and "attempt 1 not found" in final.reason
    assert all(not applied for (_, _, kind, applied) in kinds(st) if kind is ObservationKind.NOT_FOUND)


async def test_retryable_failure_then_retry_after_backoff_then_accepted(env: WorkflowEnvironment) -> None:
    """A definite retryable refusal opens attempt 2 after the backoff; attempt 2 is accepted and delivered (by poll)."""
    st = StandIns(
        submit=[standins.retryable(), standins.accepted("SM4")],
        lookup=[standins.found("SM4", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [submit.attempt_ref for submit in st.submits] == [run.attempt_ref(1), run.attempt_ref(2)]
    first, second = status.attempts
    assert first.submit_result is SubmitResult.RETRYABLE and first.error_code == 30001
    delay = timedelta(seconds=first.retry_delay_seconds or 0)
    # Equal jitter on the first backoff: between half and all of backoff_initial.
    assert FAST_POLICY.backoff_initial / 2 <= delay <= FAST_POLICY.backoff_initial
    assert second.started_at - first.started_at >= delay
    assert [lookup.provider_id for lookup in st.lookups] == ["SM4"]
    assert (IntentState.SUBMITTING, IntentState.RETRYABLE_FAILURE) in moves(st)
    assert (IntentState.RETRYABLE_FAILURE, IntentState.PENDING) in moves(st)
    # Attempt 2's row travels with its own submit, before the provider hears of it.
    assert [row.number for row in st.submits[1].ledger.attempts] == [2]


async def test_retry_budget_exhausted_ends_in_permanent_failure(env: WorkflowEnvironment) -> None:
    """Retryable refusals spend the budget: after max_attempts submits the intent fails for good."""
    policy = FAST_POLICY.model_copy(update={"max_attempts": 3})
    st = StandIns(submit=[standins.retryable()])
    async with running(env, st, sms_intent(await server_now(env)), policy) as run:
        status = await run.result()
    assert status.state is IntentState.PERMANENT_FAILURE and status.closed_by == "clock:permanent_failure"
    assert [submit.attempt_ref for submit in st.submits] == [run.attempt_ref(n) for n in (1, 2, 3)]
    assert status.transitions[-1].reason == "retry budget exhausted after 3 attempts"
    assert st.lookups == []


async def test_permanent_rejection(env: WorkflowEnvironment) -> None:
    """A permanent refusal ends the intent at once: one submit, no lookup, no retry."""
    st = StandIns(submit=[standins.rejected()])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.PERMANENT_FAILURE and status.closed_by == "submit:permanent_failure"
    assert len(st.submits) == 1 and st.lookups == []
    [attempt] = status.attempts
    assert attempt.submit_result is SubmitResult.REJECTED and attempt.error_code == 21211
    assert kinds(st) == [(1, Source.SUBMIT, ObservationKind.REJECTED, True)]


async def test_refused_before_any_call(env: WorkflowEnvironment) -> None:
    """A submit refused before any provider was called (the recipient erased) ends the intent at once,
    the rule named, as a permanent refusal: one submit, no lookup, no provider on the attempt."""
    st = StandIns(submit=[standins.refused()])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.PERMANENT_FAILURE and status.closed_by == "submit:permanent_failure"
    assert len(st.submits) == 1 and st.lookups == []
    [attempt] = status.attempts
    assert attempt.submit_result is SubmitResult.REJECTED and attempt.provider is None
    assert "recipient erased" in (attempt.submit_reason or "") and "recipient erased" in status.transitions[-1].reason
    assert kinds(st) == [(1, Source.SUBMIT, ObservationKind.REJECTED, True)]


async def test_undelivered_by_report(env: WorkflowEnvironment) -> None:
    """A report of a permanent carrier failure ends the intent undelivered, with no retry."""
    st = StandIns(submit=[standins.accepted("SM7", ProviderStatus.SENT)])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        await st.called(SUBMIT)
        await run.report(ProviderStatus.UNDELIVERED, provider_id="SM7", inbox_id=701, error_code=30006)
        status = await run.result()
    assert status.state is IntentState.UNDELIVERED and status.closed_by == "report:undelivered"
    assert len(st.submits) == 1 and st.lookups == []
    [attempt] = status.attempts
    assert attempt.provider_status is ProviderStatus.UNDELIVERED and attempt.error_code == 30006
    assert not attempt.failure_retryable


async def test_delivered_by_poll(env: WorkflowEnvironment) -> None:
    """Without a report, the accepted attempt is polled by its id on the poll schedule until delivered."""
    st = StandIns(
        submit=[standins.accepted("SM8")],
        lookup=[standins.found("SM8", ProviderStatus.SENT), standins.found("SM8", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED and status.closed_by == "poll:delivered"
    assert [lookup.provider_id for lookup in st.lookups] == ["SM8", "SM8"]
    [attempt] = status.attempts
    first_poll, second_poll = st.times(LOOKUP)
    assert first_poll - attempt.started_at >= FAST_POLICY.poll_initial * 0.9
    assert second_poll - first_poll >= FAST_POLICY.poll_initial * 2 * 0.9
    assert len(st.submits) == 1 and attempt.lookups == 2


async def test_expired_while_deferred_by_policy(env: WorkflowEnvironment) -> None:
    """An intent the send policy defers past its expiry expires, naming both reasons; nothing was sent."""
    now = await server_now(env)
    intent = sms_intent(now, expires_at=(now + timedelta(hours=1)).isoformat())
    hold = standins.held(Decision.DEFER, "quiet_hours", "quiet hours until 08:00", not_before=now + timedelta(hours=9))
    st = StandIns(submit=[hold])
    async with running(env, st, intent) as run:
        status = await run.result()
    assert status.state is IntentState.EXPIRED and status.closed_by == "clock:expiry"
    assert len(st.submits) == 1 and status.attempts == []  # the held attempt was withdrawn
    final = status.transitions[-1]
    assert (final.from_state, final.to_state) == (IntentState.PENDING, IntentState.EXPIRED)
    assert final.reason.startswith("intent expired at") and "held by policy v7 (quiet_hours)" in final.reason
    assert timedelta(0) <= final.at - intent.expires_at < timedelta(seconds=1)  # on the expiry timer
    assert (None, Source.POLICY, ObservationKind.DEFERRED, True) in kinds(st)


async def test_expired_while_the_provider_is_unreachable(env: WorkflowEnvironment) -> None:
    """An outage is retried past max_attempts (it spends no budget) until the intent's expiry, which names the outage."""
    now = await server_now(env)
    intent = sms_intent(now, expires_at=(now + timedelta(minutes=30)).isoformat())
    st = StandIns(submit=[standins.unreachable()])
    async with running(env, st, intent) as run:
        status = await run.result()
    assert status.state is IntentState.EXPIRED and status.closed_by == "clock:expiry"
    assert len(st.submits) > FAST_POLICY.max_attempts
    assert {attempt.submit_result for attempt in status.attempts} == {SubmitResult.UNREACHABLE}
    assert "provider unreachable since" in status.transitions[-1].reason
    assert st.lookups == []


async def test_policy_defers_then_admits(env: WorkflowEnvironment) -> None:
    """A policy deferral withdraws the prepared attempt, waits on a timer until not_before, and prepares the same attempt again."""
    now = await server_now(env)
    not_before = now + timedelta(hours=9)
    st = StandIns(
        submit=[
            standins.held(Decision.DEFER, "quiet_hours", "quiet hours until 08:00", not_before),
            standins.accepted("SM11"),
        ],
        lookup=[standins.found("SM11", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(now)) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    first, second = st.submits
    # The attempt number (and the seq of its "prepared" transition) were given back and used again.
    assert first.attempt_ref == second.attempt_ref == run.attempt_ref(1)
    assert [row.seq for row in first.ledger.transitions] == [row.seq for row in second.ledger.transitions] == [1]
    assert second.policy_at >= not_before and first.policy_at < not_before
    assert len(status.attempts) == 1 and status.attempts[0].started_at >= not_before
    # The intent row and the deferral were written before the wait, so the second submit carries no intent row.
    assert second.ledger.record is None
    [deferred] = [row for row in st.observation_rows if row.kind is ObservationKind.DEFERRED]
    assert deferred.source is Source.POLICY and deferred.reason.startswith("quiet_hours (policy v7): ")
    assert moves(st)[0] == (IntentState.PENDING, IntentState.SUBMITTING)


async def test_policy_suppresses(env: WorkflowEnvironment) -> None:
    """A policy suppression closes the intent as suppressed: nothing was written by the submit, nothing sent."""
    st = StandIns(
        submit=[standins.held(Decision.SUPPRESS, "consent", "marketing needs consent evidence; none is recorded")]
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.SUPPRESSED and status.closed_by == "policy:consent"
    assert len(st.submits) == 1 and status.attempts == [] and st.lookups == []
    assert moves(st) == [(IntentState.PENDING, IntentState.SUPPRESSED)]
    assert kinds(st) == [(None, Source.POLICY, ObservationKind.POLICY_SUPPRESSED, True)]


async def test_cancel_before_submit(env: WorkflowEnvironment) -> None:
    """A cancel while the send policy defers the intent (the recipient cooldown) closes it; nothing is sent."""
    now = await server_now(env)
    hold = standins.held(Decision.DEFER, "cooldown", "recipient cooldown until later", not_before=now + timedelta(hours=1))
    st = StandIns(submit=[hold])  # one answer, repeated: a second submit would be held again and show here
    async with running(env, st, sms_intent(now)) as run:
        await st.called(SUBMIT)
        # The hold withdrew the prepared attempt: the intent waits in pending, with no attempt.
        for _ in range(200):
            waiting = await run.status()
            if waiting.state is IntentState.PENDING and waiting.observations_recorded:
                break
            await asyncio.sleep(0.02)
        assert waiting.state is IntentState.PENDING and waiting.attempts == []
        answer = await run.cancel()
        status = await run.result()
    assert answer.cancelled and answer.state is IntentState.CANCELLED
    assert answer.message == "cancelled before any message reached the provider"
    assert status.state is IntentState.CANCELLED and status.closed_by == "operator:cancel"
    assert len(st.submits) == 1 and status.attempts == []
    assert status.transitions[-1].reason == "cancelled by ops@example: order refunded"
    assert moves(st)[-1] == (IntentState.PENDING, IntentState.CANCELLED)


@pytest.mark.parametrize("cancel_accepted", [False, True], ids=["twilio_cannot_cancel", "provider_can_cancel"])
async def test_cancel_after_an_accepted_submit(env: WorkflowEnvironment, cancel_accepted: bool) -> None:
    """A cancel after acceptance closes the intent, asks the provider to drop the attempt only if it can, and tracks the attempt to its own outcome."""
    capabilities = standins.TWILIO.model_copy(update={"cancel_accepted": cancel_accepted})
    st = StandIns(
        submit=[standins.accepted("SM14", capabilities=capabilities)],
        cancel=[standins.cancel_answer(False, "Twilio cancels only scheduled messages")],
        lookup=[standins.found("SM14", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        await eventually_state(run, IntentState.ACCEPTED)
        answer = await run.cancel()
        status = await run.result()
    assert answer.cancelled and answer.state is IntentState.CANCELLED
    assert "cannot be recalled and is tracked to its outcome" in answer.message
    assert status.state is IntentState.CANCELLED and status.closed_by == "operator:cancel"
    # The provider is asked to drop the message only when it declares it can (cancel_accepted).
    asked = (1, Source.OPERATOR, ObservationKind.PROVIDER_CANCEL, False) in kinds(st)
    if cancel_accepted:
        [cancel] = st.calls(standins.CANCEL)
        assert cancel.provider_id == "SM14" and cancel.channel is Channel.SMS and asked
    else:
        assert st.calls(standins.CANCEL) == [] and not asked
    # The attempt is still followed: a poll records its delivery without changing the intent.
    assert [lookup.provider_id for lookup in st.lookups] == ["SM14"]
    assert status.attempts[0].provider_status is ProviderStatus.DELIVERED
    assert len(st.submits) == 1


async def test_key_conflict_is_recorded(env: WorkflowEnvironment) -> None:
    """A refused reuse of the key is recorded as an observation and changes nothing about the intent."""
    st = StandIns(submit=[standins.accepted("SM15")])
    fingerprint = "ab" * 32
    async with running(env, st, sms_intent(await server_now(env))) as run:
        await st.called(SUBMIT)
        await run.key_conflict(fingerprint)
        await run.report(ProviderStatus.DELIVERED, provider_id="SM15", inbox_id=1501)
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    [conflict] = [row for row in st.observation_rows if row.kind is ObservationKind.KEY_CONFLICT]
    assert (conflict.source, conflict.applied, conflict.attempt_number) == (Source.CLIENT, False, None)
    assert fingerprint[:16] in conflict.reason and fingerprint not in conflict.reason
    assert status.observations_recorded == 3  # accepted, the conflict, the report
    assert len(st.submits) == 1


async def test_long_poll_continues_as_new_with_its_state(env: WorkflowEnvironment) -> None:
    """A days-long poll continues as new when the server suggests it, carrying attempts, transitions,
    seen reports and ledger sequences: the new run submits nothing, ignores a report the first run
    saw, and ends delivered by the next one."""
    now = await server_now(env)
    # A poll a minute for days: the history grows until the server suggests continuing as new
    # (the test server does, at about 4,000 events: some 330 polls, a few seconds of real time).
    policy = FAST_POLICY.model_copy(
        update={
            "resolution_horizon": timedelta(days=3),
            "poll_initial": timedelta(minutes=1),
            "poll_max": timedelta(minutes=1),
        }
    )
    intent = sms_intent(now, expires_at=(now + timedelta(days=4)).isoformat())
    st = StandIns(submit=[standins.accepted("SM16")], lookup=[standins.found("SM16", ProviderStatus.SENT)])
    async with running(env, st, intent, policy) as run:
        first_run = run.handle.result_run_id
        await st.called(SUBMIT)
        await run.report(ProviderStatus.SENT, provider_id="SM16", inbox_id=1601)

        async def continued() -> bool:
            described = await asyncio.wait_for(run.handle.describe(), TIMEOUT)
            return described.run_id != first_run

        # Half an hour of polls at a time, until the run has continued as new (then time stands still).
        await skip_until(env, continued, timedelta(minutes=30), most=24)
        history = await asyncio.wait_for(run.handle.fetch_history(), TIMEOUT)
        started = history.events[0].workflow_execution_started_event_attributes
        [carried_input] = await env.client.data_converter.decode(started.input.payloads, [NotificationInput])
        # The report the first run applied, signalled again, then the final one.
        await run.report(ProviderStatus.SENT, provider_id="SM16", inbox_id=1601)
        await run.report(ProviderStatus.DELIVERED, provider_id="SM16", inbox_id=1602)
        status = await run.result()
    carried = carried_input.carried
    assert carried is not None and carried.state is IntentState.ACCEPTED and carried.intent_recorded
    assert carried.seen_inbox_ids == [1601]
    assert [(a.number, a.provider_id, a.provider_status) for a in carried.attempts] == [
        (1, "SM16", ProviderStatus.SENT)
    ]
    assert carried.next_transition_seq == 3 and carried.next_observation_seq == carried.observations_recorded + 1
    assert carried_input.intent == intent and carried_input.policy == policy
    assert status.state is IntentState.DELIVERED and len(st.submits) == 1
    [attempt] = status.attempts
    assert attempt.lookups > carried.attempts[0].lookups > 0  # the count goes on across runs
    assert [t.to_state for t in status.transitions] == [
        IntentState.SUBMITTING,
        IntentState.ACCEPTED,
        IntentState.DELIVERED,
    ]
    # The repeated report left no row; the final one was applied under the carried sequence.
    inbox_rows = [row.inbox_id for row in st.observation_rows if row.inbox_id is not None]
    assert inbox_rows == [1601, 1602]
    assert [row.seq for row in st.transition_rows] == [1, 2, 3]


async def test_ledger_away_prepares_the_same_attempt_again(env: WorkflowEnvironment) -> None:
    """A submit that could not write the ledger (so never called the provider) is retried as the same attempt, carrying its unwritten rows."""
    st = StandIns(
        submit=[standins.not_sent(), standins.accepted("SM17")],
        lookup=[standins.found("SM17", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    first, second = st.submits
    assert first.attempt_ref == second.attempt_ref == run.attempt_ref(1) and len(status.attempts) == 1
    # The rows the first submit could not write travel again, with the intent row.
    assert second.ledger.record is not None and [row.number for row in second.ledger.attempts] == [1]
    assert [row.seq for row in second.ledger.transitions] == [1]
    assert st.times(SUBMIT)[1] - st.times(SUBMIT)[0] >= FAST_POLICY.backoff_initial
    assert status.attempts[0].submit_result is SubmitResult.ACCEPTED


async def test_retry_after_a_lookup_proves_absence(env: WorkflowEnvironment) -> None:
    """An unknown submit that lookups still do not find past the provider's queue bound was not accepted: attempt 2 goes, once."""
    st = StandIns(
        submit=[standins.crashes(), standins.accepted("SM18")],
        lookup=[
            standins.by_reference_then_by_id(standins.not_found(), standins.found("SM18", ProviderStatus.DELIVERED))
        ],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [submit.attempt_ref for submit in st.submits] == [run.attempt_ref(1), run.attempt_ref(2)]
    first, second = status.attempts
    assert first.submit_result is SubmitResult.NOT_ACCEPTED and second.provider_status is ProviderStatus.DELIVERED
    proof_window = FAST_POLICY.submit_in_flight_bound + FAST_POLICY.provider_queue_validity
    by_reference = [at for at, lookup in zip(st.times(LOOKUP), st.lookups) if lookup.provider_id is None]
    assert by_reference[-1] - first.started_at >= proof_window > by_reference[-2] - first.started_at
    proven = [row for row in st.observation_rows if row.kind is ObservationKind.NOT_FOUND and row.applied]
    assert [row.attempt_number for row in proven] == [1]
    assert second.started_at > by_reference[-1]


async def test_late_report_during_backoff_settles_without_a_resend(env: WorkflowEnvironment) -> None:
    """A report for an attempt presumed absent, arriving during the backoff before attempt 2, settles the intent: no second submit."""
    # A long backoff: the test acts while the intent waits in retryable_failure.
    policy = FAST_POLICY.model_copy(update={"backoff_initial": timedelta(hours=1), "backoff_max": timedelta(hours=1)})
    st = StandIns(submit=[standins.crashes()], lookup=[standins.not_found()])
    async with running(env, st, sms_intent(await server_now(env)), policy) as run:

        async def backing_off() -> bool:
            return (await run.status()).state is IntentState.RETRYABLE_FAILURE

        await skip_until(env, backing_off, timedelta(minutes=1), most=30)
        await run.report(ProviderStatus.DELIVERED, provider_id="SM19", inbox_id=1901)
        status = await run.result()
    assert status.state is IntentState.DELIVERED and len(st.submits) == 1
    [attempt] = status.attempts
    assert attempt.seen_after_presumed_absent and attempt.provider_id == "SM19"
    assert moves(st)[-1] == (IntentState.RETRYABLE_FAILURE, IntentState.DELIVERED)
    [seen] = [row for row in st.observation_rows if row.kind is ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN]
    assert seen.attempt_number == 1 and "no later attempt went out" in seen.reason


async def test_unknown_at_the_horizon_while_lookups_are_unavailable(env: WorkflowEnvironment) -> None:
    """When the provider cannot answer lookups, the last look at the horizon asks three times before calling it unknown."""
    st = StandIns(submit=[standins.crashes()], lookup=[standins.lookup_unavailable()])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.UNKNOWN and len(st.submits) == 1
    [attempt] = status.attempts
    horizon = attempt.started_at + FAST_POLICY.resolution_horizon
    last_look = [at for at in st.times(LOOKUP) if at >= horizon]
    assert len(last_look) == 3  # asked again 2 s and 4 s later
    assert last_look[1] - last_look[0] >= timedelta(seconds=2) and last_look[2] - last_look[1] >= timedelta(seconds=4)
    assert "attempt 1 unavailable" in status.transitions[-1].reason


async def test_outage_gives_up_at_the_category_limit(env: WorkflowEnvironment) -> None:
    """While the provider is unreachable, the admitting policy's give-up closes the intent before its expiry, naming the rule."""
    st = StandIns(submit=[standins.unreachable(give_up_after_seconds=600)])
    intent = sms_intent(await server_now(env))
    async with running(env, st, intent) as run:
        status = await run.result()
    assert status.state is IntentState.EXPIRED
    final = status.transitions[-1]
    assert final.reason.startswith(f"gave up at {(intent.created_at + timedelta(seconds=600)).isoformat()}")
    assert "provider unreachable since" in final.reason
    assert timedelta(0) <= final.at - (intent.created_at + timedelta(seconds=600)) < timedelta(seconds=1)
    assert intent.expires_at - final.at > timedelta(hours=23)


async def test_cancel_racing_an_accepted_submit(env: WorkflowEnvironment) -> None:
    """A cancel while the submit is in flight closes the intent at once; the provider's acceptance that follows is recorded and the attempt tracked, not resent or recalled."""
    gate = asyncio.Event()
    st = StandIns(
        submit=[standins.after(gate, standins.accepted("SM20"))],
        lookup=[standins.found("SM20", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        await st.called(SUBMIT)
        answer = await run.cancel()
        gate.set()
        status = await run.result()
    assert answer.cancelled and answer.state is IntentState.CANCELLED
    assert "cannot be recalled" in answer.message
    assert status.state is IntentState.CANCELLED and status.closed_by == "operator:cancel"
    assert status.transitions[-1].reason.endswith(
        "an attempt already went to the provider and is tracked to its own outcome"
    )
    [attempt] = status.attempts
    assert attempt.provider_id == "SM20" and attempt.provider_status is ProviderStatus.DELIVERED
    assert len(st.submits) == 1 and [lookup.provider_id for lookup in st.lookups] == ["SM20"]
    assert st.calls(standins.CANCEL) == []  # Twilio cannot cancel an accepted message
    accepted_row = next(row for row in st.observation_rows if row.kind is ObservationKind.ACCEPTED)
    assert accepted_row.provider_id == "SM20"


async def test_key_already_in_the_ledger_from_an_earlier_run(env: WorkflowEnvironment) -> None:
    """A key the ledger already holds from a run Temporal has forgotten is suppressed, numbering its rows after that run's."""
    st = StandIns(submit=[standins.already_recorded("run-before-retention", IntentState.DELIVERED, 5, 3)])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.SUPPRESSED and status.closed_by == "ledger:ledger"
    assert status.attempts == [] and len(st.submits) == 1 and st.lookups == []
    assert status.transitions[-1].reason == "already recorded by run run-before-retention (last state delivered)"
    [close] = st.calls(standins.APPEND_LEDGER)
    assert close.record is None and close.attempts == []
    assert [(row.seq, row.from_state, row.to_state) for row in close.transitions] == [
        (5, IntentState.PENDING, IntentState.SUPPRESSED)
    ]
