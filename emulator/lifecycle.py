"""After acceptance: the message's status lifecycle and its signed status callbacks.

Every accepted message gets one background task that walks it through
``queued -> sending -> sent -> delivered`` (or ``undelivered`` / ``failed``),
one step every ``step_ms``. Like Twilio, it reports ``sent`` and the final
status to the message's ``StatusCallback`` URL as a form POST signed with
``X-Twilio-Signature``. A callback the receiver does not answer with 2xx is
retried with exponential backoff for a bounded number of attempts, so a
receiver that was briefly down still gets every report.

Tasks are bounded in time (steps plus bounded retries) and all of them are
cancelled when the app shuts down or the emulator is reset.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlencode

import httpx

from emulator.background import BackgroundPoster
from emulator.config import EmulatorConfig
from emulator.faults import (
    AcceptThenHang,
    DelayedCallback,
    DuplicateCallbacks,
    Failed,
    Fault,
    NoCallback,
    OutOfOrderCallbacks,
    Silent,
    Undelivered,
)
from emulator.messages import (
    API_VERSION,
    FINAL_STATUSES,
    CallbackAttempt,
    MessageRecord,
    count_segments,
)
from emulator.stats import EmulatorStats
from herald.providers.twilio_signature import compute_signature


# Twilio reports these two moments of an outbound SMS to the StatusCallback URL.
_REPORTED_STATUSES = frozenset({"sent"}) | FINAL_STATUSES
# Twilio's code for a message dropped because it outstayed its ValidityPeriod in the queue.
VALIDITY_EXPIRED_CODE = 30036


@dataclass(frozen=True)
class _CallbackPolicy:
    """How a message's callbacks are sent, derived from its fault."""

    enabled: bool = True
    copies: int = 1
    delay_seconds: float = 0.0
    final_first: bool = False

    @classmethod
    def for_fault(cls, fault: Fault | None) -> _CallbackPolicy:
        if isinstance(fault, (NoCallback, Silent)) or (isinstance(fault, AcceptThenHang) and not fault.callbacks):
            return cls(enabled=False)
        if isinstance(fault, DuplicateCallbacks):
            return cls(copies=fault.copies)
        if isinstance(fault, DelayedCallback):
            return cls(delay_seconds=fault.delay_seconds)
        if isinstance(fault, OutOfOrderCallbacks):
            return cls(final_first=True)
        return cls()


def _status_plan(fault: Fault | None) -> list[tuple[str, int | None]]:
    """The statuses a message moves through after ``queued``, with the error code of each."""
    if isinstance(fault, Silent):
        return [("sending", None), ("sent", None)]
    if isinstance(fault, Failed):
        # A failed message never reached the carrier, so it is never ``sent``.
        return [("sending", None), ("failed", fault.code)]
    if isinstance(fault, Undelivered):
        return [("sending", None), ("sent", None), ("undelivered", fault.code)]
    return [("sending", None), ("sent", None), ("delivered", None)]


def callback_params(record: MessageRecord, status: str, at: datetime) -> list[tuple[str, str]]:
    """The form parameters of Twilio's status callback for ``record`` reaching ``status``."""
    params = [
        ("MessageSid", record.sid),
        ("SmsSid", record.sid),
        ("AccountSid", record.account_sid),
        ("From", record.from_ or ""),
        ("To", record.to),
        ("MessageStatus", status),
        ("SmsStatus", status),
        ("ApiVersion", API_VERSION),
    ]
    if record.messaging_service_sid:
        params.append(("MessagingServiceSid", record.messaging_service_sid))
    if status in ("undelivered", "failed") and record.error_code is not None:
        params.append(("ErrorCode", str(record.error_code)))
    if status in ("delivered", "undelivered"):
        # The carrier's delivery-report time, YYMMDDhhmm in GMT.
        params.append(("RawDlrDoneDate", at.astimezone(timezone.utc).strftime("%y%m%d%H%M")))
    return params


class Lifecycle(BackgroundPoster):
    """Runs message lifecycles and delivers their callbacks; one per app instance."""

    def __init__(self, config: EmulatorConfig, stats: EmulatorStats) -> None:
        super().__init__(config.callback_timeout_seconds)
        self._config = config
        self._stats = stats

    def launch(self, record: MessageRecord, fault: Fault | None) -> asyncio.Task[None]:
        """Start ``record``'s lifecycle in the background."""
        return self.spawn(self._run(record, fault), name=f"lifecycle-{record.sid}")

    async def run_to_completion(self, record: MessageRecord, fault: Fault | None) -> None:
        """Run ``record``'s lifecycle and wait until its last callback got its answer."""
        task = self.launch(record, fault)
        # wait() neither cancels the lifecycle if this request is cancelled nor raises if a reset cancels it.
        await asyncio.wait({task})

    async def _run(self, record: MessageRecord, fault: Fault | None) -> None:
        policy = _CallbackPolicy.for_fault(fault)
        step = self._config.step_ms / 1000
        held: list[tuple[str, list[tuple[str, str]]]] = []
        plan = _status_plan(fault)
        queue_seconds = fault.queue_seconds if isinstance(fault, AcceptThenHang) else 0.0
        if queue_seconds > 0:
            # In the sender's queue: still `queued`, no date_sent. Twilio drops it once it has waited
            # longer than its ValidityPeriod since creation, and reports that as failed.
            if queue_seconds > record.validity_seconds:
                await asyncio.sleep(record.validity_seconds)
                plan = [("failed", VALIDITY_EXPIRED_CODE)]
            else:
                await asyncio.sleep(queue_seconds)
        async with asyncio.TaskGroup() as deliveries:
            for status, error_code in plan:
                await asyncio.sleep(step)
                now = datetime.now(timezone.utc)
                if status == "sending" and record.from_ is None:
                    # The Messaging Service "picks" a sender when the message leaves the queue.
                    record.from_ = self._config.service_sender
                    record.num_segments = str(count_segments(record.body))
                record.advance(status, now, error_code)
                if not (policy.enabled and record.status_callback and status in _REPORTED_STATUSES):
                    continue
                params = callback_params(record, status, now)
                if policy.final_first and status not in FINAL_STATUSES:
                    held.append((status, params))
                    continue
                if policy.final_first:
                    # Final report first, and only after it got its answer the held ``sent``.
                    for reported, reported_params in [(status, params), *held]:
                        await self._deliver(record, reported, reported_params, copy=1, delay=0.0)
                    continue
                token = str(uuid.uuid4())
                for copy in range(1, policy.copies + 1):
                    deliveries.create_task(
                        self._deliver(record, status, params, copy=copy, delay=policy.delay_seconds, token=token)
                    )

    async def _deliver(
        self,
        record: MessageRecord,
        status: str,
        params: list[tuple[str, str]],
        copy: int,
        delay: float,
        token: str | None = None,
    ) -> None:
        """Deliver one callback, retrying with backoff until a 2xx or the attempts run out."""
        assert self._client is not None and record.status_callback is not None
        if delay:
            await asyncio.sleep(delay)
        if record.callback_gate is not None:
            # Fault lost_then_reported: held until the admin API releases it, or its bound passes.
            try:
                await asyncio.wait_for(record.callback_gate.wait(), timeout=record.callback_release_after)
            except TimeoutError:
                pass
        url = record.status_callback
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": compute_signature(self._config.auth_token, url, params),
            # Twilio keeps this token across retries of one webhook event.
            "I-Twilio-Idempotency-Token": token or str(uuid.uuid4()),
            "User-Agent": "TwilioProxy/1.1 (herald-emulator)",
        }
        content = urlencode(params).encode("utf-8")
        retry_delays = self._config.callback_retry_delays()
        for attempt_number in range(1, self._config.callback_max_attempts + 1):
            attempt = CallbackAttempt(status, copy, attempt_number, url, started_at=datetime.now(timezone.utc))
            record.callbacks.append(attempt)
            self._stats.callback_attempts += 1
            started = time.monotonic()
            try:
                response = await self.post(url, content=content, headers=headers)
                attempt.http_status = response.status_code
            except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
                attempt.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            attempt.duration_ms = round((time.monotonic() - started) * 1000, 1)
            if attempt.succeeded:
                self._stats.callbacks_succeeded += 1
                return
            self._stats.callbacks_failed += 1
            if attempt_number <= len(retry_delays):
                await asyncio.sleep(retry_delays[attempt_number - 1])
        self._stats.callbacks_abandoned += 1
