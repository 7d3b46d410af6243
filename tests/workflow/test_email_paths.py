"""NotificationWorkflow's e-mail paths through an SMTP relay with an event webhook (no lookups,
delivery reports only), one test each, on the time-skipping server with stand-in activities.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from herald.core.closing_clocks import HORIZON_REASON
from herald.core.lifecycle import IntentState, ObservationKind, Source, SubmitResult
from herald.core.message import Channel
from herald.core.outcomes import ProviderStatus
from herald.core.silence import SilenceRule
from tests.workflow import standins
from tests.workflow.harness import FAST_POLICY, email_intent, running, server_now, skip_until
from tests.workflow.standins import EVENT_STREAM, SUBMIT, StandIns

pytestmark = pytest.mark.workflow_fast

EMAIL = Channel.EMAIL


def submitted(st: StandIns, times: int) -> Callable[[], Awaitable[bool]]:
    async def enough() -> bool:
        return len(st.submits) >= times

    return enough


def message_id(ref: str) -> str:
    return f"<{ref}@herald.example>"


async def test_email_delivered_by_event(env: WorkflowEnvironment) -> None:
    """An e-mail the relay accepted is delivered by the ESP's event; nothing is looked up, and the ledger is written once, at the close."""
    intent = email_intent(await server_now(env))
    st = StandIns(submit=[standins.accepted(message_id("m1"), channel=EMAIL)])
    async with running(env, st, intent) as run:
        await st.called(SUBMIT)
        await run.report(ProviderStatus.DELIVERED, provider_id=message_id("m1"), inbox_id=201)
        status = await run.result()
    assert status.state is IntentState.DELIVERED and status.closed_by == "report:delivered"
    [submit] = st.submits
    assert submit.message == intent.message and submit.message.channel is EMAIL and submit.message_id_of is None
    assert st.lookups == [] and st.calls(EVENT_STREAM) == []
    [close] = st.calls(standins.APPEND_LEDGER)
    assert [(row.inbox_id, row.outcome) for row in close.receipt_outcomes] == [(201, "applied")]
    assert status.attempts[0].capabilities == standins.SMTP_WITH_EVENTS


async def test_email_unknown_at_the_horizon_without_events(env: WorkflowEnvironment) -> None:
    """An unknown submit to a relay without lookups waits for events; with the event stream silent, silence proves nothing and it ends unknown at the horizon, never resent."""
    st = StandIns(
        submit=[standins.unknown("SMTPServerDisconnected during DATA: the relay may have the message", channel=EMAIL)],
        event_stream=[standins.stream_silent()],
    )
    async with running(env, st, email_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.UNKNOWN and status.closed_by == "clock:resolution_horizon"
    assert len(st.submits) == 1 and st.lookups == []
    reads = st.calls(EVENT_STREAM)
    assert len(reads) >= 2 and {read.attempt_ref for read in reads} == {run.attempt_ref(1)}
    [attempt] = status.attempts
    # The stream is first read once the evidence window has passed (the wait's row is written at that read).
    [silent] = [row for row in st.observation_rows if row.kind is ObservationKind.STREAM_SILENT]
    assert silent.observed_at - attempt.started_at >= FAST_POLICY.event_evidence_window
    assert attempt.submit_result is SubmitResult.UNKNOWN and attempt.waiting_rule == SilenceRule.NOT_PASSED.value
    final = status.transitions[-1]
    assert final.reason.startswith(HORIZON_REASON) and "event stream silent" in final.reason
    assert not silent.applied  # recorded once, not at every read


async def test_email_resent_after_the_stream_passed(env: WorkflowEnvironment) -> None:
    """An unknown submit is presumed not accepted once the event stream has flowed past it for a window; the resend carries the first attempt's Message-ID."""
    st = StandIns(
        submit=[
            standins.unknown("SMTPServerDisconnected during DATA: the relay may have the message", channel=EMAIL),
            standins.accepted(message_id("m1"), channel=EMAIL),
        ],
        event_stream=[standins.stream_passed_at_window_end()],
    )
    async with running(env, st, email_intent(await server_now(env))) as run:
        # The evidence window (10 min), then a window after the stream passed (at 3 min), then the backoff.
        await skip_until(env, submitted(st, 2), timedelta(minutes=1))
        await run.report(ProviderStatus.DELIVERED, provider_id=message_id("m1"), inbox_id=301, attempt=2)
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    first, second = st.submits
    assert (first.attempt_ref, first.message_id_of) == (run.attempt_ref(1), None)
    assert (second.attempt_ref, second.message_id_of) == (run.attempt_ref(2), run.attempt_ref(1))
    one, two = status.attempts
    assert one.submit_result is SubmitResult.NO_EVIDENCE and two.provider_status is ProviderStatus.DELIVERED
    [presumed] = [row for row in st.observation_rows if row.kind is ObservationKind.NO_EVIDENCE]
    assert presumed.attempt_number == 1 and presumed.applied and "presumed not accepted" in presumed.reason
    # Waiting first (the stream had passed less than a window ago), then the rule counted.
    assert [row.reason.split(":")[0] for row in st.observation_rows if row.kind is ObservationKind.STREAM_SILENT] == [
        "waiting"
    ]
    assert st.lookups == []


async def test_email_451_is_retried(env: WorkflowEnvironment) -> None:
    """A 451 at the end of DATA is a definite "not now": a second attempt goes after the backoff and is delivered."""
    st = StandIns(
        submit=[
            standins.retryable("SMTP 451 at the end of DATA: the relay says not now", error_code=None, channel=EMAIL),
            standins.accepted(message_id("m2"), channel=EMAIL),
        ]
    )
    async with running(env, st, email_intent(await server_now(env))) as run:
        await skip_until(env, submitted(st, 2), timedelta(seconds=1))
        await run.report(ProviderStatus.DELIVERED, provider_id=message_id("m2"), inbox_id=401, attempt=2)
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [submit.attempt_ref for submit in st.submits] == [run.attempt_ref(1), run.attempt_ref(2)]
    # A refused copy carries its own Message-ID: it was never accepted, so there is nothing to pair with.
    assert st.submits[1].message_id_of is None
    first, _ = status.attempts
    assert first.submit_result is SubmitResult.RETRYABLE and first.submit_reason.startswith("SMTP 451")
    assert st.lookups == [] and st.calls(EVENT_STREAM) == []


async def test_email_550_is_permanent(env: WorkflowEnvironment) -> None:
    """A 550 at the end of DATA ends the intent as a permanent failure: one submit, nothing else."""
    st = StandIns(
        submit=[
            standins.rejected(
                "SMTP 550 at the end of DATA: the relay refused the message", error_code=None, channel=EMAIL
            )
        ]
    )
    async with running(env, st, email_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.PERMANENT_FAILURE and status.closed_by == "submit:permanent_failure"
    assert len(st.submits) == 1 and st.lookups == [] and st.calls(EVENT_STREAM) == []
    assert [(row.source, row.kind) for row in st.observation_rows] == [(Source.SUBMIT, ObservationKind.REJECTED)]
