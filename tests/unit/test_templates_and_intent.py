"""Tests of template rendering, request validation, intent building and attempt references."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.artifacts import ArtifactRef
from herald.core.contracts import attempt_number_of, attempt_ref
from herald.core.intent import workflow_id_for
from herald.core.recipients import NUMBER_RULE
from herald.intake.errors import InvalidIntent
from herald.intake.requests import (
    DEFAULT_LIFETIME,
    UNSENDABLE_RULE,
    IntentRequest,
    build_intent,
    intent_fingerprint,
    parse_request,
)
from herald.intake.template_registry import (
    MAX_BODY_CHARS,
    MAX_EMAIL_BODY_CHARS,
    TemplateError,
    available_templates,
    load_template,
    render,
    render_message,
)
from tests.depth import examples
from tests.keys import SESSION_KEYRING as KEYRING

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
RECIPIENT = "+15551234567"
PROPERTY = settings(derandomize=True, database=None, max_examples=examples(200), deadline=None)

SHIPPED = [(template_id, version) for template_id, versions in available_templates().items() for version in versions]

RECEIPT_DATA: dict[str, str | int] = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}


def raw_request(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "business_key": "order_receipt:pay_157",
        "recipient": RECIPIENT,
        "template_id": "order_receipt",
        "template_version": 1,
        "render_data": dict(RECEIPT_DATA),
    }
    raw.update(overrides)
    return raw


def fields_of(error: InvalidIntent) -> list[str]:
    return [field for field, _ in error.problems]


# ---- templates -----------------------------------------------------------------------------------


def test_shipped_templates_are_discovered() -> None:
    """The template catalogue lists every shipped template and version (so the per-version tests are not vacuous)."""
    assert available_templates() == {
        "class_cancelled": [1],
        "class_opening": [1],
        "class_promotion": [1],
        "class_promo_email": [1],
        "class_reminder": [1],
        "monthly_report": [1],
        "order_receipt": [1],
        "order_receipt_email": [1, 2],
        "seller_new_order": [1, 2],
        "seller_order_cancelled": [1],
    }


def sample_data(template_id: str, version: int) -> dict[str, str | int]:
    """Valid render data for a template version, one value per declared field, from its contract."""
    data: dict[str, str | int] = {}
    for spec in load_template(template_id, version).field_specs:
        if spec.kind == "int":
            data[spec.name] = int(spec.option("min") or 1) + 1
        elif spec.kind == "decimal":
            data[spec.name] = "12.50"
        elif spec.kind == "code":
            pattern = re.compile(spec.option("pattern") or "")
            data[spec.name] = next(c for c in ("A-1", "EUR", "2026-11", "ord_1") if pattern.fullmatch(c))
        else:
            data[spec.name] = f"<{spec.name}>"
    return data


@pytest.mark.parametrize("template_id,version", SHIPPED)
def test_every_shipped_template_renders_with_its_declared_fields(template_id: str, version: int) -> None:
    """Each shipped version renders with exactly its declared fields, every value appears, and no placeholder is left."""
    template = load_template(template_id, version)
    assert template.fields, "a template must declare at least one field"
    data = sample_data(template_id, version)
    rendered = render_message(template_id, version, data, channel=template.channel)
    text = rendered.body + (rendered.subject or "")
    for value in data.values():
        assert str(value) in text
    assert "$" not in text
    assert "#" not in rendered.body, "comment lines must not leak into the body"
    assert 0 < len(rendered.body) <= (MAX_BODY_CHARS if template.channel == "sms" else MAX_EMAIL_BODY_CHARS)
    assert (rendered.subject is not None) is (template.channel == "email")


@pytest.mark.parametrize("template_id,version", SHIPPED)
def test_render_is_deterministic(template_id: str, version: int) -> None:
    """Rendering the same version with the same data gives the same bytes, also after re-reading the file."""
    template = load_template(template_id, version)
    data = sample_data(template_id, version)
    first = render_message(template_id, version, data, channel=template.channel)
    load_template.cache_clear()
    assert render_message(template_id, version, dict(reversed(list(data.items()))), channel=template.channel) == first


def test_int_and_str_values_render_identically() -> None:
    """An int datum renders as its decimal text, the same bytes as the equivalent string."""
    as_int = render("class_opening", 1, {"class_name": "Yoga", "starts_at": "18:00", "hold_minutes": 15})
    as_str = render("class_opening", 1, {"class_name": "Yoga", "starts_at": "18:00", "hold_minutes": "15"})
    assert as_int == as_str
    assert "15 minutes" in as_int


def test_a_new_version_renders_different_bytes() -> None:
    """seller_new_order v2 words the message differently from v1, so the same order gives different bytes."""
    v1 = render("seller_new_order", 1, {"order_ref": "O-9", "order_total": "$20"})
    v2 = render("seller_new_order", 2, {"order_ref": "O-9", "order_total": "$20", "item_count": 3})
    assert v1 != v2
    assert v1 == "New order O-9 for $20. Open your seller dashboard to accept it."
    assert "3 item(s)" in v2


def test_dollar_signs_in_data_are_not_interpreted() -> None:
    """A value containing template syntax is inserted literally, not expanded."""
    body = render("seller_new_order", 1, {"order_ref": "A-1", "order_total": "${order_ref} $$5"})
    assert body.startswith("New order A-1 for ${order_ref} $$5.")


@pytest.mark.parametrize("missing", sorted(RECEIPT_DATA))
def test_missing_field_names_render_data_field(missing: str) -> None:
    """A missing render datum is refused with an error naming render_data.<field>."""
    data = {key: value for key, value in RECEIPT_DATA.items() if key != missing}
    with pytest.raises(TemplateError) as caught:
        render("order_receipt", 1, data)
    assert caught.value.field == f"render_data.{missing}"
    assert str(caught.value).startswith(f"render_data.{missing}: ")


def test_extra_field_is_refused() -> None:
    """A datum the template does not declare is refused, naming render_data.<field>, so typos never go unnoticed."""
    with pytest.raises(TemplateError) as caught:
        render("order_receipt", 1, {**RECEIPT_DATA, "coupon": "X"})
    assert caught.value.field == "render_data.coupon"


def test_field_of_a_newer_version_is_refused_by_the_older() -> None:
    """v2's item_count is not a field of v1: data must match the version it names."""
    with pytest.raises(TemplateError) as caught:
        render("seller_new_order", 1, {"order_ref": "O", "order_total": "1", "item_count": 2})
    assert caught.value.field == "render_data.item_count"


@pytest.mark.parametrize("template_id", ["no_such_template", "../order_receipt", "Order_Receipt", "", "1abc"])
def test_unknown_or_malformed_template_id_names_template_id(template_id: str) -> None:
    """An unknown or malformed template id is refused with an error naming template_id."""
    with pytest.raises(TemplateError) as caught:
        render(template_id, 1, {})
    assert caught.value.field == "template_id"


@pytest.mark.parametrize("version", [0, -1, 2, 99])
def test_unknown_version_names_template_version(version: int) -> None:
    """A version the template does not have is refused with an error naming template_version."""
    with pytest.raises(TemplateError) as caught:
        render("order_receipt", version, dict(RECEIPT_DATA))
    assert caught.value.field == "template_version"


def test_a_body_over_its_segment_limit_is_refused_with_the_count() -> None:
    """Emoji force UCS-2: 30 of them and a 40-character order ref push seller_new_order v2 to 3
    segments, over its limit of 2."""
    data = {"order_ref": "A" * 40, "order_total": "😀" * 30, "item_count": 2}
    with pytest.raises(TemplateError) as caught:
        render("seller_new_order", 2, data)
    assert caught.value.field == "render_data"
    assert caught.value.rule.startswith("renders to 3 segments (UCS-2, ")
    assert caught.value.rule.endswith("seller_new_order v2 allows at most 2")


def test_a_value_longer_than_its_field_allows_is_refused() -> None:
    with pytest.raises(TemplateError) as caught:
        render("order_receipt", 1, {**RECEIPT_DATA, "merchant": "x" * 61})
    assert caught.value.problems == [("render_data.merchant", "String should have at most 60 characters")]


# ---- parse_request -------------------------------------------------------------------------------


def test_valid_request_parses_with_sms_default() -> None:
    """A well-formed request parses, defaults to the SMS channel and keeps its data."""
    request = parse_request(raw_request())
    assert request.channel.value == "sms"
    assert request.render_data == RECEIPT_DATA


@pytest.mark.parametrize(
    "bad",
    ["15551234567", "+05551234567", "+1555123", "+1234567890123456", "+1555abc4567", "", "+15551234567\n",
     " +15551234567", "0015551234567", "+15551234567 x12", "+1 555 123 4567 "],
)
def test_bad_e164_names_recipient_and_rule_without_the_value(bad: str) -> None:
    """A recipient that is not E.164 is refused naming recipient and the rule, and the message never echoes the number."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(recipient=bad))
    message = str(caught.value)
    assert fields_of(caught.value) == ["recipient"]
    assert "E.164" in message
    if bad:
        assert bad not in message
        assert bad.lstrip("+").replace(" ", "").replace("-", "") not in message


@pytest.mark.parametrize(
    "bad",
    [
        "order_receipt:+15551234567",
        "order_receipt:jane@example.com",
        "jane@example.com",
        "Order_receipt:pay_1",
        "order_receipt",
        "order_receipt:",
        "order receipt:pay_1",
        "order_receipt:pay 1",
        "",
    ],
)
def test_bad_business_key_names_business_key_without_the_value(bad: str) -> None:
    """A business key outside the `event_type:business_id` alphabet is refused naming business_key, never echoing it."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(business_key=bad))
    message = str(caught.value)
    assert fields_of(caught.value) == ["business_key"]
    assert "event_type:business_id" in message
    if bad:
        assert bad not in message


def test_several_problems_are_reported_together() -> None:
    """Every broken field is named in one error, so a caller fixes them in one round trip."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(recipient="555", business_key="x@y", template_version=0))
    assert set(fields_of(caught.value)) == {"recipient", "business_key", "template_version"}


def test_render_data_keys_must_be_identifiers() -> None:
    """A non-identifier key is refused naming render_data (the key itself is not echoed)."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(render_data={"Bad-Key": "x"}))
    assert fields_of(caught.value) == ["render_data"]


def test_an_overlong_value_is_refused_naming_its_field() -> None:
    """A value over 500 characters is refused before any template sees it, naming render_data.<field>."""
    with pytest.raises(InvalidIntent) as caught:
        build_intent(parse_request(raw_request(render_data={**RECEIPT_DATA, "merchant": "x" * 501})), NOW, KEYRING)
    assert caught.value.problems == [("render_data.merchant", "must be at most 500 characters")]
    assert "x" * 501 not in str(caught.value)


@pytest.mark.parametrize("expires_at", [datetime(2030, 1, 1, 12, 0), "2030-01-01T12:00:00"])
def test_naive_expires_at_is_refused(expires_at: Any) -> None:
    """An expiry without a time zone is refused naming expires_at, since its instant is ambiguous."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(expires_at=expires_at))
    assert fields_of(caught.value) == ["expires_at"]
    assert "time zone" in str(caught.value)


def test_unknown_request_field_is_refused() -> None:
    """A field the request model does not know is refused instead of silently dropped."""
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw_request(priority="high"))
    assert fields_of(caught.value) == ["priority"]


# ---- build_intent --------------------------------------------------------------------------------


def test_build_intent_freezes_body_and_its_sha256() -> None:
    """The intent carries the body rendered once and content_sha256 == sha256(body)."""
    request = parse_request(raw_request())
    intent = build_intent(request, NOW, KEYRING)
    assert intent.message.body == render("order_receipt", 1, RECEIPT_DATA)
    assert intent.message.body == "Acme: payment of 12.50 EUR for order A-1 received. Thank you."
    assert intent.content_sha256 == hashlib.sha256(intent.message.body.encode("utf-8")).hexdigest()
    assert intent.created_at == NOW
    assert intent.message.recipient == RECIPIENT


def test_default_expiry_is_the_default_lifetime() -> None:
    """Without an expiry the intent lives for DEFAULT_LIFETIME (24 h) from its creation."""
    intent = build_intent(parse_request(raw_request()), NOW, KEYRING)
    assert intent.expires_at == NOW + DEFAULT_LIFETIME == NOW + timedelta(hours=24)


@pytest.mark.parametrize("expires_at", [NOW - timedelta(seconds=1), NOW, NOW - timedelta(days=400)])
def test_expiry_not_in_the_future_is_refused(expires_at: datetime) -> None:
    """An expiry at or before now is refused naming expires_at: the message would never be worth sending."""
    with pytest.raises(InvalidIntent) as caught:
        build_intent(parse_request(raw_request(expires_at=expires_at)), NOW, KEYRING)
    assert fields_of(caught.value) == ["expires_at"]
    assert "future" in str(caught.value)


def test_expiry_in_another_zone_is_compared_as_an_instant() -> None:
    """An expiry written in another time zone is accepted when its instant is in the future."""
    plus_two = timezone(timedelta(hours=2))
    expires_at = datetime(2025, 3, 1, 14, 30, tzinfo=plus_two)  # 12:30 UTC, half an hour after NOW
    assert build_intent(parse_request(raw_request(expires_at=expires_at)), NOW, KEYRING).expires_at == expires_at


@pytest.mark.parametrize(
    "business_key",
    [
        "order_receipt:15551234567",
        "order_receipt:pay_15551234567",
        "order_receipt:1_555_123_4567",
        "order_receipt:1-555-123-4567",
        "order_receipt:1.555.123.4567",
        "order_receipt:1:555:123:4567",
    ],
)
def test_business_key_containing_the_recipient_number_is_refused(business_key: str) -> None:
    """A key that embeds the recipient's digits, with or without the separators the key alphabet allows, is refused naming business_key, never echoing it."""
    request = parse_request(raw_request(business_key=business_key))
    with pytest.raises(InvalidIntent) as caught:
        build_intent(request, NOW, KEYRING)
    assert fields_of(caught.value) == ["business_key"]
    assert "15551234567" not in str(caught.value)
    assert business_key not in str(caught.value)


def test_template_errors_surface_as_invalid_intent_with_other_problems() -> None:
    """build_intent reports a template problem and an expiry problem together, each by its field."""
    request = parse_request(raw_request(template_version=7, expires_at=NOW - timedelta(hours=1)))
    with pytest.raises(InvalidIntent) as caught:
        build_intent(request, NOW, KEYRING)
    assert fields_of(caught.value) == ["expires_at", "template_version"]


def test_missing_render_datum_surfaces_through_build_intent() -> None:
    """A missing datum reaches the caller as InvalidIntent naming render_data.<field>."""
    data = {key: value for key, value in RECEIPT_DATA.items() if key != "merchant"}
    with pytest.raises(InvalidIntent) as caught:
        build_intent(parse_request(raw_request(render_data=data)), NOW, KEYRING)
    assert fields_of(caught.value) == ["render_data.merchant"]


def _fingerprint(**overrides: Any) -> str:
    return build_intent(parse_request(raw_request(**overrides)), NOW, KEYRING).intent_fingerprint


@pytest.mark.parametrize(
    "overrides",
    [
        {"recipient": "+15557654321"},
        {"render_data": {**RECEIPT_DATA, "amount": "12.51"}},
        {"render_data": {**RECEIPT_DATA, "merchant": "Acme Ltd"}},
    ],
    ids=["recipient", "render_data.amount", "render_data.merchant"],
)
def test_fingerprint_changes_with_the_payload(overrides: dict[str, Any]) -> None:
    """Changing the recipient or any render datum changes the intent fingerprint."""
    assert _fingerprint(**overrides) != _fingerprint()


def test_fingerprint_changes_with_template_version_and_id() -> None:
    """The same data under another template version or id gives another fingerprint."""
    request = IntentRequest.model_validate(
        raw_request(template_id="seller_new_order", render_data={"order_ref": "O", "order_total": "1"})
    )
    assert intent_fingerprint(request, KEYRING) != intent_fingerprint(request.model_copy(update={"template_version": 2}), KEYRING)
    assert intent_fingerprint(request, KEYRING) != intent_fingerprint(request.model_copy(update={"template_id": "order_receipt"}), KEYRING)


def test_fingerprint_ignores_expiry_and_data_order() -> None:
    """The fingerprint is the same whatever the expiry and whatever the order of the render data keys."""
    base = _fingerprint()
    assert _fingerprint(expires_at=NOW + timedelta(hours=1)) == base
    assert _fingerprint(expires_at=NOW + timedelta(days=2)) == base
    assert _fingerprint(render_data=dict(reversed(list(RECEIPT_DATA.items())))) == base


def test_fingerprint_is_keyed_and_carries_no_recipient() -> None:
    """The fingerprint is `<key id>:<64 hex>` under the installed key: no recipient text, and not the
    plain SHA-256 that anyone could recompute from a guessed number."""
    fingerprint = _fingerprint()
    key_id, _, digest = fingerprint.partition(":")
    assert key_id == KEYRING.active_key_id
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert RECIPIENT.lstrip("+") not in fingerprint


def test_workflow_id_is_key_slash_channel() -> None:
    """Request, intent and helper agree on the workflow id `<business key>/sms`."""
    request = parse_request(raw_request())
    intent = build_intent(request, NOW, KEYRING)
    assert request.workflow_id == intent.workflow_id == workflow_id_for("order_receipt:pay_157", "sms")
    assert intent.workflow_id == "order_receipt:pay_157/sms"
    assert RECIPIENT not in intent.workflow_id


# ---- attempt references --------------------------------------------------------------------------

WORKFLOW_ID = "order_receipt:pay_157/sms"


def test_attempt_ref_is_deterministic_and_distinct() -> None:
    """The same workflow id and number always give the same ref; another number or workflow gives another."""
    assert attempt_ref(WORKFLOW_ID, 1) == attempt_ref(WORKFLOW_ID, 1)
    assert attempt_ref(WORKFLOW_ID, 1) != attempt_ref(WORKFLOW_ID, 2)
    assert attempt_ref(WORKFLOW_ID, 1) != attempt_ref("order_receipt:pay_158/sms", 1)


def test_attempt_ref_carries_no_part_of_the_business_key() -> None:
    """The ref is `att_` + 24 hex digits + `_<n>`: no event type, business id, separator or channel of the key."""
    ref = attempt_ref(WORKFLOW_ID, 3)
    assert re.fullmatch(r"att_[0-9a-f]{24}_3", ref)
    for part in ("order_receipt", "order", "receipt", "pay_157", "pay", "sms", ":", "/"):
        assert part not in ref


@PROPERTY
@given(
    workflow_id=st.from_regex(r"[a-z][a-z0-9_]{0,20}:[A-Za-z0-9][A-Za-z0-9_.:-]{0,40}/sms", fullmatch=True),
    number=st.integers(min_value=1, max_value=10_000),
)
def test_attempt_number_of_inverts_attempt_ref(workflow_id: str, number: int) -> None:
    """For any workflow id and attempt number, attempt_number_of(attempt_ref(id, n)) == n and the ref has the opaque form."""
    ref = attempt_ref(workflow_id, number)
    assert attempt_number_of(ref) == number
    assert re.fullmatch(r"att_[0-9a-f]{24}_[0-9]+", ref)


@pytest.mark.parametrize(
    "ref", ["", "att_", "att_abc_", "att_abc_x", "att_abc_-1", "att_abc_1.5", "foo_abc_1", "1", "att_abc_²"]
)
def test_attempt_number_of_returns_none_for_non_refs(ref: str) -> None:
    """Anything that is not one of our refs yields None rather than a number or an exception."""
    assert attempt_number_of(ref) is None


# ---- the e-mail channel --------------------------------------------------------------------------

REPORT = {"seller_name": "Acme", "period": "2026-11"}
ATTACHMENT = ArtifactRef(sha256="ab" * 32, size_bytes=1234, media_type="application/pdf", filename="report.pdf")


def email_request(**overrides: Any) -> dict[str, Any]:
    return {
        "business_key": "monthly_report:seller_7.2026-11",
        "channel": "email",
        "recipient": "Seller.Seven@Example.COM",
        "template_id": "monthly_report",
        "template_version": 1,
        "render_data": REPORT,
        "attachment": ATTACHMENT.model_dump(),
        **overrides,
    }


def test_an_email_intent_carries_subject_attachment_and_a_normalised_address() -> None:
    """An e-mail intent renders its subject and body once, names its attachment by hash, and lower-cases the domain."""
    intent = build_intent(parse_request(email_request()), NOW, KEYRING)
    assert intent.workflow_id == "monthly_report:seller_7.2026-11/email"
    assert intent.message.recipient == "Seller.Seven@example.com"
    assert intent.message.subject == "Your 2026-11 sales report"
    assert "2026-11" in intent.message.body and intent.message.attachment == ATTACHMENT
    # The content hash covers the attachment: another file is another content revision.
    other = build_intent(parse_request(email_request(attachment={**ATTACHMENT.model_dump(), "sha256": "cd" * 32})), NOW, KEYRING)
    assert other.content_sha256 != intent.content_sha256
    assert other.intent_fingerprint != intent.intent_fingerprint


@pytest.mark.parametrize("address", ["not-an-address", "two@@example.com", "+15551234567", "a@b", "x" * 300 + "@example.com"])
def test_an_invalid_email_recipient_is_refused_without_echoing_it(address: str) -> None:
    """A refused e-mail address is named by field and rule; the address itself never appears in the error."""
    with pytest.raises(InvalidIntent) as refused:
        parse_request(email_request(recipient=address))
    assert refused.value.problems == [("recipient", "must be an e-mail address (local-part@domain)")]
    assert address not in str(refused.value)


def test_an_sms_recipient_must_still_be_e164() -> None:
    """An e-mail address on the SMS channel is refused with the E.164 rule, not accepted as text."""
    with pytest.raises(InvalidIntent) as refused:
        parse_request(raw_request(recipient="someone@example.com"))
    assert refused.value.problems == [("recipient", NUMBER_RULE)]
    assert "someone" not in str(refused.value)


def test_an_attachment_on_an_sms_intent_is_refused() -> None:
    """Attachments never reach the SMS path: an SMS request naming one is refused before anything starts."""
    with pytest.raises(InvalidIntent) as refused:
        parse_request(raw_request(attachment=ATTACHMENT.model_dump()))
    assert refused.value.problems == [("attachment", "only the email channel carries attachments")]


def test_a_template_is_rendered_only_for_its_own_channel() -> None:
    """An SMS template on the e-mail channel (or the reverse) is refused, naming the template's channel."""
    with pytest.raises(InvalidIntent) as refused:
        build_intent(parse_request(email_request(template_id="order_receipt", render_data=RECEIPT_DATA)), NOW, KEYRING)
    assert refused.value.problems == [("template_id", "order_receipt v1 is for the sms channel, not email")]
    with pytest.raises(TemplateError):
        render_message("monthly_report", 1, REPORT, channel="sms")


def test_sms_fingerprints_and_content_hashes_are_unchanged_by_the_email_channel() -> None:
    """An SMS intent hashes exactly as before e-mail existed (body only; no attachment key), so keys
    recorded earlier still match their payloads."""
    intent = build_intent(parse_request(raw_request()), NOW, KEYRING)
    assert intent.content_sha256 == hashlib.sha256(intent.message.body.encode()).hexdigest()
    assert intent.message.subject is None and intent.message.attachment is None


# ---- input that can never be sent is refused at the door -------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "Acme\x00Ltd", "Acme\x1b[31m", "bell\x07", "del\x7f", "lone \ud800 surrogate", "\udfff", "next\x85line",
        "c1\x9f", "line\u2028separator", "para\u2029graph",
    ],  # fmt: skip
    ids=["nul", "escape", "bell", "del", "high-surrogate", "low-surrogate", "nel", "c1-apc", "u2028", "u2029"],
)
def test_unsendable_characters_are_refused_naming_the_field(value: str) -> None:
    """NUL, other C0 and C1 control characters, the line and paragraph separators and unpaired
    surrogates can be neither sent (an e-mail header cannot hold a line separator) nor stored: the
    intent is refused before anything starts, naming the field, without echoing the value."""
    with pytest.raises(InvalidIntent) as refused:
        build_intent(parse_request(raw_request(render_data={**RECEIPT_DATA, "merchant": value})), NOW, KEYRING)
    assert refused.value.problems == [("render_data.merchant", UNSENDABLE_RULE)]
    assert value not in str(refused.value)


def test_newline_tab_and_template_syntax_in_data_render_literally() -> None:
    """Newline and tab are text; `${...}` and SQL in data are rendered as the characters they are."""
    data = {**RECEIPT_DATA, "merchant": "A\tB\n${order_ref}'; DROP TABLE intents;--"}
    intent = build_intent(parse_request(raw_request(render_data=data)), NOW, KEYRING)
    assert "A\tB\n${order_ref}'; DROP TABLE intents;--" in intent.message.body


def test_a_huge_number_is_refused() -> None:
    with pytest.raises(InvalidIntent) as refused:
        build_intent(parse_request(raw_request(render_data={**RECEIPT_DATA, "amount": 10**30})), NOW, KEYRING)
    assert refused.value.problems == [("render_data.amount", "whole numbers must be within ±2^53 (9007199254740992)")]


# ---- tenant and priority -------------------------------------------------------------------------


@given(tenant=st.text(max_size=60), priority=st.one_of(st.none(), st.integers(-3, 9), st.text(max_size=3), st.booleans()))
@settings(max_examples=examples(300), deadline=None)
def test_a_tenant_and_a_priority_are_taken_only_in_their_shapes_and_a_refusal_names_the_field(
    tenant: str, priority: object
) -> None:
    """Any tenant and priority a caller may send: accepted exactly when the tenant is an id and the
    priority a whole key from 1 to 5; otherwise refused naming the field, never echoing the value."""
    raw = raw_request(tenant=tenant, **({} if priority is None else {"priority": priority}))
    tenant_ok = re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,47}", tenant) is not None
    priority_ok = priority is None or (type(priority) is int and 1 <= priority <= 5)
    if tenant_ok and priority_ok:
        request = parse_request(raw)
        assert (request.tenant, request.priority) == (tenant, priority)
        intent = build_intent(request, NOW, KEYRING)
        assert (intent.tenant, intent.priority) == (tenant, priority)
        return
    with pytest.raises(InvalidIntent) as caught:
        parse_request(raw)
    # Each refusal is the field's fixed rule: nothing of the value is echoed.
    expected = set()
    if not tenant_ok:
        expected.add(("tenant", "must be a tenant id: 1 to 48 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"))
    if not priority_ok:
        expected.add(("priority", "must be a priority key, a whole number from 1 (first) to 5 (last)"))
    assert set(caught.value.problems) == expected


def test_another_tenant_makes_another_intent_and_the_shared_tenant_keeps_earlier_fingerprints() -> None:
    shared = build_intent(parse_request(raw_request()), NOW, KEYRING)
    named_shared = build_intent(parse_request(raw_request(tenant="shared")), NOW, KEYRING)
    acme = build_intent(parse_request(raw_request(tenant="acme")), NOW, KEYRING)
    assert shared.intent_fingerprint == named_shared.intent_fingerprint != acme.intent_fingerprint
    # The priority is how it waits, not what it is: the same intent.
    assert build_intent(parse_request(raw_request(priority=5)), NOW, KEYRING).intent_fingerprint == shared.intent_fingerprint
