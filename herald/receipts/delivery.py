"""Delivering a stored report to its workflow, or recording it when the workflow has closed.

Used right after the callback is answered and again by the drainer; both paths
are idempotent because the workflow ignores an inbox id it has already seen.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from herald.contracts import DeliveryReport, attempt_number_of
from herald.ledger import store
from herald.lifecycle import Source
from herald.providers.twilio_codes import map_status
from workflows.notification import NotificationWorkflow

log = logging.getLogger("herald.receipts")

# Seconds between re-signals of a report still without a verdict: quick for the race where the
# report beat our own attempt row, then slower for an intent that stays unreachable.
REDELIVERY_BACKOFF = (1, 5, 15, 60, 300, 1800, 7200, 21600)


class StoredReport:
    """An inbox row as the delivery path needs it."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.inbox_id: int = row["id"]
        self.provider_message_id: str = row["provider_message_id"]
        self.provider_status: str = row["provider_status"]
        self.attempt_ref: str | None = row["attempt_ref"]
        self.error_code: int | None = row["error_code"]
        self.provider_event_at: datetime | None = row["provider_event_at"]
        self.received_at: datetime = row["received_at"]
        self.tries: int = row.get("tries", 0)


async def deliver(pool: AsyncConnectionPool, client: Client, report: StoredReport) -> str:
    """Signal the report to its workflow; returns what happened, for logs and tests."""
    workflow_id = await store.workflow_for_attempt(pool, report.attempt_ref) if report.attempt_ref else None
    if workflow_id is None:
        # The attempt row may not be committed yet (the report won the race): try again later.
        await _later(pool, report, "attempt not known yet")
        return "deferred"
    signal = DeliveryReport(
        inbox_id=report.inbox_id,
        attempt_ref=report.attempt_ref,
        provider_id=report.provider_message_id,
        status=map_status(report.provider_status),
        error_code=report.error_code,
        provider_event_at=report.provider_event_at,
        received_at=report.received_at,
    )
    try:
        await client.get_workflow_handle(workflow_id).signal(NotificationWorkflow.delivery_report, signal)
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            await store.record_report_for_closed_intent(
                pool,
                workflow_id=workflow_id,
                inbox_id=report.inbox_id,
                observation={
                    "attempt_number": attempt_number_of(report.attempt_ref),
                    "source": Source.REPORT,
                    "kind": "status",
                    "provider_id": report.provider_message_id,
                    "provider_status": signal.status.value,
                    "error_code": report.error_code,
                    "applied": False,
                    "inbox_id": report.inbox_id,
                    "observed_at": report.received_at,
                },
                reason="intent's workflow has closed; recorded, not applied",
            )
            return "recorded_closed"
        await _later(pool, report, f"signal failed: {error.status.name if error.status else 'rpc error'}")
        return "deferred"
    # Signalled; the workflow writes the verdict. Look again later only in case it never does.
    await _later(pool, report, None)
    return "signalled"


async def _later(pool: AsyncConnectionPool, report: StoredReport, error: str | None) -> None:
    delay = REDELIVERY_BACKOFF[min(report.tries, len(REDELIVERY_BACKOFF) - 1)]
    await store.schedule_redelivery(pool, report.inbox_id, delay, error)
