"""A service's request for one notification, and how it becomes an intent.

``IntentRequest`` is what a service asks for, validated before anything starts (each problem named
by field and rule, never by value); ``build_intent`` renders it once and fingerprints it into the
``Intent`` the workflow carries (``herald.core.intent``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from herald.core import recipients
from herald.core.artifacts import ArtifactRef
from herald.core.intent import Intent, workflow_id_for
from herald.core.message import Channel, Message
from herald.core.outcomes import Frozen
from herald.core.send_policy import PRIORITY_KEYS, SHARED_TENANT, TENANT_PATTERN, Category, zone
from herald.intake.errors import InvalidIntent
from herald.intake.template_registry import LATEST, MAX_TEMPLATE_VERSION, TemplateError, render_message, resolve_version
from herald.privacy.fingerprints import Keyring

# `<event type>:<business id>`, e.g. `order_receipt:pay_157`. The key becomes the
# workflow id, which Temporal stores and shows in plain text, so the alphabet has
# no room for an e-mail address (`@`) or an E.164 number (`+`).
BUSINESS_KEY_PATTERN = r"^[a-z][a-z0-9_]{0,63}:[A-Za-z0-9][A-Za-z0-9_.:-]{0,191}$"
_RENDER_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_MAX_RENDER_VALUE_CHARS = 500
DEFAULT_LIFETIME = timedelta(hours=24)


class IntentRequest(Frozen):
    """A service's request for one notification; validated before anything starts."""

    business_key: str = Field(pattern=BUSINESS_KEY_PATTERN)
    channel: Channel = Channel.SMS
    # E.164 for SMS; an e-mail address for e-mail (normalised: the domain lower-cased). Read by
    # herald.core.recipients, as at every door: one spelling per person (its docstring has the rule).
    recipient: str
    template_id: str
    # A published version, or "latest": resolved to the highest published version when the intent
    # is created; the intent records the concrete number, never the alias.
    template_version: int | str
    render_data: dict[str, str | int]
    # When the message stops being worth sending (a seat offer lapses); None means the default lifetime.
    expires_at: datetime | None = None
    # The recipient's IANA time zone for quiet hours; None: from the number's region, else the policy's default.
    time_zone: str | None = None
    # E-mail only: a stored artifact (herald.core.artifacts) sent as an attachment. The intent names it
    # by content hash and size; the bytes never enter the workflow or its history.
    attachment: ArtifactRef | None = None
    # Who the notice is for (a marketplace, seller, studio or business line): the fairness key that
    # shares a backlogged route between tenants, in the policy's weights.
    tenant: str = Field(default=SHARED_TENANT, pattern=TENANT_PATTERN)
    # A priority key lower than the category's (a larger number) for a notice that can wait; None:
    # the category's, from the send policy in force when each attempt is prepared.
    priority: int | None = Field(default=None, ge=PRIORITY_KEYS[0], le=PRIORITY_KEYS[1], strict=True)

    @field_validator("time_zone")
    @classmethod
    def _an_iana_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                zone(value)
            except ValueError:
                raise PydanticCustomError("time_zone", "must be an IANA time zone name, e.g. Europe/Paris") from None
        return value

    @field_validator("template_version", mode="before")
    @classmethod
    def _a_version_or_latest(cls, value: Any) -> int | str:
        # Before pydantic's coercion: true, 1.0 and "1" would all become version 1.
        if value == LATEST or (type(value) is int and 1 <= value <= MAX_TEMPLATE_VERSION):
            return value
        raise PydanticCustomError(
            "template_version", f"must be a published version number (1 to {MAX_TEMPLATE_VERSION}) or 'latest'"
        )

    @field_validator("recipient")
    @classmethod
    def _recipient_fits_channel(cls, value: str, info: ValidationInfo) -> str:
        # Errors name the rule only: the value is personal data and is never echoed.
        channel = info.data.get("channel")
        if channel is Channel.EMAIL:
            try:
                return recipients.email_address(value)
            except recipients.RecipientRefused as refused:
                raise PydanticCustomError("recipient_email", refused.rule) from None
        try:
            return recipients.sms_number(value)
        except recipients.RecipientRefused as refused:
            raise PydanticCustomError("recipient_e164", refused.rule) from None

    @model_validator(mode="after")
    def _attachment_only_by_email(self) -> IntentRequest:
        if self.attachment is not None and self.channel is not Channel.EMAIL:
            raise PydanticCustomError("attachment_channel", "only the email channel carries attachments")
        return self

    @field_validator("render_data")
    @classmethod
    def _render_data_is_small_and_flat(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for key, item in value.items():
            if not _RENDER_KEY.match(key):
                raise ValueError("keys must be lower-case identifiers")
        return value

    @field_validator("expires_at")
    @classmethod
    def _expiry_has_zone(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry a time zone")
        return value

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.business_key, self.channel)


def intent_fingerprint(request: IntentRequest, keyring: Keyring, version: int | None = None) -> str:
    """A keyed fingerprint over everything that makes the message what it is (not its expiry).

    Keyed, because it covers the recipient: with a template's render data guessed, a plain hash
    (kept in the workflow's memo and the ledger) would give the number back."""
    return keyring.of_text(_intent_canonical(request, version))


def same_intent(recorded_fingerprint: str, intent: Intent, keyring: Keyring) -> bool:
    """Whether a recorded intent fingerprint (under any key `keyring` holds, or a plain SHA-256 from
    before keys) is this intent's: a key rotated since the first start still attaches, not conflicts."""
    return keyring.matches_text(recorded_fingerprint, _intent_canonical(intent, intent.template_version))


def _intent_canonical(request: IntentRequest | Intent, version: int | str | None) -> str:
    # The channel, recipient and attachment: a request's own, an intent's message's.
    message = request.message if isinstance(request, Intent) else request
    fields: dict[str, Any] = {
        "channel": message.channel.value,
        "recipient": message.recipient,
        "template_id": request.template_id,
        "template_version": version if version is not None else request.template_version,
        # As rendered: 15 and "15" make the same message, so they are the same intent.
        "render_data": {key: str(value) for key, value in request.render_data.items()},
    }
    if message.attachment is not None:
        # Only when present, so every fingerprint recorded before attachments existed still matches.
        fields["attachment"] = message.attachment.model_dump(mode="json")
    if request.tenant != SHARED_TENANT:
        # Likewise only when named: a notice for another tenant is another notice.
        fields["tenant"] = request.tenant
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def parse_request(raw: dict[str, Any]) -> IntentRequest:
    """Validate a raw request, turning pydantic's errors into field-and-rule lines without values."""
    try:
        return IntentRequest.model_validate(raw)
    except ValidationError as error:
        raise InvalidIntent([describe_validation_error(item) for item in error.errors(include_input=False, include_url=False)])


def build_intent(request: IntentRequest, now: datetime, keyring: Keyring) -> Intent:
    """Render once and freeze: every attempt of this intent sends exactly this body. The recipient
    and the whole payload are fingerprinted under `keyring`'s active key (herald/privacy/fingerprints.py):
    how the ledger names the person, and how a reused key with other content is recognised; any
    spelling of the recipient a door accepts gives the canonical form's fingerprint."""
    problems: list[tuple[str, str]] = []
    # Compare digits only: "1.555.123.4567" and "1:555:123:4567" are the same number in disguise.
    # (An e-mail address cannot hide in a key: the key's alphabet has no '@'.)
    recipient_digits = request.recipient.lstrip("+")
    if request.channel is Channel.SMS and recipient_digits in re.sub(r"[^0-9]", "", request.business_key):
        problems.append(("business_key", "must not contain the recipient's number (it is stored in plain text)"))
    unsendable = [(f"render_data.{key}", problem) for key, item in request.render_data.items() if (problem := _unsendable(item))]
    expires_at = request.expires_at or now + DEFAULT_LIFETIME
    if expires_at <= now:
        problems.append(("expires_at", "must be in the future"))
    try:
        version = resolve_version(request.template_id, request.template_version)
        if unsendable:  # nothing is rendered from values that can never be sent
            raise TemplateError(unsendable[0][0], unsendable[0][1], unsendable)
        rendered = render_message(request.template_id, version, request.render_data, channel=request.channel.value)
    except TemplateError as error:
        problems += error.problems
    if problems:
        raise InvalidIntent(problems)
    message = Message(
        channel=request.channel,
        recipient=request.recipient,
        body=rendered.body,
        subject=rendered.subject,
        html_body=rendered.html_body,
        attachment=request.attachment,
        category=Category(rendered.category),
    )
    return Intent(
        business_key=request.business_key,
        message=message,
        template_id=request.template_id,
        template_version=version,
        render_data=request.render_data,
        content_sha256=message.content_sha256(),
        intent_fingerprint=intent_fingerprint(request, keyring, version),
        recipient_fingerprint=keyring.recipient(request.recipient),
        created_at=now,
        expires_at=expires_at,
        encoding=rendered.segments.encoding if rendered.segments else None,
        segments=rendered.segments.segments if rendered.segments else None,
        time_zone=request.time_zone,
        tenant=request.tenant,
        priority=request.priority,
    )


# What no provider can send and the ledger cannot store: control characters (C0 except newline and
# tab, DEL, and C1: U+0085 NEL is a line break to some readers), the Unicode line and paragraph
# separators (a subject rendered with one cannot be written as a mail header) and unpaired
# surrogates. PostgreSQL refuses NUL in text and jsonb; an unpaired surrogate has no UTF-8 form.
# Refused at the door, so no intent reaches a step that can never send it.
_UNSENDABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
UNSENDABLE_RULE = (
    "must not contain control characters (other than newline and tab), line or paragraph separators "
    "(U+2028, U+2029) or unpaired surrogates"
)
# Integers the ledger's jsonb and every JSON reader round-trip exactly.
_MAX_RENDER_INT = 2**53


def _unsendable(item: str | int) -> str | None:
    """Why a render value can never be sent or stored (or would bloat every history), or None."""
    if isinstance(item, str):
        if len(item) > _MAX_RENDER_VALUE_CHARS:
            return f"must be at most {_MAX_RENDER_VALUE_CHARS} characters"
        if _UNSENDABLE.search(item):
            return UNSENDABLE_RULE
        return None
    if abs(item) > _MAX_RENDER_INT:
        return f"whole numbers must be within ±2^53 ({_MAX_RENDER_INT})"
    return None


_SAFE_FIELD_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$|^[0-9]{1,4}$")


def describe_validation_error(item: Any) -> tuple[str, str]:
    # A field name comes from the caller's keys; one that is not an identifier (say, a phone number
    # used as a key) is not echoed back.
    parts = [str(part) if _SAFE_FIELD_PART.match(str(part)) else "<key>" for part in item["loc"]]
    field = ".".join(parts) or "request"
    rule = {
        "business_key": "must look like 'event_type:business_id' (letters, digits, '_', '.', ':', '-')",
        "tenant": "must be a tenant id: 1 to 48 of a-z, 0-9, '_', '.', '-', starting with a letter or digit",
    }.get(field) if item["type"] == "string_pattern_mismatch" else None
    if field == "priority":
        rule = f"must be a priority key, a whole number from {PRIORITY_KEYS[0]} (first) to {PRIORITY_KEYS[1]} (last)"
    if item["type"] == "attachment_channel":
        field = "attachment"  # a rule about the whole request, reported on the field it refuses
    return field, rule or item["msg"]
