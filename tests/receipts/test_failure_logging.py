"""Failures that repeat per report or per pass are logged once, with their count and kind (issue 21).

One post's 3,718 failed deliveries used to log 3,718 tracebacks; a drainer facing an hour's outage
logs 3,600 passes. Here the routing runs against a closed pool (every delivery fails at once, as
when the pool is exhausted or the database is away), the drainer's record of failed passes is fed a
run of pool timeouts, and a SendGrid post carries several events the ledger cannot hold.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from herald.ledger.store import open_pool
from herald.providers.sendgrid_signature import public_key_text
from herald.receipts.delivery import StoredReport
from herald.receipts.drainer import FailedPasses
from herald.receipts.routing import ReportRouter
from tests.receipts.served import RecordingClient, receipt_app
from tests.receipts.test_sendgrid_route import KEY, event, fresh_ref, post, post_body, signed

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def stored(inbox_id: int, *, workflow_id: str | None = None, status: str = "delivered") -> StoredReport:
    """A committed report of its own attempt, as the store returns it."""
    ref = f"att_{secrets.token_hex(6)}_1"
    return StoredReport({
        "id": inbox_id, "provider": "sendgrid", "provider_message_id": f"<{ref}@herald.test>",
        "provider_status": status, "attempt_ref": ref, "error_code": None, "provider_event_at": _AT,
        "received_at": _AT, "workflow_id": workflow_id,
    })  # fmt: skip


def router(
    pool: AsyncConnectionPool | None, client: RecordingClient, *, hold_seconds: float = 0.0, max_backlog: int = 5_000
) -> ReportRouter:
    """A SendGrid route's router, as the endpoint builds one (without a hold unless asked)."""
    return ReportRouter(
        route="sendgrid", pool=pool, client=client, hold_seconds=hold_seconds, concurrency=2,  # type: ignore[arg-type]
        max_backlog=max_backlog,
    )  # fmt: skip


def herald_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("herald")]


async def test_a_pass_whose_thousand_deliveries_all_fail_logs_one_line_with_the_count_and_no_traceback(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every delivery of a 1,000-report pass fails on the ledger: one warning naming 1,000 PoolClosed
    and the inbox ids, no traceback, and nothing left counted in the router's backlog."""
    async with open_pool(settings.database_url.get_secret_value()) as pool:
        pass  # closed: every connection asked of it fails at once, the way an exhausted pool's do after 1 s
    routing = router(pool, RecordingClient())
    with caplog.at_level(logging.INFO, logger="herald"):
        await routing.route([stored(inbox_id) for inbox_id in range(1, 1_001)])
        await routing.close(grace_seconds=10)
    [line] = herald_records(caplog)
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert "1000 of 1000 reports failed (1000 PoolClosed), inbox ids 1 to 1000" in line.getMessage()
    assert routing.backlog == 0


class _BrokenClient(RecordingClient):
    """A Temporal stand-in whose signal fails with an error that is no outage: our own bug."""

    class _Handle(RecordingClient._Handle):
        async def signal(self, name: str, arg: Any) -> None:
            raise RuntimeError("a bug in the signal path")

    def get_workflow_handle(self, workflow_id: str) -> RecordingClient._Handle:
        return _BrokenClient._Handle(self, workflow_id)


async def test_an_unexpected_error_is_traced_once_per_pass_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A bug that fails all 50 signals of a pass: its traceback once, then one line counting all 50."""
    routing = router(None, _BrokenClient())
    with caplog.at_level(logging.INFO, logger="herald"):
        await routing.route([stored(inbox_id, workflow_id=f"wf-{inbox_id}") for inbox_id in range(1, 51)])
        await routing.close(grace_seconds=10)
    traced, counted = herald_records(caplog)
    assert traced.exc_info is not None and "unexpected RuntimeError" in traced.getMessage()
    assert counted.exc_info is None and "50 of 50 reports failed (50 RuntimeError)" in counted.getMessage()


async def test_a_pass_that_would_pass_the_routing_backlog_is_left_to_the_drainer_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """8 reports held and a limit of 10: a pass of 5 more is not routed (its rows are committed, the
    drainer offers them), in one line, and holds no memory."""
    client = RecordingClient()
    routing = router(None, client, hold_seconds=60.0, max_backlog=10)
    with caplog.at_level(logging.INFO, logger="herald"):
        await routing.route([stored(inbox_id, workflow_id="wf", status="processed") for inbox_id in range(1, 9)])
        await routing.route([stored(inbox_id, workflow_id="wf") for inbox_id in range(9, 14)])
    assert routing.backlog == 8
    await routing.close()
    [line] = herald_records(caplog)
    assert "8 reports already waiting (limit 10); 5 committed reports left to the drainer" in line.getMessage()
    assert client.signals == []


def test_a_run_of_failed_drainer_passes_is_logged_when_it_begins_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """3,600 passes failing on pool timeouts (an hour's outage at one pass a second), then a good
    pass: two lines, the first naming the kind, the second the count, and no traceback."""
    failures = FailedPasses(interval_seconds=1.0)
    with caplog.at_level(logging.INFO, logger="herald"):
        for _ in range(3_600):
            failures.failed(PoolTimeout("couldn't get a connection after 1.00 sec"))
        failures.succeeded()
        failures.succeeded()
    began, ended = herald_records(caplog)
    assert "fail with PoolTimeout" in began.getMessage() and began.exc_info is None
    assert "succeed again after 3600 failed (last: PoolTimeout)" in ended.getMessage()


async def test_a_posts_unstorable_events_are_logged_as_one_line_counted_by_rule(
    pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    """Three events holding a NUL and one too long a Message-ID in one post: one warning with each
    rule's count, and none of the events' values or ids."""
    ref = fresh_ref()
    message_id = f"<{ref}@herald.test>"
    nul = [event("delivered", ref, message_id, response=f"250 OK\u0000{n}") for n in range(3)]
    long_id = event("delivered", ref, "<" + "x" * 1_000 + "@herald.test>")
    body = post_body(event("processed", ref, message_id), *nul, long_id)
    async with receipt_app(pool, public_key=public_key_text(KEY)) as (base, _):
        with caplog.at_level(logging.INFO, logger="herald"):
            response = await post(f"{base}/sendgrid/events", body, signed(body))
    assert response.status_code == 200, response.text
    assert "recorded 4 unstorable as rejections" in response.text
    [line] = herald_records(caplog)
    assert line.getMessage() == (
        "recorded 4 signed sendgrid events as rejections: "
        "3 a field holds a NUL character, which the ledger cannot store; "
        "1 smtp-id: longer than 998 characters"
    )
