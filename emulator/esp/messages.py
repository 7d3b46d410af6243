"""What the ESP emulator accepted: message records, their events, the store and the counters.

This is the test oracle. A ``MessageRecord`` holds what one accepted SMTP
transaction carried (envelope, parsed headers, the text and HTML parts, the MIME
tree, attachment hashes) and, per
recipient, the ``sg_message_id`` and every webhook event with each POST
attempt and its answer. Bytes are not kept: the raw message and attachments
are reduced to sizes and SHA-256 digests so memory stays bounded.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import uuid
from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import make_msgid
from typing import Any

SMTPAPI_HEADER = "X-SMTPAPI"
# Event fields SendGrid sets itself; a unique_arg of the same name must not overwrite them.
RESERVED_EVENT_FIELDS = frozenset(
    {
        "email", "timestamp", "event", "sg_event_id", "sg_message_id", "smtp-id", "category", "response",
        "attempt", "type", "status", "reason", "asm_group_id", "ip", "tls", "useragent", "url", "pool",
    }
)  # fmt: skip
# Decoding the headers of a hostile message can raise deep inside the email package; none of these
# may turn into a 500-style SMTP reply.
_HEADER_ERRORS = (ValueError, TypeError, IndexError, LookupError, AttributeError)


def new_x_message_id() -> str:
    """SendGrid's X-Message-Id shape: 22 URL-safe characters (16 random bytes, base64url, unpadded)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def new_sg_event_id() -> str:
    """SendGrid documents ``sg_event_id`` as a base64url-encoded UUIDv4."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()


@dataclass
class WebhookAttempt:
    """One HTTP POST carrying one event."""

    copy: int  # 1-based; >1 only under duplicate_events
    attempt: int  # 1-based try number of this copy
    started_at: datetime
    timestamp_header: str
    http_status: int | None = None
    error: str | None = None  # connection error or timeout, when there was no HTTP answer
    duration_ms: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300

    def oracle(self) -> dict[str, Any]:
        return {
            "copy": self.copy,
            "attempt": self.attempt,
            "started_at": self.started_at.isoformat(),
            "timestamp_header": self.timestamp_header,
            "http_status": self.http_status,
            "error": self.error,
            "duration_ms": self.duration_ms,
        }


@dataclass
class EventRecord:
    """One webhook event as posted, and every POST that carried it."""

    body: dict[str, Any]
    # Order in which this emulator started posting events, across all messages (0 = never posted).
    posted_seq: int = 0
    attempts: list[WebhookAttempt] = field(default_factory=list)
    # When the event happened, to the microsecond (its `timestamp` has whole seconds): the Activity
    # feed shows an event only once its lag has passed since this instant.
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def delivered(self) -> bool:
        return any(attempt.succeeded for attempt in self.attempts)

    def oracle(self) -> dict[str, Any]:
        return {
            "event": self.body,
            "created_at": self.created_at.isoformat(),
            "posted_seq": self.posted_seq,
            "delivered": self.delivered,
            "attempts": [attempt.oracle() for attempt in self.attempts],
        }


@dataclass
class RecipientRecord:
    """One envelope recipient of an accepted message: SendGrid tracks events per recipient."""

    email: str
    sg_message_id: str
    fault: str | None
    events: list[EventRecord] = field(default_factory=list)

    def oracle(self) -> dict[str, Any]:
        return {
            "email": self.email,
            "sg_message_id": self.sg_message_id,
            "fault": self.fault,
            "events": [event.oracle() for event in self.events],
        }


@dataclass(frozen=True)
class Attachment:
    filename: str | None
    content_type: str
    size: int
    sha256: str

    def oracle(self) -> dict[str, Any]:
        return {"filename": self.filename, "content_type": self.content_type, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class ParsedMessage:
    """What the emulator keeps of a message's bytes."""

    message_id: str
    message_id_generated: bool
    subject: str | None
    headers: tuple[tuple[str, str], ...]
    smtpapi: dict[str, Any] | None
    smtpapi_error: str | None
    unique_args: dict[str, str]
    category: str | list[str] | None
    text_body: str | None
    text_body_truncated: bool
    # The text/html part as sent (None: there is none), bounded like the text part.
    html_body: str | None
    html_body_truncated: bool
    # The MIME tree by content type, e.g. multipart/mixed(multipart/alternative(text/plain,text/html),application/pdf).
    structure: str
    attachments: tuple[Attachment, ...]
    size: int
    sha256: str


@dataclass
class MessageRecord:
    """One accepted SMTP transaction and everything that happened to it since."""

    seq: int
    x_message_id: str
    mail_from: str
    accepted_at: datetime
    fault: str | None
    parsed: ParsedMessage
    recipients: list[RecipientRecord]
    # The SMTP client's address (the Activity API's originating_ip); None when the socket did not say.
    client_ip: str | None = None

    def oracle(self) -> dict[str, Any]:
        """The admin view: everything a test needs to judge what really happened."""
        parsed = self.parsed
        return {
            "seq": self.seq,
            "x_message_id": self.x_message_id,
            "mail_from": self.mail_from,
            "rcpt_to": [recipient.email for recipient in self.recipients],
            "accepted_at": self.accepted_at.isoformat(),
            "client_ip": self.client_ip,
            "fault": self.fault,
            "message_id": parsed.message_id,
            "message_id_generated": parsed.message_id_generated,
            "subject": parsed.subject,
            "headers": [list(pair) for pair in parsed.headers],
            "smtpapi": parsed.smtpapi,
            "smtpapi_error": parsed.smtpapi_error,
            "unique_args": parsed.unique_args,
            "category": parsed.category,
            "text_body": parsed.text_body,
            "text_body_truncated": parsed.text_body_truncated,
            "html_body": parsed.html_body,
            "html_body_truncated": parsed.html_body_truncated,
            "structure": parsed.structure,
            "attachments": [attachment.oracle() for attachment in parsed.attachments],
            "size": parsed.size,
            "sha256": parsed.sha256,
            "recipients": [recipient.oracle() for recipient in self.recipients],
        }


def parse_message(raw: bytes, x_message_id: str, max_body_chars: int) -> ParsedMessage:
    """Reduce ``raw`` (the DATA bytes) to what the oracle keeps; never raises on hostile input."""
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    headers = tuple((name, _header_text(message, name, value)) for name, value in message.raw_items())
    raw_message_id = _first_header(headers, "Message-ID")
    # SendGrid adds a Message-ID when the client sent none; events' smtp-id carries it either way.
    message_id = raw_message_id.strip() if raw_message_id else make_msgid(x_message_id, "esp-emulator.localhost")
    smtpapi, smtpapi_error = _parse_smtpapi(_first_header(headers, SMTPAPI_HEADER))
    unique_args, category = _echoed_fields(smtpapi)
    text_body = _body(message, "plain")
    html_body = _body(message, "html")
    return ParsedMessage(
        message_id=message_id,
        message_id_generated=raw_message_id is None,
        subject=_first_header(headers, "Subject"),
        headers=headers,
        smtpapi=smtpapi,
        smtpapi_error=smtpapi_error,
        unique_args=unique_args,
        category=category,
        text_body=text_body[:max_body_chars] if text_body is not None else None,
        text_body_truncated=text_body is not None and len(text_body) > max_body_chars,
        html_body=html_body[:max_body_chars] if html_body is not None else None,
        html_body_truncated=html_body is not None and len(html_body) > max_body_chars,
        structure=_structure(message),
        attachments=_attachments(message),
        size=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def _header_text(message: EmailMessage, name: str, value: str) -> str:
    """The decoded header value (RFC 2047 words decoded), or the raw text when it cannot be decoded."""
    try:
        return str(message.policy.header_fetch_parse(name, value))
    except _HEADER_ERRORS:
        return value


def _first_header(headers: tuple[tuple[str, str], ...], wanted: str) -> str | None:
    return next((value for name, value in headers if name.lower() == wanted.lower()), None)


def _parse_smtpapi(value: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The X-SMTPAPI header as JSON, or why it is not a JSON object."""
    if value is None:
        return None, None
    try:
        parsed = json.loads(value)
    except ValueError as error:
        return None, f"X-SMTPAPI is not JSON: {error}"
    if not isinstance(parsed, dict):
        return None, "X-SMTPAPI must be a JSON object"
    return parsed, None


def _echoed_fields(smtpapi: dict[str, Any] | None) -> tuple[dict[str, str], str | list[str] | None]:
    """The unique_args SendGrid echoes into every event (string values only) and the category."""
    if smtpapi is None:
        return {}, None
    raw_args = smtpapi.get("unique_args")
    unique_args = (
        {
            key: value
            for key, value in raw_args.items()
            if isinstance(key, str) and isinstance(value, str) and key not in RESERVED_EVENT_FIELDS
        }
        if isinstance(raw_args, dict)
        else {}
    )
    category = smtpapi.get("category")
    if isinstance(category, list):
        category = [item for item in category if isinstance(item, str)] or None
    elif not isinstance(category, str):
        category = None
    return unique_args, category


def _body(message: EmailMessage, subtype: str) -> str | None:
    """The message's text/`subtype` body part as a client would pick it, or None."""
    try:
        body = message.get_body(preferencelist=(subtype,))
        return body.get_content() if body is not None else None
    except (*_HEADER_ERRORS, KeyError):
        return None


def _structure(part: EmailMessage, depth: int = 0) -> str:
    """The MIME tree by content type, children in order (nesting bounded: the input is anyone's)."""
    if not part.is_multipart() or depth >= 8:
        return part.get_content_type()
    children = part.get_payload()
    inner = ",".join(_structure(child, depth + 1) for child in children if isinstance(child, EmailMessage))
    return f"{part.get_content_type()}({inner})"


def _attachments(message: EmailMessage) -> tuple[Attachment, ...]:
    """Every part marked as an attachment (at any depth), as name, type, size and SHA-256 only."""
    found: list[Attachment] = []
    for part in message.walk():
        if part.is_multipart() or part.get_content_disposition() != "attachment":
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        try:
            filename = part.get_filename()
        except _HEADER_ERRORS:
            filename = None
        found.append(Attachment(filename, part.get_content_type(), len(data), hashlib.sha256(data).hexdigest()))
    return tuple(found)


class MessageStore:
    """Every accepted message of one emulator instance, in acceptance order."""

    def __init__(self) -> None:
        self._records: list[MessageRecord] = []
        self._next_seq = 0

    def __len__(self) -> int:
        return len(self._records)

    def next_seq(self) -> int:
        self._next_seq += 1
        return self._next_seq

    def add(self, record: MessageRecord) -> None:
        self._records.append(record)

    def clear(self) -> None:
        self._records.clear()

    def oldest_first(self, to: str | None = None) -> list[MessageRecord]:
        """Every message, or those with ``to`` among their recipients (case-insensitive)."""
        if to is None:
            return list(self._records)
        wanted = to.lower()
        return [record for record in self._records if any(r.email.lower() == wanted for r in record.recipients)]


@dataclass
class EspStats:
    """Counters the admin API reports at ``GET /_esp/stats``."""

    accepted_messages: int = 0
    accepted_recipients: int = 0
    # SMTP refusals this emulator decided (faults, AUTH, store full), by reply code.
    refused_by_code: Counter[int] = field(default_factory=Counter)
    auth_failures: int = 0
    dropped_connections: int = 0  # drop_after_data: accepted, no reply
    # drop_during_data: hung up after the final dot without storing the message; a refusal without a code.
    dropped_during_data: int = 0
    slow_replies: int = 0
    # Accepted messages per Message-ID: more than one means the client sent the same message again.
    accepted_by_message_id: Counter[str] = field(default_factory=Counter)
    events_created: int = 0
    event_posts: int = 0  # HTTP attempts, copies and retries included
    event_posts_succeeded: int = 0
    event_posts_failed: int = 0  # attempts with a non-2xx answer or no answer
    events_abandoned: int = 0  # event copies given up after the last attempt
    # Email Activity API requests (/v3/messages*), every answer included, and their answers by status.
    activity_requests: int = 0
    activity_answers_by_code: Counter[int] = field(default_factory=Counter)

    def reset(self) -> None:
        """Zero every counter in place (the SMTP handler and event poster hold this object)."""
        fresh = EspStats()
        for item in fields(self):
            setattr(self, item.name, getattr(fresh, item.name))

    def refuse(self, code: int) -> None:
        self.refused_by_code[code] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted_messages,
            "accepted_recipients": self.accepted_recipients,
            "refused_by_code": {str(code): count for code, count in sorted(self.refused_by_code.items())},
            # Every transaction the relay did not accept: refused with a code, or dropped before storing.
            "refused": sum(self.refused_by_code.values()) + self.dropped_during_data,
            "auth_failures": self.auth_failures,
            "dropped_connections": self.dropped_connections,
            "dropped_during_data": self.dropped_during_data,
            "slow_replies": self.slow_replies,
            "accepted_by_message_id": dict(self.accepted_by_message_id),
            "events": {
                "created": self.events_created,
                "posts": self.event_posts,
                "posts_succeeded": self.event_posts_succeeded,
                "posts_failed": self.event_posts_failed,
                "abandoned": self.events_abandoned,
            },
            "activity_requests": self.activity_requests,
            "activity_answers_by_code": {
                str(code): count for code, count in sorted(self.activity_answers_by_code.items())
            },
        }
