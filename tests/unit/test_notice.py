"""A notice on several channels: validation before anything starts, the side-by-side view, and the
e-mail decisions that live outside the workflow (Message-ID reuse, assumed capabilities)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from herald.core.channels import assumed_capabilities
from herald.core.contracts import AttemptStatus, IntentStatus, TransitionStatus
from herald.core.lifecycle import IntentState, Source, SubmitResult
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.record import IntentRecord
from herald.core.message import Channel
from herald.intake.errors import InvalidIntent
from herald.intake.notice import parse_notice
from herald.intake.requests import build_intent, parse_request
from herald.notice_view import render_notice
from tests.intents import EMAIL_ENTRY, SMS_ENTRY
from tests.keys import SESSION_KEYRING
from tests.unit.clock import TestClock

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SMS, EMAIL = SMS_ENTRY, EMAIL_ENTRY


def notice(*channels: dict[str, Any]) -> dict[str, Any]:
    return {"business_key": "order_receipt:pay_1", "channels": list(channels)}


def test_a_notice_is_one_request_per_channel_under_one_key() -> None:
    requests = parse_notice(notice(SMS, EMAIL)).requests()
    assert [(r.business_key, r.channel) for r in requests] == [
        ("order_receipt:pay_1", Channel.SMS),
        ("order_receipt:pay_1", Channel.EMAIL),
    ]
    assert [r.workflow_id for r in requests] == ["order_receipt:pay_1/sms", "order_receipt:pay_1/email"]


def test_a_bad_entry_names_its_channel_index_and_starts_nothing() -> None:
    """Each entry's own rules run before anything starts; the problem is named channels.<i>.<field>."""
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice(SMS, {**EMAIL, "recipient": "not an address"}))
    assert refused.value.problems == [("channels.1.recipient", "must be an e-mail address (local-part@domain)")]
    assert "not an address" not in str(refused.value)


def test_a_channel_named_twice_is_refused() -> None:
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice(SMS, {**SMS, "recipient": "+15551230002"}))
    assert "one intent per channel" in str(refused.value)


def test_a_notice_needs_at_least_one_channel() -> None:
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice())
    assert refused.value.problems[0][0] == "channels"


def _status(channel: str, state: IntentState, attempts: list[AttemptStatus]) -> IntentStatus:
    return IntentStatus(
        workflow_id=f"order_receipt:pay_1/{channel}",
        business_key="order_receipt:pay_1",
        channel=channel,
        template_id="order_receipt",
        template_version=1,
        content_sha256="ab" * 32,
        state=state,
        attempts=attempts,
        transitions=[TransitionStatus(at=AT, from_state=IntentState.PENDING, to_state=IntentState.SUBMITTING, reason="x", source=Source.SUBMIT)],
        destination_fingerprint="0123456789abcdef",
    )


def test_the_notice_view_puts_each_channel_in_its_own_column() -> None:
    delivered = _status("email", IntentState.DELIVERED, [AttemptStatus(number=1, attempt_ref="att_1", started_at=AT, submit_result=SubmitResult.ACCEPTED, provider="sendgrid")])
    pending = _status("sms", IntentState.SUBMITTING, [AttemptStatus(number=1, attempt_ref="att_2", started_at=AT, submit_result=SubmitResult.UNKNOWN)])
    view = render_notice("order_receipt:pay_1", {"sms": pending, "email": delivered})
    header = view.splitlines()[1]
    assert header.index("sms") < header.index("email")
    state_line = next(line for line in view.splitlines() if line.startswith("state"))
    assert state_line.index("submitting") < state_line.index("delivered")
    assert "unknown -> -" in view and "accepted -> -" in view and "via sendgrid" in view
    assert "0123456789abcdef" in view


def test_the_notice_view_says_why_an_attempt_still_waits() -> None:
    """An e-mail waiting on a silent event stream shows the whole reason, wrapped into its column."""
    reason = (
        "waiting: event stream silent since 2026-12-01T08:59:00+00:00; "
        "no event yet for a submission made after 2026-12-01T09:01:00+00:00"
    )
    waiting = AttemptStatus(
        number=1, attempt_ref="att_1", started_at=AT, submit_result=SubmitResult.UNKNOWN, waiting=reason
    )
    view = render_notice("order_receipt:pay_1", {"email": _status("email", IntentState.SUBMITTING, [waiting])})
    lines = view.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip().startswith("waiting:"))
    shown = " ".join(line.strip() for line in lines[start : start + 3])
    assert shown == reason


def test_the_notice_view_shows_a_missing_channel() -> None:
    view = render_notice("order_receipt:pay_1", {"sms": None, "email": _status("email", IntentState.PENDING, [])})
    assert "(none on this channel)" in view


def _record_with(*results: SubmitResult | None) -> IntentRecord:
    intent = build_intent(parse_request({"business_key": "order_receipt:pay_1", **EMAIL}), AT, SESSION_KEYRING)
    record = IntentRecord(intent, TestClock(AT), "run-1")
    for number, result in enumerate(results, start=1):
        attempt = AttemptRecord(number, f"att_x_{number}", AT)
        attempt.submit_result = result
        record.attempts.append(attempt)
    return record


def test_a_resend_under_the_evidence_window_rule_reuses_the_message_id() -> None:
    """Only after the rule presumed the previous attempt absent does a new attempt carry its
    Message-ID; a chain of such resends keeps the first attempt's."""
    assert _record_with(SubmitResult.NO_EVIDENCE, None).message_id_to_reuse() == "att_x_1"
    chained = _record_with(SubmitResult.NO_EVIDENCE, SubmitResult.NO_EVIDENCE, None)
    chained.attempts[1].message_id_of = "att_x_1"
    assert chained.message_id_to_reuse() == "att_x_1"
    # A definite refusal means the relay never had it: the new attempt is a new message.
    assert _record_with(SubmitResult.RETRYABLE, None).message_id_to_reuse() is None
    assert _record_with(None).message_id_to_reuse() is None


def test_assumed_capabilities_never_let_email_look_up_and_keep_sms_looking_up() -> None:
    email, sms = assumed_capabilities(Channel.EMAIL), assumed_capabilities(Channel.SMS)
    assert not (email.status_lookup or email.lookup_by_reference or email.bounded_queue)
    assert email.delivery_reports
    assert sms.status_lookup and sms.lookup_by_reference
