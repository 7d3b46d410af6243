"""One message type from the intent to the adapter, and the submit's answers named for what happened.

``Message`` (herald/core/message.py) is declared once and carried whole: the intent holds it, the
submit input carries it, the adapter's ``OutboundMessage`` holds it opened; a lookup's input carries
the ``MessageReference`` its adapter searches by. Histories recorded before them
(tests/replay/histories) still read: a flat intent, a step that said "sent".
"""

from __future__ import annotations

import base64
import json
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload

from activities.provider import ProviderActivities
from herald.core.artifacts import ArtifactRef
from herald.core.contracts import Called, LookupInput, NotificationInput, NotSent, Refused, SubmitInput
from herald.core.intent import Intent
from herald.core.message import Channel, Message, MessageReference
from herald.core.outcomes import Accepted, ProviderStatus, Rejected, SubmitOutcome
from herald.core.send_policy import Category
from herald.providers.port import OutboundMessage
from herald.providers.twilio import TwilioAdapter
from herald.settings import TemporalSettings
from herald.temporal.client import data_converter
from tests.depth import examples

HISTORIES = Path(__file__).resolve().parents[1] / "replay" / "histories"
AT = datetime(2026, 12, 3, 2, 53, tzinfo=UTC)
REFERENCE = ArtifactRef(sha256="ab" * 32, size_bytes=10, media_type="application/pdf", filename="r.pdf")

messages = st.builds(
    Message,
    channel=st.sampled_from(Channel),
    recipient=st.text(min_size=1, max_size=40),
    body=st.text(max_size=80),
    subject=st.none() | st.text(max_size=40),
    html_body=st.none() | st.text(max_size=80),
    attachment=st.none() | st.just(REFERENCE),
    category=st.sampled_from(Category),
)


def intent_of(message: Message) -> Intent:
    return Intent(
        business_key="order_receipt:pay_1", message=message, template_id="order_receipt", template_version=1,
        render_data={"order_ref": "A-1"}, content_sha256=message.content_sha256(), intent_fingerprint="f" * 64,
        created_at=AT, expires_at=AT, time_zone="Europe/Paris", recipient_fingerprint="r" * 64,
    )  # fmt: skip


def test_a_field_of_the_message_is_declared_in_one_model() -> None:
    """No model that carries the message declares one of its fields again beside it."""
    for carrier in (Intent, SubmitInput, OutboundMessage):
        assert carrier.model_fields["message"].annotation is Message
        assert not set(Message.model_fields) & set(carrier.model_fields), carrier.__name__
    # A lookup carries the reference its adapter searches by, as the submit carries the message.
    assert LookupInput.model_fields["reference"].annotation is MessageReference
    assert not set(MessageReference.model_fields) & set(LookupInput.model_fields)


@settings(max_examples=examples(200), deadline=None)
@given(messages)
def test_an_intent_recorded_flat_reads_as_the_same_intent(message: Message) -> None:
    """An intent recorded with the message's fields at its top level (before Message) reads into
    the same intent as its new shape, and the new shape reads back unchanged."""
    intent = intent_of(message)
    new = intent.model_dump(mode="json")
    flat = {key: value for key, value in new.items() if key != "message"} | new["message"]
    assert Intent.model_validate(flat) == intent
    assert Intent.model_validate_json(intent.model_dump_json()) == intent


def _payloads(path: Path, event_type: str, key: str) -> list[dict[str, Any]]:
    found = []
    for event in json.loads(path.read_text())["events"]:
        if event["eventType"] != event_type:
            continue
        attributes = next(value for name, value in event.items() if name.endswith("Attributes"))
        found += [json.loads(base64.b64decode(p["data"])) for p in attributes.get(key, {}).get("payloads", [])]
    return found


def test_a_committed_history_starts_with_a_flat_intent_that_reads_into_its_message() -> None:
    """The committed histories' start inputs carry the old flat intent: it reads, its message whole."""
    history = HISTORIES / "email_report_with_attachment.json"
    [started] = _payloads(history, "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", "input")
    assert "message" not in started["intent"] and "recipient" in started["intent"]
    message = NotificationInput.model_validate(started).intent.message
    flat = started["intent"]
    assert message.channel is Channel.EMAIL and message.attachment is not None
    assert (message.recipient, message.body, message.subject) == (flat["recipient"], flat["body"], flat["subject"])


def _as_the_workflow_reads(step: dict[str, Any]) -> Any:
    """A submit step decoded as the workflow decodes the activity's result: Herald's converter, the
    result type Temporal takes from the activity's hints (without Annotated metadata)."""
    hint = typing.get_type_hints(ProviderActivities.submit)["return"]
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(step).encode())
    return data_converter(TemporalSettings()).payload_converter.from_payload(payload, hint)


def test_a_step_recorded_as_sent_reads_as_a_call_or_a_refusal() -> None:
    """A step recorded as "sent" reads as a call when it names its provider, and as a refusal (the
    rule its Rejected outcome named) when it names none; today's steps read as themselves."""
    [answered] = _payloads(HISTORIES / "delivered_by_report.json", "EVENT_TYPE_ACTIVITY_TASK_COMPLETED", "result")
    assert answered["kind"] == "sent"
    called = _as_the_workflow_reads(answered)
    assert isinstance(called, Called) and called.provider == "twilio"
    assert isinstance(called.outcome.result, Accepted)
    refusal = {"kind": "sent", "outcome": {"result": {"kind": "rejected", "reason": "recipient erased"}},
               "provider": None, "capabilities": None, "give_up_after_seconds": None}  # fmt: skip
    assert _as_the_workflow_reads(refusal) == Refused(reason="recipient erased")
    today = [
        Called(outcome=SubmitOutcome(result=Accepted(provider_id="SM1", status=ProviderStatus.QUEUED)),
               provider="twilio", capabilities=TwilioAdapter.capabilities),
        Called(outcome=SubmitOutcome(result=Rejected(reason="Twilio 21211")), provider="twilio",
               capabilities=TwilioAdapter.capabilities),
        Refused(reason="channel email: no provider is configured on this worker"),
        Refused(reason="attachment: not as stored", provider="smtp"),
        NotSent(reason="ledger unavailable"),
    ]  # fmt: skip
    for step in today:
        assert _as_the_workflow_reads(step.model_dump(mode="json")) == step
