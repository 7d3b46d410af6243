"""Delivering stored reports to their workflow, or recording them when the workflow has closed.

Used right after the callback is answered and again by the drainer; both paths
are idempotent because the workflow ignores an inbox id it has already seen.
Reports travel in batches of one attempt: one signal (one billed Temporal action)
carries a held non-final report together with the final one that followed it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from herald.contracts import DeliveryReport, ReportBatch, attempt_number_of
from herald.ledger import store
from herald.machine.presumptions import LateReport
from herald.providers.report_vocabularies import ReportVocabulary, vocabulary_for
from herald.workflow_api import SIGNAL_DELIVERY_REPORTS

log = logging.getLogger("herald.receipts")

# Seconds between re-signals of a report still without a verdict: quick for the race where the
# report beat our own attempt row, then slower for an intent that stays unreachable.
REDELIVERY_BACKOFF = (1, 5, 15, 60, 300, 1800, 7200, 21600)
# After a signal Temporal accepted, the report is in the workflow's history and will be decided;
# the workflow writes its verdict at its next checkpoint (at the latest its first status poll).
# The drainer looks at a row again only after this long, as a safety net (a terminated workflow,
# a receipt server that died between its 2xx and its signal, a held report lost with its process).
VERDICT_GRACE_SECONDS = 120


class UnknownProviderError(LookupError):
    """An inbox row whose provider Herald has no report vocabulary for: it cannot be classified."""


class StoredReport:
    """An inbox row as the delivery path needs it, read in its provider's vocabulary."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.inbox_id: int = row["id"]
        # Rows read from the ledger always carry their provider (the column is NOT NULL). A row
        # built without the key comes from code written when every report was Twilio's.
        self.provider: str = row.get("provider", "twilio")
        # None for a provider without a vocabulary: such a row is never signalled (see deliver()).
        self.vocabulary: ReportVocabulary | None = vocabulary_for(self.provider)
        self.provider_message_id: str = row["provider_message_id"]
        self.provider_status: str = row["provider_status"]
        self.attempt_ref: str | None = row["attempt_ref"]
        self.error_code: int | None = row["error_code"]
        self.provider_event_at: datetime | None = row["provider_event_at"]
        self.received_at: datetime = row["received_at"]
        self.tries: int = row.get("tries", 0)
        self.workflow_id: str | None = row.get("workflow_id")

    @property
    def is_final(self) -> bool:
        """Whether the report ends its attempt; one that cannot be read is never final."""
        return self.vocabulary is not None and self.vocabulary.map_status(self.provider_status).is_final

    def signal(self) -> DeliveryReport:
        """The report as its workflow receives it, classified in its provider's vocabulary.

        Raises:
            UnknownProviderError: Herald has no vocabulary for the row's provider.
        """
        assert self.attempt_ref is not None
        if self.vocabulary is None:
            raise UnknownProviderError(f"no report vocabulary for provider {self.provider!r}")
        return DeliveryReport(
            inbox_id=self.inbox_id,
            attempt_ref=self.attempt_ref,
            provider_id=self.provider_message_id,
            status=self.vocabulary.map_status(self.provider_status),
            error_code=self.error_code,
            failure_retryable=self.vocabulary.is_retryable(self.provider_status, self.error_code),
            provider_event_at=self.provider_event_at,
            received_at=self.received_at,
        )


async def deliver(
    pool: AsyncConnectionPool, client: Client, reports: list[StoredReport], *, first_delivery: bool = False
) -> str:
    """Signal reports of one attempt to its workflow in one signal; returns what happened.

    A first delivery that signals writes nothing more: the drainer finds the rows after
    VERDICT_GRACE_SECONDS if no verdict ever comes. A redelivery that signals schedules the
    next look on the backoff, so an undecided row is not re-signalled on every drainer pass.
    """
    refs = {report.attempt_ref for report in reports}
    if len(refs) != 1:
        raise ValueError("deliver() takes the reports of exactly one attempt")
    ref = refs.pop()
    unreadable = [report for report in reports if report.vocabulary is None]
    if unreadable:
        await _leave_for_an_operator(pool, unreadable)
        reports = [report for report in reports if report.vocabulary is not None]
        if not reports:
            return "unclassified"
    workflow_id = next((r.workflow_id for r in reports if r.workflow_id), None)
    if workflow_id is None and ref:
        workflow_id = await store.workflow_for_attempt(pool, ref)
    if workflow_id is None:
        # The attempt row may not be committed yet (the report won the race): try again later.
        await _later(pool, reports, "attempt not known yet")
        return "deferred"
    batch = ReportBatch(reports=[report.signal() for report in reports])
    try:
        await client.get_workflow_handle(workflow_id).signal(SIGNAL_DELIVERY_REPORTS, batch)
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            for report, signal in zip(reports, batch.reports, strict=True):
                await _record_for_closed_intent(pool, workflow_id, report, signal)
            return "recorded_closed"
        await _later(pool, reports, f"signal failed: {error.status.name if error.status else 'rpc error'}")
        return "deferred"
    if not first_delivery:
        await _later(pool, reports, None)
    return "signalled"


async def _leave_for_an_operator(pool: AsyncConnectionPool, reports: list[StoredReport]) -> None:
    """Neither signal nor decide rows Herald cannot read: guessing a vocabulary could end an intent
    on a misread status, and a verdict ('ignored') cannot be taken back (receipt_outcomes is
    append-only). The row stays undecided, so it counts in the ledger's undecided reports; its
    redelivery row names the cause for an operator, and the growing backoff keeps it from crowding
    the drainer's batch while still offering it again once a release adds the vocabulary."""
    providers = sorted({report.provider for report in reports})
    log.warning(
        "inbox rows %s: no report vocabulary for provider(s) %s; left undecided for an operator",
        [report.inbox_id for report in reports],
        providers,
    )
    await _later(pool, reports, f"no report vocabulary for provider {', '.join(map(repr, providers))}")


async def _record_for_closed_intent(
    pool: AsyncConnectionPool, workflow_id: str, report: StoredReport, signal: DeliveryReport
) -> None:
    late = LateReport(
        inbox_id=report.inbox_id,
        attempt_number=attempt_number_of(signal.attempt_ref),
        provider_id=report.provider_message_id,
        status=signal.status,
        error_code=report.error_code,
        received_at=report.received_at,
    )
    await store.record_report_for_closed_intent(pool, workflow_id=workflow_id, report=late)


async def _later(pool: AsyncConnectionPool, reports: list[StoredReport], error: str | None) -> None:
    await store.schedule_redeliveries(
        pool,
        [(r.inbox_id, REDELIVERY_BACKOFF[min(r.tries, len(REDELIVERY_BACKOFF) - 1)], error) for r in reports],
    )
