"""Twilio's vocabulary, translated once: error codes and status labels.

``ERROR_CODES`` says, for each Twilio error code Herald knows, what the code
means for *this* message:

    ErrorClass
      ├── PERMANENT  this message to this recipient will never go out; stop trying
      ├── RETRYABLE  not now, but a later attempt can succeed unchanged
      └── CONFIG     our account or sender setup is wrong; the message was not
                     accepted, and once someone fixes the setup it can go out,
                     so the adapter reports it as Retryable with a long delay

The same table serves two readers: the adapter, for the code in a 4xx answer
to a submit, and the workflow, for the ``error_code`` a fetched or reported
message carries (most 30xxx codes only ever arrive that way).

``STATUS_LABELS`` maps every value of the spec's ``message_enum_status`` onto
``ProviderStatus``; a label Twilio adds later maps to ``QUEUED`` (see
``map_status``).

Reasons are short, fixed English sentences: they never echo Twilio's own
``message`` field, which can quote the recipient's number.
"""

from __future__ import annotations

from enum import Enum

from herald.core.outcomes import Frozen, ProviderStatus

# How long a config fix plausibly takes; only a hint, the workflow's retry policy caps it.
CONFIG_RETRY_DELAY_SECONDS = 300.0


class ErrorClass(str, Enum):
    PERMANENT = "permanent"
    RETRYABLE = "retryable"
    CONFIG = "config"


class TwilioErrorCode(Frozen):
    """What one Twilio error code means for the message that got it."""

    classification: ErrorClass
    reason: str
    # Seconds to wait before the next attempt when Twilio documents a window; None means no hint.
    delay_seconds: float | None = None


def _permanent(reason: str) -> TwilioErrorCode:
    return TwilioErrorCode(classification=ErrorClass.PERMANENT, reason=reason)


def _retryable(reason: str, delay_seconds: float | None = None) -> TwilioErrorCode:
    return TwilioErrorCode(classification=ErrorClass.RETRYABLE, reason=reason, delay_seconds=delay_seconds)


def _config(reason: str) -> TwilioErrorCode:
    return TwilioErrorCode(classification=ErrorClass.CONFIG, reason=reason, delay_seconds=CONFIG_RETRY_DELAY_SECONDS)


ERROR_CODES: dict[int, TwilioErrorCode] = {
    # --- REST API, account and request level (arrive as 4xx answers to a request) ---
    20003: _config("authentication failed: account SID or auth token rejected"),
    20404: _config("resource not found: account SID or API base is wrong"),
    20429: _retryable("too many concurrent requests to the Twilio API"),
    # Twilio holds a conversation between the same two numbers for 30 s once the limit trips.
    14107: _retryable("send rate limit between the same two numbers exceeded", delay_seconds=30.0),
    # --- Message creation (arrive as 400 answers to a submit) ---
    21211: _permanent("invalid 'To' phone number"),
    21408: _config("sending to the recipient's region is not enabled on the account (geo permissions)"),
    21602: _permanent("message body is required"),
    21606: _config("the 'From' number is not an SMS-capable number of this account"),
    21608: _config("trial account: the recipient is not a verified number"),
    21610: _permanent("the recipient has opted out (replied STOP) of messages from this sender"),
    21612: _permanent("Twilio cannot route to the 'To' number"),
    21614: _permanent("the 'To' number is not a mobile number"),
    21617: _permanent("message body exceeds the 1600-character limit"),
    # --- Delivery (arrive as a message's error_code, occasionally on a submit) ---
    30001: _retryable("queue overflow at Twilio"),
    30002: _config("the Twilio account is suspended"),
    # Product decision: a handset unreachable for Twilio's whole retry window is treated as gone.
    30003: _permanent("destination handset unreachable"),
    30004: _permanent("message blocked by the recipient or the carrier"),
    30005: _permanent("unknown destination handset"),
    30006: _permanent("landline or unreachable carrier"),
    # Carriers filter on sender and content; the same body from the same sender would be filtered again.
    30007: _permanent("filtered by the carrier"),
    30008: _retryable("unknown error at Twilio or the carrier"),
    # Both are sender-registration gaps: nothing is wrong with the recipient, and registration fixes them.
    30032: _config("toll-free sender is not verified"),
    30034: _config("sender number is not registered for US A2P 10DLC"),
    # ValidityPeriod passed while the message waited in Twilio's queue: it was never sent.
    30036: _retryable("validity period expired in Twilio's queue; the message was never sent"),
}


def classify_error(code: int | None) -> TwilioErrorCode | None:
    """Look a Twilio error code up in ``ERROR_CODES``.

    Args:
        code: The ``code`` of a Twilio error answer or a message's ``error_code``.

    Returns:
        The table entry, or None for a missing or unknown code: the caller then
        decides from what it saw (the HTTP status), never from a guess here.
    """
    if code is None:
        return None
    return ERROR_CODES.get(code)


def is_retryable(code: int | None) -> bool:
    """Whether a failed or undelivered message with this code may be sent again (a retryable class only)."""
    entry = classify_error(code)
    return entry is not None and entry.classification is ErrorClass.RETRYABLE


STATUS_LABELS: dict[str, ProviderStatus] = {
    "accepted": ProviderStatus.QUEUED,  # a Messaging Service took it and is picking a sender
    "scheduled": ProviderStatus.QUEUED,
    "queued": ProviderStatus.QUEUED,
    "sending": ProviderStatus.QUEUED,  # Twilio is still handing it over; no carrier has it yet
    "sent": ProviderStatus.SENT,
    # Some but not all parts reached the handset: the carrier has it, delivery is not settled.
    "partially_delivered": ProviderStatus.SENT,
    "delivered": ProviderStatus.DELIVERED,
    "read": ProviderStatus.DELIVERED,  # WhatsApp only; read implies delivered
    "undelivered": ProviderStatus.UNDELIVERED,
    "failed": ProviderStatus.FAILED,
    "canceled": ProviderStatus.CANCELED,
    # Inbound labels never describe a message we sent; mapped to the non-final floor like unknown labels.
    "receiving": ProviderStatus.QUEUED,
    "received": ProviderStatus.QUEUED,
}


def map_status(label: str | None) -> ProviderStatus:
    """Map a Twilio status label onto ``ProviderStatus``.

    A missing or unrecognised label maps to ``QUEUED``: it is the lowest, non-final
    rank, so a label we do not understand can neither end an attempt nor move a
    known status backwards; the workflow just keeps waiting for a label it knows.

    Args:
        label: The ``status`` field of a Twilio Message resource.

    Returns:
        Herald's status for the label.
    """
    if label is None:
        return ProviderStatus.QUEUED
    return STATUS_LABELS.get(label, ProviderStatus.QUEUED)
