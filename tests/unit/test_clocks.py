"""The closing clocks (``herald.core.closing_clocks``) and the wait after an unwritten submit, as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from herald.core.closing_clocks import HORIZON_REASON, closing_clock, closing_rule
from herald.core.delivery_policy import DeliveryPolicy, not_sent_delay
from herald.core.lifecycle import IntentState, Source

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
SECOND = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("expires_at", "horizon_at", "expected"),
    [
        pytest.param(NOW + SECOND, None, None, id="nothing-due"),
        pytest.param(NOW + SECOND, NOW + SECOND, None, id="both-ahead"),
        pytest.param(NOW, None, IntentState.EXPIRED, id="expiry-now"),
        pytest.param(NOW + SECOND, NOW, IntentState.UNKNOWN, id="horizon-now"),
        pytest.param(NOW - SECOND, NOW - 2 * SECOND, IntentState.UNKNOWN, id="horizon-first"),
        pytest.param(NOW - 2 * SECOND, NOW - SECOND, IntentState.EXPIRED, id="expiry-first"),
        pytest.param(NOW - SECOND, NOW - SECOND, IntentState.UNKNOWN, id="tie-goes-to-the-horizon"),
    ],
)
def test_the_earliest_closing_clock_wins(
    expires_at: datetime, horizon_at: datetime | None, expected: IntentState | None
) -> None:
    """Of expiry and the attempt's horizon, the one that passed first closes the intent; neither, nothing."""
    closing = closing_clock(NOW, expires_at, horizon_at)
    assert (closing.state if closing else None) is expected
    if closing is not None:
        assert closing.source is Source.CLOCK
        assert closing.reason == HORIZON_REASON or expires_at.isoformat() in closing.reason


@pytest.mark.parametrize(
    ("state", "rule"),
    [
        (IntentState.EXPIRED, "expiry"),
        (IntentState.CANCELLED, "cancel"),
        (IntentState.UNKNOWN, "resolution_horizon"),
        (IntentState.SUPPRESSED, "ledger"),
        (IntentState.DELIVERED, "delivered"),
        (IntentState.PERMANENT_FAILURE, "permanent_failure"),
    ],
)
def test_closing_rule_names_the_clock_or_the_outcome(state: IntentState, rule: str) -> None:
    """`closed_by` names the clock or cause that closed the intent, or the outcome itself."""
    assert closing_rule(state) == rule


def test_not_sent_delay_grows_linearly_to_the_backoff_cap() -> None:
    """After submits the ledger could not record, the same attempt waits 1x, 2x, ... backoff_initial, capped."""
    policy = DeliveryPolicy(backoff_initial=timedelta(seconds=5), backoff_max=timedelta(seconds=12))
    assert [not_sent_delay(policy, waits).total_seconds() for waits in (1, 2, 3, 10)] == [5, 10, 12, 12]
