"""What SendGrid's Email Activity feed shows of the emulator's store: one feed message per recipient.

The feed is a delayed view. SendGrid fills it from the same event pipeline as the Event Webhook, and
the delay is documented nowhere (users report about a minute), so a message enters the feed
``lag`` after it was accepted, and each of its events ``lag`` after it was created. Until then the
list leaves the message out and the detail answers 404: a client that reads the feed right after
sending must not take "not there" for "not sent".

Shapes follow SendGrid's OpenAPI description of the Email Activity API (``tsg_email_activity_v3``):

* the list's "Abbv. Message": from_email, msg_id, subject, to_email, status, opens_count,
  clicks_count, last_event_time;
* the detail's "Message": those identity fields plus template_id, asm_group_id, teammate, api_key_id,
  events, originating_ip, categories, unique_args (a JSON string, as the spec types it), outbound_ip
  and outbound_ip_type.

``msg_id`` is the recipient's ``sg_message_id``. ``status`` is one of the spec's three values and
follows the latest decisive event: ``delivered`` after a ``delivered`` event, ``not_delivered`` after
a ``bounce`` or ``dropped``, else ``processed``. Times are ISO 8601 UTC to the second with ``Z``.
Every event carries all eight keys its schema lists; a key that does not apply to that event is null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parseaddr
from enum import StrEnum
from typing import Any

from emulator.esp.messages import EventRecord, MessageRecord, MessageStore, RecipientRecord

# The relay sends nowhere, so no real outbound IP exists; a TEST-NET-1 address (RFC 5737) stands in,
# because the spec types the field as a required IPv4 address.
OUTBOUND_IP = "192.0.2.25"
OUTBOUND_IP_TYPE = "shared"

# The Event Webhook's event names and what the Activity API calls the same events (its EventName enum).
_FEED_EVENT_NAMES = {
    "processed": "processed",
    "delivered": "delivered",
    "deferred": "deferred",
    "bounce": "bounced",
    "dropped": "dropped",
    "spamreport": "spam_report",
    "open": "opened",
    "click": "clicked",
    "unsubscribe": "unsubscribe",
    "group_unsubscribe": "group_unsubscribe",
    "group_resubscribe": "group_resubscribe",
}
# A `bounce` event of type `blocked` is a refusal the receiver may lift (SendGrid's "soft" bounce);
# type `bounce` is a permanent one ("hard").
_BOUNCE_TYPES = {"bounce": "hard", "blocked": "soft"}
# Events whose `reason` (or SMTP `response`) explains a failure; the spec gives `reason` no other use.
_EVENTS_WITH_REASON = frozenset({"bounce", "deferred", "dropped"})


class FeedStatus(StrEnum):
    """The Activity API's message status (the spec's Status enum)."""

    PROCESSED = "processed"
    DELIVERED = "delivered"
    NOT_DELIVERED = "not_delivered"


def iso_seconds(moment: datetime) -> str:
    """``2017-10-13T18:56:21Z``: the feed's time format."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class FeedEvent:
    """One event as the detail lists it."""

    name: str
    at: datetime
    reason: str | None
    attempt_num: int | None
    url: str | None
    bounce_type: str | None
    http_user_agent: str | None

    @classmethod
    def of(cls, event: EventRecord) -> FeedEvent:
        body = event.body
        kind = str(body.get("event", ""))
        reason = body.get("reason", body.get("response")) if kind in _EVENTS_WITH_REASON else None
        attempt = body.get("attempt")
        return cls(
            name=_FEED_EVENT_NAMES.get(kind, kind),
            # The event's own timestamp: the instant the webhook reported, so the two views agree.
            at=datetime.fromtimestamp(int(body["timestamp"]), timezone.utc),
            reason=str(reason) if reason is not None else None,
            attempt_num=int(attempt) if isinstance(attempt, str) and attempt.isdigit() else None,
            url=body.get("url"),
            bounce_type=_BOUNCE_TYPES.get(str(body.get("type"))) if kind == "bounce" else None,
            http_user_agent=body.get("useragent"),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "event_name": self.name,
            "processed": iso_seconds(self.at),
            "reason": self.reason,
            "attempt_num": self.attempt_num,
            "url": self.url,
            "bounce_type": self.bounce_type,
            "http_user_agent": self.http_user_agent,
            # The relay hands mail to no MX, so it has none to name.
            "mx_server": None,
        }


@dataclass(frozen=True)
class FeedMessage:
    """One recipient of one accepted message, as the feed shows it at one instant."""

    msg_id: str
    from_email: str
    subject: str
    to_email: str
    status: FeedStatus
    opens_count: int
    clicks_count: int
    last_event_time: datetime  # to the second, as shown, so queries compare what a client sees
    unique_args: Mapping[str, str]
    categories: tuple[str, ...]
    events: tuple[FeedEvent, ...]
    originating_ip: str | None
    api_key_id: str | None
    order: tuple[int, int]  # (message seq, recipient index): ties on last_event_time go to the newer

    def _identity_json(self) -> dict[str, Any]:
        """The fields the list and the detail answers share."""
        return {
            "from_email": self.from_email,
            "msg_id": self.msg_id,
            "subject": self.subject,
            "to_email": self.to_email,
            "status": self.status.value,
        }

    def summary_json(self) -> dict[str, Any]:
        return {
            **self._identity_json(),
            "opens_count": self.opens_count,
            "clicks_count": self.clicks_count,
            "last_event_time": iso_seconds(self.last_event_time),
        }

    def detail_json(self) -> dict[str, Any]:
        return {
            **self._identity_json(),
            "template_id": None,
            "asm_group_id": None,
            "teammate": "",  # sent with an API key, not by a teammate; the spec's pattern allows ""
            "api_key_id": self.api_key_id,
            "events": [event.as_json() for event in self.events],
            "originating_ip": self.originating_ip,
            "categories": list(self.categories),
            "unique_args": json.dumps(dict(self.unique_args), ensure_ascii=False),
            "outbound_ip": OUTBOUND_IP,
            "outbound_ip_type": OUTBOUND_IP_TYPE,
        }


class ActivityFeed:
    """The feed over one store, with the lag a test may change at run time."""

    def __init__(self, store: MessageStore, api_key_id: str | None) -> None:
        self._store = store
        self._api_key_id = api_key_id

    def visible(self, now: datetime, lag: timedelta) -> list[FeedMessage]:
        """Every feed message visible at ``now``, newest first (latest event, then latest accepted)."""
        messages = [
            self._feed_message(record, index, recipient, now - lag)
            for record in self._store.oldest_first()
            if record.accepted_at <= now - lag
            for index, recipient in enumerate(record.recipients)
        ]
        messages.sort(key=lambda message: (message.last_event_time, message.order), reverse=True)
        return messages

    def find(self, msg_id: str, now: datetime, lag: timedelta) -> FeedMessage | None:
        """The feed message ``msg_id`` if it is visible at ``now``."""
        for record in self._store.oldest_first():
            for index, recipient in enumerate(record.recipients):
                if recipient.sg_message_id == msg_id and record.accepted_at <= now - lag:
                    return self._feed_message(record, index, recipient, now - lag)
        return None

    def _feed_message(
        self, record: MessageRecord, index: int, recipient: RecipientRecord, horizon: datetime
    ) -> FeedMessage:
        """``recipient`` as the feed knows it: only the events created at or before ``horizon``."""
        events = [event for event in recipient.events if event.created_at <= horizon]
        kinds = [str(event.body.get("event")) for event in events]
        feed_events = tuple(FeedEvent.of(event) for event in events)
        last = max((event.at for event in feed_events), default=record.accepted_at)
        parsed = record.parsed
        return FeedMessage(
            msg_id=recipient.sg_message_id,
            from_email=_from_address(record),
            subject=parsed.subject or "",
            to_email=recipient.email,
            status=_status(kinds),
            opens_count=kinds.count("open"),
            clicks_count=kinds.count("click"),
            last_event_time=last.replace(microsecond=0),
            unique_args=_unique_args(parsed.smtpapi),
            categories=_categories(parsed.category),
            events=feed_events,
            originating_ip=record.client_ip,
            api_key_id=self._api_key_id,
            order=(record.seq, index),
        )


def api_key_id(api_key: str | None) -> str | None:
    """The id part of a SendGrid API key (``SG.<id>.<secret>``), which is what the feed reports; None
    for a password of any other shape."""
    if api_key is None:
        return None
    parts = api_key.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "SG" and parts[1] else None


def _status(kinds: list[str]) -> FeedStatus:
    status = FeedStatus.PROCESSED
    for kind in kinds:
        # The latest decisive event wins: a late bounce after `delivered` turns the message not_delivered.
        if kind == "delivered":
            status = FeedStatus.DELIVERED
        elif kind in ("bounce", "dropped"):
            status = FeedStatus.NOT_DELIVERED
    return status


def _from_address(record: MessageRecord) -> str:
    """The From header's address (the spec: "the 'From' email address"), else the envelope sender."""
    header = next((value for name, value in record.parsed.headers if name.lower() == "from"), None)
    address = parseaddr(header)[1] if header else ""
    return address or record.mail_from


def _unique_args(smtpapi: dict[str, Any] | None) -> dict[str, str]:
    """Every string-valued unique argument, reserved names included: those are dropped from webhook
    events only (where they would collide with SendGrid's own fields), not from the message."""
    raw = smtpapi.get("unique_args") if smtpapi is not None else None
    if not isinstance(raw, dict):
        return {}
    return {key: value for key, value in raw.items() if isinstance(key, str) and isinstance(value, str)}


def _categories(category: str | list[str] | None) -> tuple[str, ...]:
    if category is None:
        return ()
    return (category,) if isinstance(category, str) else tuple(category)
