"""A SendGrid event post before it is stored: whether it is SendGrid's, and the rows it becomes.

``signed_post_refusal`` says why a post is not SendGrid's (unsigned, stale, from the future, or
signed over another body); ``prepare_post`` turns a verified body into inbox rows in lock order (CPU
only: the receipt server runs it in a worker thread); ``stored_summary`` and ``log_rejections``
are what the route answers and logs once the post is stored.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey

from herald.ledger.records import InboxReport
from herald.providers import sendgrid_signature
from herald.providers.sendgrid_events import EventBatch, map_status, parse_events

log = logging.getLogger("herald.receipts")

SENDGRID_PROVIDER = "sendgrid"
# SendGrid posts a batch once it reaches 768 kilobytes: 1 MiB holds any real batch, and no body
# is read past it, so an endless or huge post costs at most this much memory before it is refused.
MAX_SENDGRID_BODY_BYTES = 1024 * 1024
# A signed post is a replay once its timestamp is this old, or a forgery of the future once it is
# this far ahead of our clock (a minute of skew between NTP-synchronised clocks is generous). This
# assumes SendGrid signs each delivery try when it sends it, as webhook senders with a signed
# timestamp do and as the ESP emulator does; SendGrid's documentation does not say. Were a retry
# to carry its first try's timestamp, it would be refused here after five minutes.
SENDGRID_MAX_AGE_SECONDS = 300
SENDGRID_MAX_LEAD_SECONDS = 60
# Whole seconds since the epoch; more digits than this is no time SendGrid could send.
_MAX_TIMESTAMP_DIGITS = 12


def signed_post_refusal(key: EllipticCurvePublicKey | None, headers: Mapping[str, str], body: bytes) -> str | None:
    """Why this post is not SendGrid's, fresh and signed over exactly this body under `key`; None
    when it is."""
    if key is None:
        return "SendGrid events are not accepted: no verification key configured"
    signature = headers.get(sendgrid_signature.SIGNATURE_HEADER)
    timestamp = headers.get(sendgrid_signature.TIMESTAMP_HEADER)
    if not signature or not timestamp:
        return (
            f"{sendgrid_signature.SIGNATURE_HEADER} and {sendgrid_signature.TIMESTAMP_HEADER}: "
            "both required on a signed event post"
        )
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS):
        return f"{sendgrid_signature.TIMESTAMP_HEADER}: must be whole seconds since the epoch"
    age = time.time() - int(timestamp)
    if age > SENDGRID_MAX_AGE_SECONDS:
        return (
            f"{sendgrid_signature.TIMESTAMP_HEADER}: more than {SENDGRID_MAX_AGE_SECONDS} s old; "
            "a replayed post is refused"
        )
    if -age > SENDGRID_MAX_LEAD_SECONDS:
        return f"{sendgrid_signature.TIMESTAMP_HEADER}: more than {SENDGRID_MAX_LEAD_SECONDS} s ahead of our clock"
    if not sendgrid_signature.is_valid_signature(key, body, signature, timestamp):
        return f"{sendgrid_signature.SIGNATURE_HEADER}: does not sign this timestamp and body"
    return None


@dataclass(frozen=True)
class PreparedPost:
    """A verified post as the store takes it: what it held, and our events as inbox rows in lock order."""

    batch: EventBatch
    reports: list[InboxReport]


def prepare_post(body: bytes) -> PreparedPost:
    """Parse a verified body and build its inbox rows (run in a worker thread: CPU only).

    Raises:
        EventBodyError: the body breaks a ``BodyRule``.
    """
    batch = parse_events(body)
    # One order for every post, so two posts holding the same facts take their row locks in the
    # same order and cannot deadlock each other (whatever their batches); within an attempt,
    # lifecycle order.
    ordered = sorted(batch.events, key=lambda e: (e.message_id, e.attempt_ref, map_status(e.event).rank, e.event))
    return PreparedPost(
        batch=batch,
        reports=[
            InboxReport(
                provider=SENDGRID_PROVIDER,
                provider_message_id=event.message_id,
                provider_status=event.event,
                attempt_ref=event.attempt_ref,
                error_code=event.error_code,
                provider_event_at=event.occurred_at,
                payload=event.payload,
            )
            for event in ordered
        ],
    )


def log_rejections(batch: EventBatch) -> None:
    """One line for a post's unstorable events, counted by rule: the rows themselves are in
    receipt_rejections, and a line per event made one bad post thousands of lines."""
    if not batch.unstorable:
        return
    reasons = Counter(rejected.reason for rejected in batch.unstorable)
    log.warning(
        "recorded %d signed %s events as rejections: %s",
        len(batch.unstorable), SENDGRID_PROVIDER, "; ".join(f"{count} {reason}" for reason, count in reasons.most_common()),
    )  # fmt: skip


def stored_summary(batch: EventBatch, stored: int) -> str:
    """The route's answer to a stored post: what was stored, skipped and recorded as rejected."""
    rejected = len(batch.unstorable)
    return (
        f"stored {stored}; skipped {batch.not_ours - rejected} not ours, {batch.not_applicable} not applicable; "
        f"recorded {rejected} unstorable as rejections\n"
    )
