"""SendGrid's event vocabulary: which posted events are Herald's, what each means, and the registry that picks a vocabulary per provider."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from herald.core.outcomes import ProviderStatus
from herald.providers import twilio_codes
from herald.providers.report_vocabularies import (
    REPORT_VOCABULARIES,
    SendGridVocabulary,
    TwilioVocabulary,
    vocabulary_for,
)
from herald.providers.sendgrid_events import (
    EVENT_STATUSES,
    MAX_EVENTS,
    MAX_STORED_DEPTH,
    STORED_FIELDS,
    TOO_DEEP,
    BodyRule,
    EventBodyError,
    error_code_of,
    is_retryable,
    map_status,
    parse_events,
)

REF = "att_0123456789abcdef01234567_1"
MESSAGE_ID = f"<{REF}@herald.test>"
ADDRESS = "member.4f2a@example.com"


def event(name: str = "delivered", **fields: Any) -> dict[str, Any]:
    """One event as SendGrid posts it for a message the SMTP adapter sent."""
    body: dict[str, Any] = {
        "email": ADDRESS, "timestamp": 1_767_225_600, "event": name, "sg_event_id": "ZGVsaXZlcmVkLTAtMQ",
        "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0", "smtp-id": MESSAGE_ID,
        "herald_attempt": REF,
    }  # fmt: skip
    body.update(fields)
    return {key: value for key, value in body.items() if value is not None}


def body(*events: dict[str, Any]) -> bytes:
    """The bytes of one POST: a JSON array, compact, then CRLF (as SendGrid and the emulator send it)."""
    return json.dumps(list(events), separators=(",", ":")).encode() + b"\r\n"


# ---- event names ------------------------------------------------------------------------------

EXPECTED_STATUSES = {
    "processed": ProviderStatus.QUEUED,
    "deferred": ProviderStatus.QUEUED,
    "delivered": ProviderStatus.DELIVERED,
    "open": ProviderStatus.DELIVERED,
    "click": ProviderStatus.DELIVERED,
    "spamreport": ProviderStatus.DELIVERED,
    "unsubscribe": ProviderStatus.DELIVERED,
    "group_unsubscribe": ProviderStatus.DELIVERED,
    "group_resubscribe": ProviderStatus.DELIVERED,
    "bounce": ProviderStatus.UNDELIVERED,
    "dropped": ProviderStatus.FAILED,
}


@pytest.mark.parametrize(("name", "status"), EXPECTED_STATUSES.items())
def test_every_sendgrid_event_maps_to_its_status_and_is_kept(name: str, status: ProviderStatus) -> None:
    """Each of SendGrid's eleven delivery and engagement events is ours to store, with the status of the table."""
    batch = parse_events(body(event(name)))
    (parsed,) = batch.events
    assert (parsed.event, map_status(name), batch.not_ours, batch.not_applicable) == (name, status, 0, 0)


def test_the_table_is_exactly_sendgrids_eleven_events() -> None:
    """No event name is mapped that the table in the docstring does not list."""
    assert dict(EVENT_STATUSES) == EXPECTED_STATUSES


@pytest.mark.parametrize("name", ["group_resubscribed", "machine_open", "account_status_change", "Delivered", 7, None])
def test_an_event_name_outside_the_table_is_skipped_as_not_applicable(name: Any) -> None:
    """An unknown or malformed event name is counted and skipped, never an error and never stored."""
    batch = parse_events(body(event("processed"), {**event(), "event": name}))
    assert [e.event for e in batch.events] == ["processed"]
    assert (batch.not_applicable, batch.not_ours) == (1, 0)


def test_an_unknown_label_in_the_inbox_reads_as_the_non_final_floor() -> None:
    """A stored label outside the table can neither end an attempt nor move a status back."""
    assert map_status("machine_open") is ProviderStatus.QUEUED and map_status(None) is ProviderStatus.QUEUED


# ---- what Herald keeps of an event ------------------------------------------------------------


def test_an_event_keeps_our_message_id_with_its_brackets_our_reference_and_an_aware_time() -> None:
    """smtp-id is kept exactly as the adapter's message_id() wrote it; the timestamp becomes UTC."""
    (parsed,) = parse_events(body(event("delivered", response="250 OK"))).events
    assert parsed.message_id == MESSAGE_ID and parsed.attempt_ref == REF
    assert parsed.occurred_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert parsed.sg_event_id == "ZGVsaXZlcmVkLTAtMQ"
    assert (parsed.error_code, parsed.enhanced_status, parsed.bounce_type) == (None, None, None)


def test_the_stored_payload_keeps_only_the_named_fields() -> None:
    """Of an event carrying every field SendGrid might add, the inbox keeps STORED_FIELDS and nothing
    else: no address, phone, name, IP, user agent, URL, category or custom arg of anyone's."""
    kept = {
        "timestamp": 1_767_225_600, "event": "bounce", "sg_event_id": "ZGVsaXZlcmVkLTAtMQ",
        "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0", "herald_attempt": REF,
        "status": "5.7.1", "type": "blocked", "bounce_classification": "Reputation",
        "reason": "554 5.7.1 Service unavailable; client host [198.51.100.4] blocked", "response": "554 blocked",
        "attempt": "1", "tls": 1, "pool": {"name": "transactional", "id": 210},
    }  # fmt: skip
    posted = {
        **event("bounce"), **kept,
        "phone": "+15551234567", "name": "Member Four", "ip": "203.0.113.7", "useragent": "Mozilla/5.0",
        "url": "https://example.com/r/abc", "url_offset": {"index": 0}, "category": ["receipts"],
        "asm_group_id": 12, "marketing_campaign_id": 7, "sg_machine_open": False, "order_id": "o-1",
        "unique_args": {"customer": "member.4f2a"}, "custom_args": {"loyalty_tier": "gold"},
    }  # fmt: skip
    (parsed,) = parse_events(body(posted)).events
    assert parsed.payload == kept
    assert set(parsed.payload) <= STORED_FIELDS


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("550 5.1.1 <member.4f2a@example.com>: Recipient address rejected: User unknown",
         "550 5.1.1 [address] Recipient address rejected: User unknown"),
        ("452 4.2.2 mailbox of member.4f2a@example.com full", "452 4.2.2 mailbox of [address] full"),
        ('550 5.1.1 "member four"@example.com unknown', "550 5.1.1 [address] unknown"),
        ("550 <a@b.example> and\t<c@d.example>", "550 [address] and\t[address]"),
        ("550 user@", "550 [address]"),
        ("250 2.0.0 OK 1767225600 qu12si", "250 2.0.0 OK 1767225600 qu12si"),
    ],
)  # fmt: skip
def test_an_address_quoted_in_a_reply_is_masked_and_the_reply_kept(text: str, stored: str) -> None:
    """reason and response stay (they explain the verdict); every word holding an '@' becomes the marker."""
    (parsed,) = parse_events(body(event("bounce", status="5.1.1", reason=text, response=text))).events
    assert (parsed.payload["reason"], parsed.payload["response"]) == (stored, stored)
    assert "@" not in json.dumps(parsed.payload)


def test_an_address_nested_in_a_kept_field_is_masked_too() -> None:
    """A kept field holding an object is masked in its keys and values alike."""
    (parsed,) = parse_events(body(event(pool={"name": f"pool of {ADDRESS}", ADDRESS: [ADDRESS, 1]}))).events
    assert parsed.payload["pool"] == {"name": "pool of [address]", "[address]": ["[address]", 1]}


@pytest.mark.parametrize("depth", [9, 900, 5_000])
def test_a_kept_field_nested_past_the_bound_is_stored_cut_and_parsing_never_exhausts_the_stack(depth: int) -> None:
    """A signed post with a kept field nested 500 levels deep raised RecursionError while masking it
    (answered 500, and SendGrid retries a post for 24 hours). Now the value is cut at 8 levels, or a
    body too deep for JSON parsing itself is refused naming the rule; never an exception."""
    raw = b'{"pool": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    item = json.loads(body(event()))[0]
    document = b"[" + json.dumps(item)[:-1].encode() + b", " + raw[1:] + b"]"
    try:
        batch = parse_events(document)
    except EventBodyError as refused:
        assert refused.rule is BodyRule.NOT_JSON and depth > 900
        return
    (parsed,) = batch.events
    level, found = 0, parsed.payload["pool"]
    while isinstance(found, dict):
        found, level = found["a"], level + 1
    assert (level, found) == (MAX_STORED_DEPTH, TOO_DEEP)  # 8 levels kept, the 9th replaced


@pytest.mark.parametrize("value", [True, 1.5, "1767225600", 10**20, -(10**20)])
def test_a_timestamp_that_is_not_whole_seconds_in_range_is_left_out(value: Any) -> None:
    """The event is still stored; only a time nobody could order by is dropped."""
    (parsed,) = parse_events(body(event(timestamp=value))).events
    assert parsed.occurred_at is None


# ---- not ours -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"herald_attempt": None}, id="no-reference"),
        pytest.param({"smtp-id": None}, id="no-smtp-id"),
        pytest.param({"smtp-id": ""}, id="empty-smtp-id"),
        pytest.param({"smtp-id": 42}, id="smtp-id-not-a-string"),
        pytest.param({"herald_attempt": "a" * 65}, id="reference-too-long"),
        pytest.param({"herald_attempt": "att 1"}, id="reference-with-a-space"),
        pytest.param({"herald_attempt": "att_1\n"}, id="reference-with-a-newline"),
        pytest.param({"herald_attempt": ["att_1"]}, id="reference-not-a-string"),
    ],
)
def test_an_event_without_a_usable_reference_or_message_id_is_not_ours(change: dict[str, Any]) -> None:
    """SendGrid posts every event of the account: one Herald cannot attribute is counted and skipped, never an error."""
    batch = parse_events(body(event("processed"), event("delivered", **change)))
    assert [e.event for e in batch.events] == ["processed"]
    assert (batch.not_ours, batch.not_applicable, batch.unstorable_event_ids) == (1, 0, ())


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"smtp-id": "<" + "a" * 997 + ">"}, id="smtp-id-longer-than-a-header-line"),
        pytest.param({"smtp-id": "<att_1\x00@herald.test>"}, id="nul-in-smtp-id"),
        pytest.param({"response": "250 OK\x00"}, id="nul-in-a-stored-field"),
        pytest.param({"pool": {"a\x00": "b"}}, id="nul-in-a-nested-key"),
    ],
)
def test_an_event_the_ledger_cannot_hold_is_skipped_as_not_ours_and_named_by_its_event_id(
    change: dict[str, Any],
) -> None:
    """A value PostgreSQL cannot store (NUL) or a Message-ID longer than 998 characters skips that event only."""
    batch = parse_events(body(event("processed"), event("delivered", sg_event_id="dW5zdG9yYWJsZQ", **change)))
    assert [e.event for e in batch.events] == ["processed"]
    assert (batch.not_ours, batch.unstorable_event_ids) == (1, ("dW5zdG9yYWJsZQ",))


def test_a_nul_in_a_field_that_is_never_stored_does_not_skip_the_event() -> None:
    """The address and custom args are dropped before storing, so what they hold cannot make the event unstorable."""
    (parsed,) = parse_events(body(event("delivered", email="a\x00@example.com", categories={"a\x00": "b"}))).events
    assert "email" not in parsed.payload and "categories" not in parsed.payload


def test_a_message_id_of_exactly_998_characters_is_kept() -> None:
    """The bound is RFC 5322's line length, inclusive."""
    message_id = "<" + "a" * 996 + ">"
    (parsed,) = parse_events(body(event(**{"smtp-id": message_id}))).events
    assert parsed.message_id == message_id


# ---- malformed bodies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        pytest.param(b"", BodyRule.NOT_JSON, id="empty"),
        pytest.param(b"email=a@example.com&event=delivered", BodyRule.NOT_JSON, id="form-encoded"),
        pytest.param(b'[{"event": "delivered"}', BodyRule.NOT_JSON, id="truncated"),
        pytest.param(b'[{"event": "\xff"}]', BodyRule.NOT_JSON, id="not-utf8"),
        pytest.param(b'[{"timestamp": NaN}]', BodyRule.NOT_JSON, id="nan"),
        pytest.param(b'[{"timestamp": 1e400}]', BodyRule.NOT_JSON, id="overflowing-float"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, BodyRule.NOT_JSON, id="nested-too-deep"),
        pytest.param(b'{"event": "delivered"}', BodyRule.NOT_AN_ARRAY, id="object"),
        pytest.param(b'"delivered"', BodyRule.NOT_AN_ARRAY, id="string"),
        pytest.param(b"null", BodyRule.NOT_AN_ARRAY, id="null"),
        pytest.param(b'[{"event": "delivered"}, "delivered"]', BodyRule.EVENT_NOT_AN_OBJECT, id="string-element"),
        pytest.param(b"[[]]", BodyRule.EVENT_NOT_AN_OBJECT, id="array-element"),
        pytest.param(b"[null]", BodyRule.EVENT_NOT_AN_OBJECT, id="null-element"),
    ],
)
def test_a_malformed_body_is_refused_naming_the_rule(raw: bytes, rule: BodyRule) -> None:
    """Each broken rule raises one typed error whose message names the rule and quotes nothing of the body."""
    with pytest.raises(EventBodyError) as caught:
        parse_events(raw)
    assert caught.value.rule is rule
    assert rule.value in str(caught.value)
    assert "@" not in str(caught.value) and "delivered" not in str(caught.value)


def test_more_than_max_events_is_refused_and_max_events_is_read() -> None:
    """The count bound refuses MAX_EVENTS + 1 events and reads a batch of exactly MAX_EVENTS."""
    with pytest.raises(EventBodyError) as caught:
        parse_events(body(*[{}] * (MAX_EVENTS + 1)))
    assert caught.value.rule is BodyRule.TOO_MANY_EVENTS
    batch = parse_events(body(*[event("processed")] * MAX_EVENTS))
    assert len(batch.events) == MAX_EVENTS


def test_an_empty_array_is_a_valid_post_with_nothing_in_it() -> None:
    """SendGrid's test button can post an empty batch: nothing to store, nothing refused."""
    assert parse_events(b"[]").events == []


# ---- error codes and retryability -----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ("5.1.1", 511), ("4.2.2", 422), ("5.0.0", 500), ("2.0.0", 200), ("4.7.0", 470),
        ("5.7.26", None), ("5.1", None), ("5.1.1.1", None), ("3.1.1", None), ("511", None),
        (" 5.1.1", None), ("5.1.1\n", None), ("5.1.1 ", None), ("", None), (None, None), ("٥.1.1", None),
    ],
)  # fmt: skip
def test_an_enhanced_status_is_encoded_only_when_each_part_is_one_digit(status: str | None, code: int | None) -> None:
    """C.S.D becomes C*100 + S*10 + D for RFC 3463 classes with one-digit parts; anything else is None."""
    assert error_code_of(status) == code


def test_a_bounce_carries_its_status_type_and_encoded_code() -> None:
    """bounce's status and type are read; the code is the encoding of the status."""
    (parsed,) = parse_events(body(event("bounce", status="5.1.1", type="bounce", reason="550 unknown user"))).events
    assert (parsed.enhanced_status, parsed.error_code, parsed.bounce_type) == ("5.1.1", 511, "bounce")


@pytest.mark.parametrize(
    ("name", "status", "bounce_type", "retryable"),
    [
        ("bounce", "4.2.2", "bounce", True),  # mailbox full: transient in the server's own words
        ("bounce", "5.1.1", "bounce", False),  # no such user
        ("bounce", "4.7.0", "blocked", True),  # a temporary block (rate, reputation): the class decides
        ("bounce", "5.7.1", "blocked", False),  # refused by policy: the same copy would be refused again
        ("bounce", None, "blocked", False),  # no status: nothing says it is transient
        ("bounce", "4.7.26", "blocked", False),  # a status we cannot encode loses its class
        ("dropped", "4.0.0", None, True),
        ("dropped", "5.0.0", None, False),
        ("deferred", "4.2.2", None, False),  # not a failure: SendGrid is still trying
        ("delivered", None, None, False),
    ],
)
def test_only_a_bounce_or_drop_with_a_transient_status_is_retryable(
    name: str, status: str | None, bounce_type: str | None, retryable: bool
) -> None:
    """The receipt edge classifies: class 4 on a bounce or drop may be retried, blocked or not; nothing else may."""
    (parsed,) = parse_events(body(event(name, status=status, type=bounce_type))).events
    assert is_retryable(parsed.event, parsed.error_code) is retryable
    assert REPORT_VOCABULARIES["sendgrid"].is_retryable(parsed.event, parsed.error_code) is retryable


# ---- the registry -----------------------------------------------------------------------------


def test_the_registry_holds_twilio_infobip_and_sendgrid_and_nothing_else() -> None:
    """Each provider the receipt routes write to the inbox has a vocabulary; an unknown or missing one has none."""
    assert isinstance(REPORT_VOCABULARIES["twilio"], TwilioVocabulary)
    assert isinstance(REPORT_VOCABULARIES["sendgrid"], SendGridVocabulary)
    assert set(REPORT_VOCABULARIES) == {"twilio", "infobip", "sendgrid"}
    assert vocabulary_for("mailgun") is None and vocabulary_for(None) is None and vocabulary_for("Twilio") is None


@pytest.mark.parametrize("label", [*twilio_codes.STATUS_LABELS, "a_label_twilio_adds_later"])
def test_the_twilio_entry_maps_every_label_as_twilio_codes_does(label: str) -> None:
    """Wrapping Twilio's table changes no status Herald derives from a Twilio report."""
    assert vocabulary_for("twilio").map_status(label) is twilio_codes.map_status(label)


@pytest.mark.parametrize("code", [*twilio_codes.ERROR_CODES, None, 99999])
@pytest.mark.parametrize("label", ["undelivered", "failed", "delivered"])
def test_the_twilio_entry_classifies_every_code_as_twilio_codes_does(label: str, code: int | None) -> None:
    """For Twilio the error code alone decides, whatever the label: the old answer, unchanged."""
    assert vocabulary_for("twilio").is_retryable(label, code) is twilio_codes.is_retryable(code)


@pytest.mark.parametrize(("name", "status"), EXPECTED_STATUSES.items())
def test_the_sendgrid_entry_maps_with_the_sendgrid_table(name: str, status: ProviderStatus) -> None:
    """The registry's SendGrid entry is the table above."""
    assert vocabulary_for("sendgrid").map_status(name) is status
