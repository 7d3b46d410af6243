"""A notice: one business event told on several channels, one independent intent per channel.

Seed 003: a seller hears of a new order by e-mail and by SMS. The channels share the business key
and nothing else: each is its own intent (``<key>/sms``, ``<key>/email``) with its own clocks,
attempts, retry budget and terminal state, so an SMS stuck in a carrier's queue never holds the
e-mail back, and a restart re-sends neither.

A notice is for one tenant (``tenant``, the fairness key on a backlogged route, given once for the
whole notice); each channel may ask for its own lower priority (``channels[i].priority``), since an
e-mail copy can often wait where the SMS cannot.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from herald.core import recipients
from herald.core.artifacts import ArtifactRef
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.core.send_policy import PRIORITY_KEYS, SHARED_TENANT, TENANT_PATTERN
from herald.intake.errors import InvalidIntent
from herald.intake.requests import BUSINESS_KEY_PATTERN, IntentRequest, describe_validation_error, parse_request

# A tenant named inside a channel entry: refused with the reason rather than as an unknown field.
_ONE_TENANT_RULE = "a notice is for one tenant: name it once, as the notice's own 'tenant'"


class ChannelEntry(Frozen):
    """What one channel of a notice sends; validated as an ``IntentRequest`` with the notice's key."""

    channel: Channel
    # Canonical here already (herald.core.recipients, as IntentRequest): the outbox stores the notice as
    # parsed, and erasing a number finds its rows by the canonical form.
    recipient: str
    template_id: str
    template_version: int
    render_data: dict[str, str | int]
    expires_at: datetime | None = None
    attachment: ArtifactRef | None = None
    # This channel's priority key, as IntentRequest.priority (None: the category's).
    priority: int | None = Field(default=None, ge=PRIORITY_KEYS[0], le=PRIORITY_KEYS[1], strict=True)

    @field_validator("recipient")
    @classmethod
    def _recipient_fits_channel(cls, value: str, info: ValidationInfo) -> str:
        # The rule only, never the value. Without a valid channel, that field's own refusal says it.
        channel = info.data.get("channel")
        if channel is None:
            return value
        try:
            return recipients.recipient(value, channel.value)
        except recipients.RecipientRefused as refused:
            raise PydanticCustomError("recipient", refused.rule) from None


class NoticeRequest(Frozen):
    business_key: str = Field(pattern=BUSINESS_KEY_PATTERN)
    channels: list[ChannelEntry] = Field(min_length=1, max_length=len(Channel))
    # Every channel's intent is for this tenant, as IntentRequest.tenant.
    tenant: str = Field(default=SHARED_TENANT, pattern=TENANT_PATTERN)

    @model_validator(mode="after")
    def _one_entry_per_channel(self) -> NoticeRequest:
        named = [entry.channel for entry in self.channels]
        if len(set(named)) != len(named):
            raise ValueError("name each channel once: one intent per channel")
        return self

    def requests(self) -> list[IntentRequest]:
        """One intent request per channel; each entry's problems are named ``channels.<i>.<field>``."""
        requests: list[IntentRequest] = []
        problems: list[tuple[str, str]] = []
        for index, entry in enumerate(self.channels):
            try:
                raw = {"business_key": self.business_key, "tenant": self.tenant, **entry.model_dump(exclude_none=True)}
                requests.append(parse_request(raw))
            except InvalidIntent as refused:
                problems += [(f"channels.{index}.{field}", rule) for field, rule in refused.problems]
        if problems:
            raise InvalidIntent(problems)
        return requests


def parse_notice(raw: dict[str, Any]) -> NoticeRequest:
    """Validate a raw notice: field-and-rule lines, never the values (recipients are personal data)."""
    try:
        notice = NoticeRequest.model_validate(raw)
    except ValidationError as error:
        raise InvalidIntent(
            [_describe(item) for item in error.errors(include_input=False, include_url=False)]
        ) from None
    notice.requests()  # every entry's own rules, before anything starts
    return notice


def _describe(item: Any) -> tuple[str, str]:
    """A notice's problem as field and rule; a channel entry's field is described as the intent's
    field of that name is (the same rule for ``priority`` in a request and in a notice's entry)."""
    loc = tuple(item["loc"])
    if len(loc) < 3 or loc[0] != "channels" or not isinstance(loc[1], int):
        return describe_validation_error(item)
    if loc[2:] == ("tenant",) and item["type"] == "extra_forbidden":
        return f"channels.{loc[1]}.tenant", _ONE_TENANT_RULE
    field, rule = describe_validation_error({**item, "loc": loc[2:]})
    return f"channels.{loc[1]}.{field}", rule
