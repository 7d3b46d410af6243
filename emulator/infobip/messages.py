"""What the Infobip emulator remembers: every accepted message with its history and report posts,
the reports waiting for ``GET /sms/3/reports``, and the counters of ``GET /_emulator/stats``.

A message is one destination of one send. Its JSON views are Infobip's: ``report()`` is one
``DeliveryReport`` (the webhook's and the pull API's result), ``log()`` one ``SmsLog``; ``oracle()``
is the admin API's view, what tests count sends with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any

from emulator.infobip.vocabulary import NO_ERROR, PENDING_ACCEPTED, MessageError, Status, infobip_time


@dataclass
class ReportAttempt:
    """One POST of a batch that carried a report of this message, and its answer."""

    number: int  # 1 for the first post, 2 for the first retry, ...
    at: datetime
    url: str
    batch_size: int
    http_status: int | None = None
    error: str | None = None
    duration_ms: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "at": self.at.isoformat(),
            "url": self.url,
            "batch_size": self.batch_size,
            "http_status": self.http_status,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "succeeded": self.succeeded,
        }


@dataclass
class ReportDelivery:
    """One report of a message on its way: pushed (with its attempts) or queued for the pull API."""

    status: str
    copy: int
    route: str  # "push" or "pull"
    attempts: list[ReportAttempt] = field(default_factory=list)
    pulled: bool = False
    abandoned: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "copy": self.copy,
            "route": self.route,
            "delivered": self.pulled or any(attempt.succeeded for attempt in self.attempts),
            "abandoned": self.abandoned,
            "attempts": [attempt.as_json() for attempt in self.attempts],
        }


@dataclass
class MessageRecord:
    """One accepted destination; mutable, owned by the store and its lifecycle task."""

    seq: int
    message_id: str
    bulk_id: str
    to: str
    sender: str | None
    content: dict[str, Any]
    message_count: int
    accepted_at: datetime
    validity_seconds: int
    report_url: str | None  # where its reports are pushed; None: they wait for the pull API
    intermediate_reports: bool
    price: dict[str, Any]  # {pricePerMessage, currency}
    callback_data: str | None = None
    platform: dict[str, str] | None = None
    campaign_reference_id: str | None = None
    fault: str | None = None
    # With idempotency on: the seq of the message whose messageId this one repeated within the grace.
    duplicate_of: int | None = None
    status: Status = PENDING_ACCEPTED
    error: MessageError = NO_ERROR
    done_at: datetime | None = None
    # Whether the message left Infobip for the operator: the copy a handset may get.
    sent: bool = False
    history: list[tuple[Status, datetime]] = field(default_factory=list)
    reports: list[ReportDelivery] = field(default_factory=list)

    def advance(self, status: Status, at: datetime, error: MessageError = NO_ERROR) -> None:
        self.status, self.error = status, error
        self.history.append((status, at))
        if status.final:
            self.done_at = at

    def _common(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "bulkId": self.bulk_id,
            "messageId": self.message_id,
            # Infobip's "date and time when the message was sent": here, when it was accepted.
            "sentAt": infobip_time(self.accepted_at),
            "messageCount": self.message_count,
            "price": dict(self.price),
            "status": self.status.as_json(),
            "error": self.error.as_json(),
        }
        if self.done_at is not None:
            body["doneAt"] = infobip_time(self.done_at)
        if self.sender is not None:
            body["sender"] = self.sender
        if self.platform:
            body["platform"] = dict(self.platform)
        if self.campaign_reference_id is not None:
            body["campaignReferenceId"] = self.campaign_reference_id
        return body

    def report(self) -> dict[str, Any]:
        """The message's ``DeliveryReport`` as it stands now."""
        body = {**self._common(), "to": self.to}
        if self.callback_data is not None:
            body["callbackData"] = self.callback_data
        return body

    def log(self) -> dict[str, Any]:
        """The message's ``SmsLog`` entry as it stands now."""
        return {**self._common(), "destination": self.to, "content": dict(self.content)}

    def oracle(self) -> dict[str, Any]:
        """Everything the emulator knows about the message (admin API only)."""
        return {
            "seq": self.seq,
            "messageId": self.message_id,
            "bulkId": self.bulk_id,
            "to": self.to,
            "sender": self.sender,
            "content": self.content,
            "accepted_at": self.accepted_at.isoformat(),
            "validity_seconds": self.validity_seconds,
            "report_url": self.report_url,
            "fault": self.fault,
            "duplicate_of": self.duplicate_of,
            "sent": self.sent,
            "status": self.status.as_json(),
            "error": self.error.as_json(),
            "history": [{"status": status.name, "at": at.isoformat()} for status, at in self.history],
            "reports": [report.as_json() for report in self.reports],
        }


@dataclass
class _QueuedReport:
    record: MessageRecord
    delivery: ReportDelivery
    body: dict[str, Any]
    at: datetime


class MessageStore:
    """Accepted messages in order, by messageId, and the reports waiting to be pulled."""

    def __init__(self, retention_seconds: float) -> None:
        self._retention = timedelta(seconds=retention_seconds)
        self._records: list[MessageRecord] = []
        self._by_message_id: dict[str, list[MessageRecord]] = {}
        self._pull_queue: list[_QueuedReport] = []

    def __len__(self) -> int:
        return len(self._records)

    def next_seq(self) -> int:
        return len(self._records) + 1

    def add(self, record: MessageRecord) -> None:
        self._records.append(record)
        self._by_message_id.setdefault(record.message_id, []).append(record)

    def clear(self) -> None:
        self._records.clear()
        self._by_message_id.clear()
        self._pull_queue.clear()

    def oldest_first(self) -> list[MessageRecord]:
        return list(self._records)

    def original_within(self, message_id: str, now: datetime, grace_seconds: float) -> MessageRecord | None:
        """The first message accepted under ``message_id`` less than ``grace_seconds`` ago, if any."""
        for record in self._by_message_id.get(message_id, []):
            if record.duplicate_of is None and now - record.accepted_at < timedelta(seconds=grace_seconds):
                return record
        return None

    def kept(self, now: datetime) -> list[MessageRecord]:
        """Messages still inside the retention window, newest first (what the logs show)."""
        return [record for record in reversed(self._records) if now - record.accepted_at < self._retention]

    def queue_report(self, record: MessageRecord, delivery: ReportDelivery, now: datetime) -> None:
        """Keep a report for the pull API, frozen as it is now (a later status is a later report)."""
        self._pull_queue.append(_QueuedReport(record, delivery, record.report(), now))

    def pull_reports(
        self, now: datetime, limit: int, message_ids: set[str] | None, bulk_ids: set[str] | None
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` unpulled reports (oldest first) that match, each handed out once only (no await
        inside: two concurrent pulls on the loop can never both take one report)."""
        self._pull_queue = [item for item in self._pull_queue if now - item.at < self._retention]
        taken: list[dict[str, Any]] = []
        for item in self._pull_queue:
            if len(taken) >= limit:
                break
            if item.delivery.pulled:
                continue
            if message_ids is not None and item.record.message_id not in message_ids:
                continue
            if bulk_ids is not None and item.record.bulk_id not in bulk_ids:
                continue
            item.delivery.pulled = True
            taken.append(item.body)
        self._pull_queue = [item for item in self._pull_queue if not item.delivery.pulled]
        return taken


@dataclass
class InfobipStats:
    """Counters the admin API reports at ``GET /_emulator/stats``."""

    accepted: int = 0  # destinations accepted (duplicates included)
    duplicates_rejected: int = 0  # accepted, then rejected as a repeat of an idempotent messageId
    sent: int = 0  # messages that left for the operator: copies a handset may get
    # Send requests refused, by HTTP status (400 validation, 401, 429, 5xx before acceptance).
    refused_by_status: Counter[int] = field(default_factory=Counter)
    answered_5xx_after_accept: int = 0
    hangs: int = 0
    auth_failures: int = 0
    logs_requests: int = 0
    logs_rate_limited: int = 0
    reports_requests: int = 0
    reports_pulled: int = 0
    report_posts: int = 0  # POSTs (a batch is one)
    report_posts_succeeded: int = 0
    report_posts_failed: int = 0
    reports_abandoned: int = 0  # reports whose batch gave up after its last retry

    def reset(self) -> None:
        """Zero every counter in place (the lifecycle and poster hold a reference to this object)."""
        fresh = InfobipStats()
        for item in fields(self):
            setattr(self, item.name, getattr(fresh, item.name))

    def as_json(self) -> dict[str, Any]:
        body = {item.name: getattr(self, item.name) for item in fields(self)}
        body["refused_by_status"] = {str(code): n for code, n in sorted(self.refused_by_status.items())}
        return body


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
