"""After acceptance: each recipient's SendGrid events, posted to the Signed Event Webhook.

Every accepted recipient gets one background task that creates its events one
step (``step_ms``) apart: ``processed`` then ``delivered`` normally, or what its
fault asks for (bounce, deferrals, a drop, a spam report). Each event is posted
as SendGrid posts it: a JSON array (here of one event), compact UTF-8 followed
by CRLF, signed with ECDSA P-256 over the timestamp header and the exact body
(``herald.providers.sendgrid_signature.sign``). A POST not answered 2xx is
retried with exponential backoff for a bounded number of attempts, then
abandoned and counted; a retry re-signs with a fresh timestamp but keeps the
body, so ``sg_event_id`` stays the same.

Real SendGrid batches events of many messages into one POST; receivers must
accept any array length. Tasks are bounded in time (steps, holds and bounded
retries) and all of them are cancelled when the server stops or is reset.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import ec

from emulator.background import BackgroundPoster
from emulator.esp.config import EspConfig
from emulator.esp.faults import (
    Bounce,
    DeferredThenDelivered,
    DelayedEvents,
    DropAfterData,
    Dropped,
    DuplicateEvents,
    Fault,
    NoEvents,
    OutOfOrderEvents,
    SpamReport,
    Unsubscribe,
)
from emulator.esp.messages import EspStats, EventRecord, MessageRecord, RecipientRecord, WebhookAttempt, new_sg_event_id
from herald.providers.sendgrid_signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

_DELIVERED_RESPONSE = "250 OK"
# What a suppressed address's `dropped` event carries besides the reason.
_DROPPED_STATUS = "5.0.0"


def event_plan(fault: Fault | None) -> list[tuple[str, dict[str, str | int]]]:
    """The events one recipient goes through, each with its event-specific fields."""
    if isinstance(fault, NoEvents) or (isinstance(fault, DropAfterData) and not fault.events):
        return []
    if isinstance(fault, Dropped):
        # Suppressed before processing: SendGrid sends `dropped` instead of `processed`.
        return [("dropped", {"reason": fault.reason, "status": _DROPPED_STATUS})]
    if isinstance(fault, Bounce):
        return [("processed", {}), ("bounce", {"type": fault.type, "status": fault.status, "reason": fault.reason})]
    if isinstance(fault, DeferredThenDelivered):
        # SendGrid sends `attempt` as a string.
        deferrals = [
            ("deferred", {"response": fault.response, "attempt": str(n)}) for n in range(1, fault.deferrals + 1)
        ]
        return [("processed", {}), *deferrals, ("delivered", {"response": _DELIVERED_RESPONSE})]
    if isinstance(fault, SpamReport):
        return [("processed", {}), ("delivered", {"response": _DELIVERED_RESPONSE}), ("spamreport", {})]
    if isinstance(fault, Unsubscribe):
        # SendGrid names the suppression group of a group_unsubscribe (an integer), and none for its own link.
        group: dict[str, str | int] = {"asm_group_id": fault.asm_group_id} if fault.event == "group_unsubscribe" else {}
        return [("processed", {}), ("delivered", {"response": _DELIVERED_RESPONSE}), (fault.event, group)]
    return [("processed", {}), ("delivered", {"response": _DELIVERED_RESPONSE})]


def event_body(
    record: MessageRecord, recipient: RecipientRecord, kind: str, extras: dict[str, str | int]
) -> dict[str, Any]:
    """One event object with SendGrid's fields; the message's unique_args ride along at top level."""
    body: dict[str, Any] = {
        "email": recipient.email,
        "timestamp": int(time.time()),
        "event": kind,
        "sg_event_id": new_sg_event_id(),
        "sg_message_id": recipient.sg_message_id,
        "smtp-id": record.parsed.message_id,
    }
    if record.parsed.category is not None:
        body["category"] = record.parsed.category
    body.update(extras)
    # unique_args never carry a reserved name (the parser drops those), so they cannot overwrite the above.
    body.update(record.parsed.unique_args)
    return body


def webhook_body(event: dict[str, Any]) -> bytes:
    """The exact bytes of one POST: a JSON array, compact UTF-8, then CRLF (as SendGrid sends it)."""
    return json.dumps([event], separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\r\n"


@dataclass(frozen=True)
class _PostPolicy:
    """How a recipient's events are posted, derived from its fault."""

    copies: int = 1
    delay_seconds: float = 0.0
    final_first: bool = False

    @classmethod
    def for_fault(cls, fault: Fault | None) -> _PostPolicy:
        if isinstance(fault, DuplicateEvents):
            return cls(copies=fault.copies)
        if isinstance(fault, DelayedEvents):
            return cls(delay_seconds=fault.seconds)
        if isinstance(fault, OutOfOrderEvents):
            return cls(final_first=True)
        return cls()


class EventPoster(BackgroundPoster):
    """Creates recipients' events and posts them to the webhook; one per emulator instance."""

    def __init__(self, config: EspConfig, stats: EspStats, private_key: ec.EllipticCurvePrivateKey) -> None:
        super().__init__(config.webhook_timeout_seconds)
        self._config = config
        self._stats = stats
        self._private_key = private_key
        # Order in which events start being posted, across messages (what out-of-order tests compare).
        self._post_order = itertools.count(1)

    def launch(self, record: MessageRecord, recipient: RecipientRecord, fault: Fault | None) -> None:
        """Start ``recipient``'s events in the background."""
        self.spawn(self._run(record, recipient, fault), name=f"events-{recipient.sg_message_id}")

    async def _run(self, record: MessageRecord, recipient: RecipientRecord, fault: Fault | None) -> None:
        plan = event_plan(fault)
        policy = _PostPolicy.for_fault(fault)
        step = self._config.step_ms / 1000
        held: list[EventRecord] = []
        async with asyncio.TaskGroup() as posts:
            for index, (kind, extras) in enumerate(plan):
                await asyncio.sleep(step)
                event = EventRecord(body=event_body(record, recipient, kind, extras))
                recipient.events.append(event)
                self._stats.events_created += 1
                if self._config.webhook_url is None:
                    continue
                if policy.final_first:
                    if index < len(plan) - 1:
                        held.append(event)
                        continue
                    # The final event first, and the held ones only once it got its answer.
                    for posted in [event, *held]:
                        await self._post(posted, copy=1, delay=0.0)
                    continue
                for copy in range(1, policy.copies + 1):
                    posts.create_task(self._post(event, copy=copy, delay=policy.delay_seconds))

    async def _post(self, event: EventRecord, copy: int, delay: float) -> None:
        """Post one event, retrying with backoff until a 2xx or the attempts run out."""
        assert self._client is not None and self._config.webhook_url is not None
        if delay:
            await asyncio.sleep(delay)
        if event.posted_seq == 0:
            event.posted_seq = next(self._post_order)
        content = webhook_body(event.body)
        retry_delays = self._config.webhook_retry_delays()
        for attempt_number in range(1, self._config.webhook_max_attempts + 1):
            timestamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(self._private_key, content, timestamp),
                TIMESTAMP_HEADER: timestamp,
                "User-Agent": "SendGrid Event API (herald-esp-emulator)",
            }
            attempt = WebhookAttempt(copy, attempt_number, datetime.now(timezone.utc), timestamp)
            event.attempts.append(attempt)
            self._stats.event_posts += 1
            started = time.monotonic()
            try:
                response = await self.post(self._config.webhook_url, content=content, headers=headers)
                attempt.http_status = response.status_code
            except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
                attempt.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            attempt.duration_ms = round((time.monotonic() - started) * 1000, 1)
            if attempt.succeeded:
                self._stats.event_posts_succeeded += 1
                return
            self._stats.event_posts_failed += 1
            if attempt_number <= len(retry_delays):
                await asyncio.sleep(retry_delays[attempt_number - 1])
        self._stats.events_abandoned += 1
