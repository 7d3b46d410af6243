"""After acceptance: one message's way through Infobip, one step every ``step_ms``, and its reports.

    accepted (PENDING_ACCEPTED) -> sent (PENDING_WAITING_DELIVERY) -> DELIVERED_TO_HANDSET

or what its fault asks: UNDELIVERABLE after sending, REJECTED before it, EXPIRED when a fault holds
it in Infobip's queue longer than its validity period (it then never leaves), or nothing more
(``silent``). A repeat of an idempotent messageId is REJECTED_DUPLICATE_MESSAGE_ID one step after
acceptance and never sent. Infobip also rejects, during processing, a text over 25 parts and a
destination that is no number.

A final report is always produced; an intermediate one only when the message asked
(``intermediateReport``) or the ``out_of_order_reports`` fault sends one after the final.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from emulator.infobip.config import InfobipConfig
from emulator.infobip.faults import (
    AcceptThenHang,
    DelayedReport,
    DuplicateReports,
    Fault,
    HeldInQueue,
    NoReport,
    OutOfOrderReports,
    Rejected,
    ReportBeforeResponse,
    Silent,
    Undeliverable,
)
from emulator.infobip.messages import InfobipStats, MessageRecord, now_utc
from emulator.infobip.reports import ReportPoster
from emulator.infobip.vocabulary import (
    DELIVERED_TO_HANDSET,
    EC_DUPLICATE_MESSAGE,
    EC_INVALID_DESTINATION_ADDRESS,
    EC_MESSAGE_CANCELED,
    EC_MSG_TEXT_TOO_LONG,
    EXPIRED_EXPIRED,
    FAULT_ERRORS,
    MISSING_TO,
    NO_ERROR,
    PENDING_WAITING_DELIVERY,
    REJECTED_DESTINATION,
    REJECTED_DUPLICATE_MESSAGE_ID,
    REJECTED_MESSAGE_TOO_LONG,
    REJECTED_STATUSES,
    UNDELIVERABLE_STATUSES,
    MessageError,
    Status,
)

# Infobip: "REJECTED_MESSAGE_TOO_LONG (>25 parts ...)".
MAX_PARTS = 25
_NUMBER = re.compile(r"\+?[0-9]{3,20}")


@dataclass(frozen=True)
class _ReportPolicy:
    """How a message's reports go out, derived from its fault."""

    enabled: bool = True
    copies: int = 1
    delay_seconds: float = 0.0
    final_first: bool = False
    wait: bool = False

    @classmethod
    def for_fault(cls, fault: Fault | None) -> _ReportPolicy:
        if isinstance(fault, (NoReport, Silent)) or (isinstance(fault, AcceptThenHang) and not fault.reports):
            return cls(enabled=False)
        if isinstance(fault, DuplicateReports):
            return cls(copies=fault.copies)
        if isinstance(fault, DelayedReport):
            return cls(delay_seconds=fault.delay_seconds)
        if isinstance(fault, OutOfOrderReports):
            return cls(final_first=True)
        if isinstance(fault, ReportBeforeResponse):
            return cls(wait=True)
        return cls()

    @property
    def alone(self) -> bool:
        """Whether each report goes in a POST of its own (so copies and order are the fault's)."""
        return self.copies > 1 or self.final_first or self.wait


def _rejection_on_processing(record: MessageRecord) -> tuple[Status, MessageError] | None:
    """What Infobip refuses while processing an accepted message, or None."""
    if record.duplicate_of is not None:
        return REJECTED_DUPLICATE_MESSAGE_ID, EC_DUPLICATE_MESSAGE
    if not record.to:
        return MISSING_TO, EC_INVALID_DESTINATION_ADDRESS
    if not _NUMBER.fullmatch(record.to.strip()):
        return REJECTED_DESTINATION, EC_INVALID_DESTINATION_ADDRESS
    if record.message_count > MAX_PARTS:
        return REJECTED_MESSAGE_TOO_LONG, EC_MSG_TEXT_TOO_LONG
    return None


class Lifecycle:
    """Runs message lifecycles on the poster's tasks; one per emulator."""

    def __init__(self, config: InfobipConfig, stats: InfobipStats, poster: ReportPoster) -> None:
        self._config = config
        self._stats = stats
        self._poster = poster

    def launch(self, record: MessageRecord, fault: Fault | None) -> asyncio.Task[None]:
        """Start ``record``'s lifecycle in the background."""
        return self._poster.spawn(self._run(record, fault), name=f"lifecycle-{record.message_id}")

    async def _run(self, record: MessageRecord, fault: Fault | None) -> None:
        policy = _ReportPolicy.for_fault(fault)
        step = self._config.step_ms / 1000
        rejection = _rejection_on_processing(record)
        if rejection is None and isinstance(fault, Rejected):
            rejection = REJECTED_STATUSES[fault.status_id], NO_ERROR
        if rejection is not None:
            await asyncio.sleep(step)
            await self._finish(record, *rejection, policy)
            return
        queue_seconds = fault.queue_seconds if isinstance(fault, (AcceptThenHang, HeldInQueue)) else 0.0
        if queue_seconds > 0:
            if queue_seconds >= record.validity_seconds:
                # Still in Infobip's queue when its validity ends: it expires there and is never sent.
                await asyncio.sleep(record.validity_seconds)
                await self._finish(record, EXPIRED_EXPIRED, EC_MESSAGE_CANCELED, policy)
                return
            await asyncio.sleep(queue_seconds)
        await asyncio.sleep(step)
        record.sent = True
        self._stats.sent += 1
        record.advance(PENDING_WAITING_DELIVERY, now_utc())
        pending = record.report()
        if record.intermediate_reports and not policy.final_first:
            await self._report(record, pending, policy)
        if isinstance(fault, Silent):
            return
        await asyncio.sleep(step)
        if isinstance(fault, Undeliverable):
            await self._finish(record, UNDELIVERABLE_STATUSES[fault.status_id], FAULT_ERRORS[fault.error_id], policy)
        else:
            await self._finish(record, DELIVERED_TO_HANDSET, NO_ERROR, policy)
        if policy.final_first:
            # The intermediate report, only after the final one got its answer.
            await self._report(record, pending, policy)

    async def _finish(self, record: MessageRecord, status: Status, error: MessageError, policy: _ReportPolicy) -> None:
        record.advance(status, now_utc(), error)
        await self._report(record, record.report(), policy)

    async def _report(self, record: MessageRecord, body: dict[str, Any], policy: _ReportPolicy) -> None:
        """One report of ``record``, in as many copies as the fault asks; awaited when it says so."""
        if not policy.enabled:
            return
        if policy.delay_seconds:
            self._poster.spawn(self._later(record, body, policy.delay_seconds), name="report-delayed")
            return
        tasks = [
            self._poster.deliver(record, body, copy=copy, alone=policy.alone) for copy in range(1, policy.copies + 1)
        ]
        waiting = {task for task in tasks if task is not None}
        if waiting and (policy.wait or policy.final_first):
            await asyncio.wait(waiting)

    async def _later(self, record: MessageRecord, body: dict[str, Any], delay: float) -> None:
        await asyncio.sleep(delay)
        self._poster.deliver(record, body)
