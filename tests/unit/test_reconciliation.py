"""Which path resolves an attempt, chosen by the machine from its provider's declared capabilities (no Temporal)."""

from __future__ import annotations

from datetime import UTC, datetime

from herald.channels import assumed_capabilities
from herald.contracts import NotificationInput
from herald.delivery_policy import DeliveryPolicy
from herald.intent import Channel, build_intent, parse_request
from herald.machine import IntentMachine
from herald.machine.attempt import AttemptRecord
from herald.providers.port import Capabilities
from herald.providers.smtp import SmtpAdapter
from herald.providers.twilio import TwilioAdapter
from herald.settings import EmailSettings
from tests.unit.clock import TestClock

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DATA = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}


def reconciler(channel: Channel) -> IntentMachine:
    recipient, template = ("+15551230001", "order_receipt") if channel is Channel.SMS else ("a@example.com", "order_receipt_email")
    request = {"business_key": "order_receipt:pay_1", "channel": channel.value, "recipient": recipient,
               "template_id": template, "template_version": 1, "render_data": DATA}  # fmt: skip
    intent = build_intent(parse_request(request), AT)
    return IntentMachine(NotificationInput(intent=intent, policy=DeliveryPolicy()), TestClock(AT), "run-1")


def attempt(capabilities: Capabilities | None, provider_id: str | None = None) -> AttemptRecord:
    made = AttemptRecord(1, "att_1", AT)
    made.capabilities, made.provider_id = capabilities, provider_id
    return made


def smtp(events: bool) -> Capabilities:
    config = EmailSettings(host="relay.example.com", from_address="n@example.com", message_id_domain="example.com", delivery_events=events)
    return SmtpAdapter(config).capabilities


def test_declared_capabilities_win_and_the_channel_fills_in_when_the_submit_never_answered() -> None:
    email = reconciler(Channel.EMAIL)
    assert email.capabilities(attempt(None)) == assumed_capabilities(Channel.EMAIL)
    assert email.capabilities(attempt(TwilioAdapter.capabilities)) == TwilioAdapter.capabilities


def test_twilio_attempts_are_asked_about_by_id_and_by_reference() -> None:
    sms = reconciler(Channel.SMS)
    assert sms.can_ask(attempt(TwilioAdapter.capabilities)) and sms.can_ask(attempt(TwilioAdapter.capabilities, "SM1"))
    assert sms.can_poll(attempt(TwilioAdapter.capabilities, "SM1"))
    assert not sms.nothing_more_to_learn(attempt(TwilioAdapter.capabilities, "SM1"))


def test_smtp_attempts_are_never_asked_about_and_wait_for_events() -> None:
    email = reconciler(Channel.EMAIL)
    with_events = smtp(events=True)
    assert not email.can_ask(attempt(with_events)) and not email.can_ask(attempt(with_events, "<att_1@example.com>"))
    assert not email.can_poll(attempt(with_events, "<att_1@example.com>"))
    assert not email.nothing_more_to_learn(attempt(with_events, "<att_1@example.com>"))


def test_a_relay_without_events_has_nothing_more_to_tell_once_it_accepted() -> None:
    email = reconciler(Channel.EMAIL)
    assert email.nothing_more_to_learn(attempt(smtp(events=False), "<att_1@example.com>"))
    # Before acceptance (unknown outcome) there is still the question of whether it was taken.
    assert not email.nothing_more_to_learn(attempt(smtp(events=False)))
