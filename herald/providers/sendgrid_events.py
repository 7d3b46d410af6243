"""SendGrid's Event Webhook vocabulary, translated once: which events are Herald's and what each means.

SendGrid posts a JSON array of event objects for every message of the account, batched (a POST goes
out after about 30 seconds or once the batch reaches 768 kilobytes). ``parse_events`` reads one
verified body and keeps, per event, what Herald needs; nothing else in Herald reads SendGrid's
field names.

    parse_events(body)
      ├── EventBodyError     the body breaks a rule (``BodyRule``): not JSON, not an array,
      │                      more than MAX_EVENTS events, an element that is not an object
      └── EventBatch
            ├── events          ours and applicable, in body order (``SendGridEvent``)
            ├── not_ours        no usable ``herald_attempt`` or ``smtp-id``, or a value the ledger
            │                   cannot hold (see ``unstorable_event_ids``): skipped, never an error,
            │                   because SendGrid posts every event of the account, not just ours
            └── not_applicable  ours, but an event name outside the table below: skipped

Event → ``ProviderStatus`` (the table ``map_status`` reads)::

    event               status       final  meaning
    processed           QUEUED       no     SendGrid took the message and will try to deliver it
    deferred            QUEUED       no     the receiving server said "not now"; SendGrid keeps
                                            trying (for up to 72 hours), so the message is still
                                            at the ESP
    delivered           DELIVERED    yes    the receiving server accepted the message
    open                DELIVERED    yes    }
    click               DELIVERED    yes    }  engagement: evidence that the message reached the
    spamreport          DELIVERED    yes    }  mailbox (see below)
    unsubscribe         DELIVERED    yes    }
    group_unsubscribe   DELIVERED    yes    }
    group_resubscribe   DELIVERED    yes    }
    bounce              UNDELIVERED  yes    the receiving server refused it (``type`` bounce: the
                                            address; ``type`` blocked: the message or our sender)
    dropped             FAILED       yes    SendGrid never sent it (suppressed or invalid address)
    anything else       not applicable: skipped, answered 2xx, never stored

Why engagement events mean DELIVERED: each one is set off by something only a message sitting in a
mailbox can cause. ``open`` is the tracking pixel fetched from the message, ``click`` a tracked link
in it followed, ``spamreport`` the mailbox provider's feedback loop reporting that the recipient
pressed "this is spam" on it, ``unsubscribe`` / ``group_unsubscribe`` / ``group_resubscribe`` the
unsubscribe or preferences link in it (or its List-Unsubscribe header, which mail clients offer
only for a received message). And each carries our ``herald_attempt``, which SendGrid stamps only
into this message's tracking, so it is evidence about this attempt even when its ``delivered``
event was lost or comes later. None of them proves that a person read the message (privacy proxies
fetch pixels, security gateways follow links): Herald claims delivery, never reading.

``unsubscribe`` and ``group_unsubscribe`` are also the person's request (``UNSUBSCRIBE_EVENTS``):
``unsubscribes`` reads them as such, and the receipt route records each under the attempt's intent
(``herald.ledger.esp_unsubscribes``), for the intent's category, so the policy gate stops that
category to them as it does after a one-click unsubscribe. ``group_resubscribe`` is recorded as
evidence only: it lifts nothing (an opt-in would lift bounces and complaints too).

Error codes. SendGrid gives a bounce (and a drop) an RFC 3463 enhanced status such as ``5.1.1`` or
``4.2.2`` in ``status``. ``error_code_of`` encodes it as ``class*100 + subject*10 + detail`` when
the class is 2, 4 or 5 and subject and detail are single digits (``5.1.1`` → 511, ``4.2.2`` → 422),
so the ledger's integer column holds it and it still reads as the status it came from; anything else
(``5.7.26``, missing, malformed) is None. The raw status stays in the stored payload. The numbers
share the ``error_code`` column with Twilio's codes but not their meaning: the inbox row's
``provider`` says whose code it is.

Retryable (classified here, at the receipt edge; the workflow reads no provider table): a
``bounce`` or ``dropped`` whose status class is 4 (a persistent transient failure in RFC 3463's
words) may be retried; every other failure may not. A ``blocked`` bounce gets no rule of its own.
SendGrid documents a block as a refusal "because of an issue with the message itself rather than an
issue with the recipient's address" (our sending IP's reputation, a content filter), and does not
suppress the address. Whether a later copy can pass is what the receiving server's status class
says: ``4.7.x`` (a temporary reputation or rate block) is retryable, ``5.7.x`` (refused by policy)
is not, because the same content from the same sender would be refused again (Twilio's table makes
the same call for carrier filtering, 30007). A block without a status, or with one we cannot
encode, is not retryable: without the server's word that it is transient, not sending again is the
side that cannot cause a duplicate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from herald.core.outcomes import Frozen, ProviderStatus
from herald.ledger.esp_unsubscribes import EventUnsubscribe

# The unique_args key the ESP echoes in its events (the SMTP adapter sets it on every message):
# our attempt reference.
REFERENCE_ARG = "herald_attempt"

# SendGrid posts once a batch reaches 768 kilobytes, so a real batch of its smallest events
# (about 150 bytes each) holds about 5,000 of them; the count bounds the work one POST can ask
# for without refusing a batch SendGrid really sends (a refused batch is retried for 24 hours,
# then lost). The byte cap on the body (the receipt endpoint's) bounds memory.
MAX_EVENTS = 5_000
# A Message-ID is a header: RFC 5322 caps a header line at 998 characters, so a longer smtp-id is
# not one of ours, and the ledger is not the place to keep it.
MAX_MESSAGE_ID_CHARS = 998
# SendGrid documents sg_event_id as up to 100 characters; logs get no more than that.
_MAX_LOGGED_EVENT_ID_CHARS = 100
# The attempt reference as the SMTP adapter writes it (EmailSubmission.attempt_ref).
_ATTEMPT_REF = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ENHANCED_STATUS = re.compile(r"([245])\.([0-9])\.([0-9])")
# What the inbox keeps of an event: the fields Herald reads and those an operator needs to explain
# the verdict drawn from it. A keep-list, not a drop-list, because an event carries more than
# SendGrid's documented fields: every unique arg and custom arg of the message rides at its top level
# (whatever another sender on the account put there), and SendGrid adds fields over time (``phone``,
# ``name``), so a field nobody named here is left out rather than stored by default.
STORED_FIELDS = frozenset(
    {
        "event",  # the label the status is read from (also the row's provider_status)
        "timestamp",  # when SendGrid says it happened (also provider_event_at)
        "sg_event_id",  # SendGrid's id of this event: what its support and its logs know it by
        "sg_message_id",  # SendGrid's id of the message: the Email Activity feed's key
        REFERENCE_ARG,  # our one unique arg: the attempt the event is about (also attempt_ref)
        "status",  # bounce, dropped: the enhanced status the error code is read from
        "type",  # bounce: "bounce" (the address) or "blocked" (the message or our sender)
        "bounce_classification",  # bounce: SendGrid's class of the refusal (Invalid Address, Reputation, ...)
        "reason",  # bounce, dropped: why, in the receiving server's or SendGrid's words (addresses masked)
        "response",  # delivered, deferred: the receiving server's SMTP reply (addresses masked)
        "attempt",  # deferred: how many times SendGrid has tried so far
        "tls",  # whether the hand-over to the receiving server used TLS (1 or 0)
        "pool",  # the IP pool SendGrid sent from (ours): what a reputation block is about
    }
)
# Left out on purpose, although Herald matches on it: ``smtp-id`` (our Message-ID, stored verbatim in
# the row's provider_message_id). And ``ip``: on an engagement event it is the recipient's device's
# address; on a delivery event SendGrid's sending address, which ``pool`` names well enough.

# An e-mail address inside kept text. SMTP replies quote the recipient ("550 5.1.1 <user@example.com>:
# Recipient address rejected"), and that reply is the best explanation of a bounce there is, so the
# text is kept and every address in it is replaced by ADDRESS_MARKER rather than the field dropped.
# Deliberately wider than an address: every whitespace-delimited word holding an '@' is replaced
# whole (brackets and punctuation around it too), after a quoted local part ("john doe"@example.com)
# is folded into its '@', so no '@' is left anywhere in a stored payload. Linear in the text (no
# pattern that can backtrack over a long reply). An address written without an '@' is not caught.
ADDRESS_MARKER = "[address]"
_QUOTED_LOCAL_PART = re.compile(r'"[^"]*"@')
_WHITESPACE = re.compile(r"(\s+)")

EVENT_STATUSES: Mapping[str, ProviderStatus] = {
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
_FAILURE_EVENTS = frozenset({"bounce", "dropped"})
# Events that are also the recipient's request: they left through a link in the message.
UNSUBSCRIBE_EVENTS = frozenset({"unsubscribe", "group_unsubscribe"})
# recipient_requests.source_ref's bound; an event id past it is not SendGrid's shape.
_MAX_REQUEST_REF_CHARS = 200


class BodyRule(str, Enum):
    """The rules a webhook body must follow; a broken one is named in the refusal."""

    NOT_JSON = "body must be JSON (UTF-8, no NaN or Infinity)"
    NOT_AN_ARRAY = "body must be a JSON array of events"
    TOO_MANY_EVENTS = f"body must hold at most {MAX_EVENTS} events"
    EVENT_NOT_AN_OBJECT = "every event must be a JSON object"


class EventBodyError(ValueError):
    """A verified body that breaks a ``BodyRule``; the message names the rule (never the content)."""

    def __init__(self, rule: BodyRule, detail: str = "") -> None:
        self.rule = rule
        super().__init__(f"SendGrid event body refused: {rule.value}{f' ({detail})' if detail else ''}")


class SendGridEvent(Frozen):
    """One of our events, as the inbox stores it."""

    event: str
    # Our Message-ID as SendGrid echoes it in smtp-id, angle brackets included (SmtpAdapter.message_id).
    message_id: str
    attempt_ref: str
    occurred_at: datetime | None = None
    sg_event_id: str | None = None
    # bounce, dropped (deferred, should it carry one): the enhanced status as sent ("5.1.1") and
    # its encoding (error_code_of).
    enhanced_status: str | None = None
    error_code: int | None = None
    # bounce only: "bounce" or "blocked".
    bounce_type: str | None = None
    # group_unsubscribe, group_resubscribe: the suppression group (asm_group_id), named in the request.
    group_id: int | None = None
    # What the inbox keeps of the event (stored_payload).
    payload: dict[str, Any]


class UnstorableEvent(Frozen):
    """One of our events holding a value the ledger cannot store; kept as a rejection with the rule."""

    attempt_ref: str
    event_id: str  # sg_event_id cut short, or "?"
    reason: str  # the field and the rule, never the value
    payload: dict[str, Any]  # what the inbox would have kept of it (stored_payload)


class EventBatch(Frozen):
    """What one webhook body held for Herald."""

    events: list[SendGridEvent]
    not_ours: int = 0
    not_applicable: int = 0
    # sg_event_id of each event skipped because the ledger cannot hold one of its values (counted
    # in not_ours); "?" when the event had none. The only thing about them that may be logged.
    unstorable_event_ids: tuple[str, ...] = ()
    unstorable: tuple[UnstorableEvent, ...] = ()


def parse_events(body: bytes) -> EventBatch:
    """Read one webhook body (already verified) into the events that are Herald's.

    Raises:
        EventBodyError: the body breaks a ``BodyRule``.
    """
    try:
        document = json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise EventBodyError(BodyRule.NOT_JSON, type(error).__name__) from None
    if not isinstance(document, list):
        raise EventBodyError(BodyRule.NOT_AN_ARRAY, f"got a JSON {_json_type(document)}")
    if len(document) > MAX_EVENTS:
        raise EventBodyError(BodyRule.TOO_MANY_EVENTS, f"got {len(document)}")
    for index, item in enumerate(document):
        if not isinstance(item, dict):
            raise EventBodyError(BodyRule.EVENT_NOT_AN_OBJECT, f"element {index} is a JSON {_json_type(item)}")
    events: list[SendGridEvent] = []
    not_ours = not_applicable = 0
    unstorable: list[str] = []
    for item in document:
        ref, message_id = item.get(REFERENCE_ARG), item.get("smtp-id")
        if (
            not isinstance(ref, str)
            or not _ATTEMPT_REF.fullmatch(ref)
            or not isinstance(message_id, str)
            or not message_id
        ):
            not_ours += 1
            continue
        payload = stored_payload(item)
        reason = _unstorable_reason(message_id, payload)
        if reason is not None:
            # PostgreSQL's text and jsonb cannot hold NUL: storing it would fail the whole batch.
            not_ours += 1
            unstorable.append(
                UnstorableEvent(
                    attempt_ref=ref,
                    event_id=_loggable_event_id(item.get("sg_event_id")),
                    reason=reason,
                    payload=payload,
                )
            )
            continue
        name = item.get("event")
        if not isinstance(name, str) or name not in EVENT_STATUSES:
            not_applicable += 1
            continue
        events.append(_event(item, name, ref, message_id, payload))
    return EventBatch(
        events=events,
        not_ours=not_ours,
        not_applicable=not_applicable,
        unstorable_event_ids=tuple(u.event_id for u in unstorable),
        unstorable=tuple(unstorable),
    )


def _unstorable_reason(message_id: str, payload: dict[str, Any]) -> str | None:
    if len(message_id) > MAX_MESSAGE_ID_CHARS:
        return f"smtp-id: longer than {MAX_MESSAGE_ID_CHARS} characters"
    if "\x00" in message_id:
        return "smtp-id: holds a NUL character, which the ledger cannot store"
    if _holds(payload, "\x00"):
        return "a field holds a NUL character, which the ledger cannot store"
    return None


def _event(item: dict[str, Any], name: str, ref: str, message_id: str, payload: dict[str, Any]) -> SendGridEvent:
    status = item.get("status")
    enhanced_status = status if isinstance(status, str) else None
    bounce_type = item.get("type") if name == "bounce" else None
    sg_event_id = item.get("sg_event_id")
    group = item.get("asm_group_id")
    return SendGridEvent(
        event=name,
        message_id=message_id,
        attempt_ref=ref,
        occurred_at=_timestamp(item.get("timestamp")),
        sg_event_id=sg_event_id if isinstance(sg_event_id, str) else None,
        enhanced_status=enhanced_status,
        error_code=error_code_of(enhanced_status),
        bounce_type=bounce_type if isinstance(bounce_type, str) else None,
        group_id=group if isinstance(group, int) and not isinstance(group, bool) else None,
        payload=payload,
    )


def unsubscribes(events: Sequence[SendGridEvent], received_at: datetime) -> list[EventUnsubscribe]:
    """The unsubscribe requests among our events: one per event, referenced by its ``sg_event_id``
    (by attempt and event name when it has none usable: one per attempt and kind then), at the
    event's time (the post's arrival when it has none)."""
    found = []
    for event in events:
        if event.event not in UNSUBSCRIBE_EVENTS:
            continue
        event_id = event.sg_event_id
        usable = event_id is not None and 1 <= len(event_id) <= _MAX_REQUEST_REF_CHARS
        in_group = f" (group {event.group_id})" if event.group_id is not None else ""
        found.append(
            EventUnsubscribe(
                attempt_ref=event.attempt_ref,
                source_ref=event_id if usable and event_id is not None else f"{event.attempt_ref}/{event.event}",
                detail=f"SendGrid {event.event}{in_group}"[:_MAX_REQUEST_REF_CHARS],
                requested_at=event.occurred_at or received_at,
            )
        )
    return found


def map_status(label: str | None) -> ProviderStatus:
    """Map a SendGrid event name onto ``ProviderStatus``.

    A name outside the table maps to ``QUEUED``, the lowest non-final rank (as Twilio's unknown
    labels do): it can neither end an attempt nor move a known status backwards. The endpoint
    stores no such event; this only keeps a reader of an odd inbox row safe.
    """
    if label is None:
        return ProviderStatus.QUEUED
    return EVENT_STATUSES.get(label, ProviderStatus.QUEUED)


def is_applicable(label: str) -> bool:
    """Whether an event name says anything about delivery (is in the table)."""
    return label in EVENT_STATUSES


def error_code_of(status: str | None) -> int | None:
    """Encode an enhanced status ``C.S.D`` as ``C*100 + S*10 + D`` (``"5.1.1"`` → 511); else None."""
    if status is None:
        return None
    match = _ENHANCED_STATUS.fullmatch(status)
    if match is None:
        return None
    klass, subject, detail = (int(part) for part in match.groups())
    return klass * 100 + subject * 10 + detail


def is_retryable(label: str, error_code: int | None) -> bool:
    """Whether a failed message may be sent again: a bounce or drop with a class-4 (transient) status."""
    return label in _FAILURE_EVENTS and error_code is not None and 400 <= error_code < 500


def stored_payload(item: dict[str, Any]) -> dict[str, Any]:
    """The event as the inbox keeps it: only the STORED_FIELDS, with every e-mail address in their
    text replaced by ADDRESS_MARKER."""
    return {key: _mask_addresses(value) for key, value in item.items() if key in STORED_FIELDS}


# How deep a kept field may nest (SendGrid's deepest, `pool`, is one object): below this a value is
# replaced by TOO_DEEP, so no signed post, however nested, can exhaust the stack of its parser.
MAX_STORED_DEPTH = 8
TOO_DEEP = "(dropped: nested deeper than 8 levels)"


def _mask_addresses(value: Any, depth: int = 0) -> Any:
    """``value`` with every address in its strings (keys included) replaced by ADDRESS_MARKER, and
    anything nested deeper than MAX_STORED_DEPTH replaced by TOO_DEEP."""
    if isinstance(value, str):
        return _mask_text(value)
    if isinstance(value, dict | list) and depth >= MAX_STORED_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        return {_mask_text(key): _mask_addresses(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_mask_addresses(item, depth + 1) for item in value]
    return value


def _mask_text(text: str) -> str:
    if "@" not in text:
        return text
    words = _WHITESPACE.split(_QUOTED_LOCAL_PART.sub("@", text))
    return "".join(ADDRESS_MARKER if "@" in word else word for word in words)


def _timestamp(value: Any) -> datetime | None:
    """SendGrid's ``timestamp`` is whole seconds since the epoch; anything else is left out."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _holds(value: Any, text: str) -> bool:
    """Whether ``text`` appears in any string of a JSON value (keys included)."""
    if isinstance(value, str):
        return text in value
    if isinstance(value, dict):
        return any(text in key or _holds(item, text) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds(item, text) for item in value)
    return False


def _loggable_event_id(value: Any) -> str:
    return value[:_MAX_LOGGED_EVENT_ID_CHARS] if isinstance(value, str) else "?"


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON (RFC 8259), and PostgreSQL's jsonb refuses them.
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("a number too large for a float")
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
