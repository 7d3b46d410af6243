"""A stored Twilio report becomes a signal that carries its status and its failure class, decided at the receipt edge."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from herald.core.outcomes import ProviderStatus
from herald.receipts.delivery import StoredReport

AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(status: str, code: int | None) -> dict:
    return {
        "id": 7, "provider_message_id": "SM" + "0" * 32, "provider_status": status, "attempt_ref": "att_abc_1",
        "error_code": code, "provider_event_at": None, "received_at": AT,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("status", "code", "mapped", "retryable"),
    [
        ("undelivered", 30008, ProviderStatus.UNDELIVERED, True),
        ("undelivered", 30003, ProviderStatus.UNDELIVERED, False),
        ("failed", 30036, ProviderStatus.FAILED, True),
        ("delivered", None, ProviderStatus.DELIVERED, False),
        ("sending", None, ProviderStatus.QUEUED, False),
    ],
)
def test_the_signal_carries_the_mapped_status_and_the_failure_class(
    status: str, code: int | None, mapped: ProviderStatus, retryable: bool
) -> None:
    """Twilio's label and error code are translated here, so the workflow reads neither vocabulary nor table."""
    report = StoredReport(row(status, code)).signal()
    assert (report.status, report.failure_retryable) == (mapped, retryable)
