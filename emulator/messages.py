"""Accepted messages: their records, Twilio's resource shape, and the store that lists them.

A ``MessageRecord`` is the emulator's own mutable state for one message: the
lifecycle advances it, the API renders it as Twilio's Message resource, and the
admin API renders everything (status history, callback attempts) as the test
oracle.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from email.utils import format_datetime
from typing import Any

from emulator.twilio_errors import describe

API_VERSION = "2010-04-01"
FINAL_STATUSES = frozenset({"delivered", "undelivered", "failed", "canceled"})
# Twilio's ValidityPeriod: 36,000 s (10 h) unless the create request names a shorter one.
DEFAULT_VALIDITY_SECONDS = 36_000
VALIDITY_RANGE = (1, 36_000)

# GSM 03.38 default alphabet (one septet each) and its extension table (two septets:
# escape + char). Anything outside both forces UCS-2, which changes segment sizes.
_GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM7_EXTENDED = frozenset("\f^{}\\[~]|€")


def count_segments(body: str) -> int:
    """SMS segments ``body`` needs: 160/153 septets in GSM-7, else 70/67 UTF-16 units."""
    if all(char in _GSM7_BASIC or char in _GSM7_EXTENDED for char in body):
        units = sum(2 if char in _GSM7_EXTENDED else 1 for char in body)
        single, multi = 160, 153
    else:
        units = len(body.encode("utf-16-le")) // 2
        single, multi = 70, 67
    if units <= single:
        return 1
    return math.ceil(units / multi)


def rfc2822(moment: datetime | None) -> str | None:
    """``Thu, 30 Jul 2015 20:12:31 +0000``: the date format of Twilio's 2010 API."""
    if moment is None:
        return None
    return format_datetime(moment.astimezone(timezone.utc).replace(microsecond=0))


def new_message_sid() -> str:
    return "SM" + secrets.token_hex(16)


@dataclass
class StatusChange:
    status: str
    at: datetime


@dataclass
class CallbackAttempt:
    """One HTTP attempt to deliver one status callback."""

    reported_status: str
    copy: int  # 1-based; >1 only under duplicate_callbacks
    attempt: int  # 1-based try number of this copy
    url: str
    started_at: datetime
    http_status: int | None = None
    error: str | None = None  # connection error or timeout, when there was no HTTP answer
    duration_ms: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300


@dataclass
class MessageRecord:
    """One accepted message: what the client sent and everything that happened to it since."""

    seq: int
    sid: str
    account_sid: str
    to: str
    from_: str | None
    messaging_service_sid: str | None
    body: str
    status_callback: str | None
    fault: str | None
    date_created: datetime
    status: str = "queued"
    date_updated: datetime | None = None
    date_sent: datetime | None = None
    error_code: int | None = None
    num_segments: str = "1"
    # ValidityPeriod: the longest the message may wait in the queue before it is dropped (30036).
    validity_seconds: int = DEFAULT_VALIDITY_SECONDS
    # Fault `lost_then_reported`: never listed, and callbacks wait for this gate (at most
    # callback_release_after seconds).
    unlisted: bool = False
    callback_gate: asyncio.Event | None = None
    callback_release_after: float = 0.0
    history: list[StatusChange] = field(default_factory=list)
    callbacks: list[CallbackAttempt] = field(default_factory=list)

    def advance(self, status: str, now: datetime, error_code: int | None = None) -> None:
        """Move to ``status``; ``sending`` stamps date_sent as Twilio does."""
        self.status = status
        self.date_updated = now
        if status == "sending" and self.date_sent is None:
            self.date_sent = now
        if error_code is not None:
            self.error_code = error_code
        self.history.append(StatusChange(status, now))

    @property
    def uri(self) -> str:
        return f"/{API_VERSION}/Accounts/{self.account_sid}/Messages/{self.sid}.json"

    def resource(self) -> dict[str, Any]:
        """The Message resource exactly as Twilio's API v2010 shapes it."""
        return {
            "account_sid": self.account_sid,
            "api_version": API_VERSION,
            "body": self.body,
            "date_created": rfc2822(self.date_created),
            "date_sent": rfc2822(self.date_sent),
            "date_updated": rfc2822(self.date_updated or self.date_created),
            "direction": "outbound-api",
            "error_code": self.error_code,
            "error_message": describe(self.error_code) if self.error_code is not None else None,
            "from": self.from_,
            "messaging_service_sid": self.messaging_service_sid,
            "num_media": "0",
            "num_segments": self.num_segments,
            "price": None,
            "price_unit": "USD",
            "sid": self.sid,
            "status": self.status,
            "subresource_uris": {
                "media": f"/{API_VERSION}/Accounts/{self.account_sid}/Messages/{self.sid}/Media.json",
            },
            "to": self.to,
            "uri": self.uri,
        }

    def oracle(self) -> dict[str, Any]:
        """The admin view: everything a test needs to judge what really happened."""
        return {
            "sid": self.sid,
            "to": self.to,
            "from": self.from_,
            "messaging_service_sid": self.messaging_service_sid,
            "body": self.body,
            "status": self.status,
            "error_code": self.error_code,
            "fault": self.fault,
            "validity_seconds": self.validity_seconds,
            "unlisted": self.unlisted,
            "date_created": self.date_created.isoformat(),
            "date_sent": self.date_sent.isoformat() if self.date_sent else None,
            "status_callback": self.status_callback,
            "history": [{"status": change.status, "at": change.at.isoformat()} for change in self.history],
            "callbacks": [
                {
                    "status": attempt.reported_status,
                    "copy": attempt.copy,
                    "attempt": attempt.attempt,
                    "url": attempt.url,
                    "started_at": attempt.started_at.isoformat(),
                    "http_status": attempt.http_status,
                    "error": attempt.error,
                    "duration_ms": attempt.duration_ms,
                }
                for attempt in self.callbacks
            ],
        }


@dataclass(frozen=True)
class DateBound:
    """One DateSent filter value: a whole GMT day, or an instant to the second."""

    day: date | None = None
    instant: datetime | None = None

    def matches(self, sent: datetime, relation: str) -> bool:
        """Compare ``sent`` with this bound: ``=`` same day/second, ``<`` on or before, ``>`` on or after."""
        sent = sent.astimezone(timezone.utc)
        if self.day is not None:
            left, right = sent.date(), self.day
        else:
            assert self.instant is not None
            # Clients see date_sent to the second, so compare at that precision.
            left, right = sent.replace(microsecond=0), self.instant.replace(microsecond=0)
        if relation == "=":
            return left == right
        if relation == "<":
            return left <= right
        return left >= right


@dataclass(frozen=True)
class ListFilter:
    to: str | None = None
    from_: str | None = None
    date_sent: tuple[tuple[str, DateBound], ...] = ()

    def matches(self, record: MessageRecord) -> bool:
        if self.to is not None and record.to != self.to:
            return False
        if self.from_ is not None and record.from_ != self.from_:
            return False
        if self.date_sent:
            # A message not yet sending has no date_sent and matches no DateSent filter (as on Twilio).
            if record.date_sent is None:
                return False
            return all(bound.matches(record.date_sent, relation) for relation, bound in self.date_sent)
        return True


class MessageStore:
    """Every accepted message of one emulator instance, in creation order."""

    def __init__(self) -> None:
        self._by_sid: dict[str, MessageRecord] = {}
        self._next_seq = 0

    def __len__(self) -> int:
        return len(self._by_sid)

    def next_seq(self) -> int:
        self._next_seq += 1
        return self._next_seq

    def add(self, record: MessageRecord) -> None:
        self._by_sid[record.sid] = record

    def get(self, sid: str) -> MessageRecord | None:
        return self._by_sid.get(sid)

    def clear(self) -> None:
        self._by_sid.clear()

    def by_recipient(self, to: str) -> list[MessageRecord]:
        return [record for record in self._by_sid.values() if record.to == to]

    def oldest_first(self) -> list[MessageRecord]:
        return sorted(self._by_sid.values(), key=lambda record: record.seq)

    def newest_first(self, list_filter: ListFilter) -> list[MessageRecord]:
        """Matching messages as Twilio lists them: by ``date_sent``, most recent first.

        Twilio documents that order and not where a message without ``date_sent`` (still queued)
        goes; here such messages come first, being sent after every message that was, newest
        created first. Clients must not rely on it (Herald's lookup does not).
        """
        matching = [
            record for record in self._by_sid.values() if not record.unlisted and list_filter.matches(record)
        ]
        unsent = sorted((r for r in matching if r.date_sent is None), key=lambda r: r.seq, reverse=True)
        sent = sorted((r for r in matching if r.date_sent is not None), key=lambda r: (r.date_sent, r.seq), reverse=True)
        return unsent + sent
