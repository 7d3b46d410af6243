"""A notice: one business event told on several channels, one independent intent per channel.

Seed 003: a seller hears of a new order by e-mail and by SMS. The channels share the business key
and nothing else: each is its own intent (``<key>/sms``, ``<key>/email``) with its own clocks,
attempts, retry budget and terminal state, so an SMS stuck in a carrier's queue never holds the
e-mail back, and a restart re-sends neither.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError, model_validator

from herald.artifacts import ArtifactRef
from herald.errors import InvalidIntent
from herald.intent import BUSINESS_KEY_PATTERN, Channel, IntentRequest, describe_validation_error, parse_request
from herald.outcomes import Frozen


class ChannelEntry(Frozen):
    """What one channel of a notice sends; validated as an ``IntentRequest`` with the notice's key."""

    channel: Channel
    recipient: str
    template_id: str
    template_version: int
    render_data: dict[str, str | int]
    expires_at: datetime | None = None
    attachment: ArtifactRef | None = None


class NoticeRequest(Frozen):
    business_key: str = Field(pattern=BUSINESS_KEY_PATTERN)
    channels: list[ChannelEntry] = Field(min_length=1, max_length=len(Channel))

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
                requests.append(parse_request({"business_key": self.business_key, **entry.model_dump(exclude_none=True)}))
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
            [describe_validation_error(item) for item in error.errors(include_input=False, include_url=False)]
        ) from None
    notice.requests()  # every entry's own rules, before anything starts
    return notice
