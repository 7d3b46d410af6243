"""When an ESP's silence about an attempt counts as "not accepted" (herald.core.silence), as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.delivery_policy import DeliveryPolicy
from herald.core.silence import EventStream, SilenceRule, silence_verdict, stream_query

POLICY = DeliveryPolicy()
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
WINDOW = POLICY.event_evidence_window
PASSED = START + POLICY.submit_in_flight_bound + timedelta(seconds=5)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def verdict(now: datetime, **stream: object) -> SilenceRule:
    return silence_verdict(POLICY, START, now, EventStream(provider="sendgrid", **stream)).rule  # type: ignore[arg-type]


def test_nothing_counts_inside_the_evidence_window() -> None:
    """Before the window has passed, even a flowing stream proves nothing."""
    assert (
        verdict(START + WINDOW - timedelta(seconds=1), passed_at=PASSED, last_post_at=PASSED) is SilenceRule.WINDOW_OPEN
    )


def test_a_silent_stream_never_counts() -> None:
    """No fresh post naming a later submission: waiting, whatever the time, and the reason says since when."""
    result = silence_verdict(
        POLICY, START, START + timedelta(days=30), EventStream(provider="sendgrid", last_post_at=at(7))
    )
    assert result.rule is SilenceRule.NOT_PASSED and not result.counts
    assert result.reason.startswith(f"waiting: event stream silent since {at(7).isoformat()}")


def test_an_attempt_whose_provider_is_unrecorded_never_counts() -> None:
    """Without the attempt's ESP in the ledger there is no stream to read: waiting."""
    assert silence_verdict(POLICY, START, at(10**6), EventStream(provider=None)).rule is SilenceRule.NOT_PASSED


def test_the_stream_must_have_passed_the_attempt_for_a_window() -> None:
    """Once the stream passed the attempt, its silence counts only a window later (redeliveries in flight)."""
    assert verdict(PASSED + WINDOW - timedelta(seconds=1), passed_at=PASSED) is SilenceRule.SETTLING
    assert verdict(PASSED + WINDOW, passed_at=PASSED) is SilenceRule.COUNTS


def test_an_interruption_over_the_attempt_waits_for_the_redelivery_period() -> None:
    """A redelivered post covering the attempt's event times: its events may still be queued at the ESP,
    so silence counts only once the ESP's redelivery period (24 h) since the attempt has ended."""
    late = at(600)
    end = START + POLICY.event_redelivery_period
    assert verdict(end - timedelta(seconds=1), passed_at=PASSED, interrupted_at=late) is SilenceRule.INTERRUPTED
    counted = silence_verdict(
        POLICY, START, end, EventStream(provider="sendgrid", passed_at=PASSED, interrupted_at=late)
    )
    assert counted.counts and "redelivery period after an interruption" in counted.reason


def test_the_verdict_that_counts_names_the_rule_and_its_inputs() -> None:
    """The recorded reason carries the rule, the ESP, when the stream passed and the window."""
    reason = silence_verdict(POLICY, START, PASSED + WINDOW, EventStream(provider="sendgrid", passed_at=PASSED)).reason
    assert reason.startswith("rule event_stream_silence") and "sendgrid" in reason and PASSED.isoformat() in reason
    assert "presumed not accepted" in reason


def test_the_query_asks_about_submissions_after_the_in_flight_bound_and_the_attempts_event_times() -> None:
    """Passing needs a submission prepared after this attempt could still be in flight; an interruption
    matters if it covers the attempt's possible event times, widened by the stream's normal lag."""
    query = stream_query(POLICY, "att_x_1", START)
    assert query.passed_after == START + POLICY.submit_in_flight_bound
    assert query.window_from == START - POLICY.event_stream_lag
    assert query.window_to == START + POLICY.submit_in_flight_bound + POLICY.event_stream_lag
    assert query.lag == POLICY.event_stream_lag


moments = st.integers(min_value=-(10**6), max_value=10**7).map(lambda s: START + timedelta(seconds=s))


@given(
    now=moments,
    passed=st.none() | moments,
    interrupted=st.none() | moments,
    last=st.none() | moments,
)
def test_silence_counts_only_past_the_window_after_the_stream_passed_and_any_redelivery(
    now: datetime, passed: datetime | None, interrupted: datetime | None, last: datetime | None
) -> None:
    """Whatever the recorded facts: counting implies the window has passed since the attempt and since the
    stream passed it, and, after an interruption, the redelivery period since the attempt."""
    result = silence_verdict(
        POLICY,
        START,
        now,
        EventStream(provider="sendgrid", passed_at=passed, interrupted_at=interrupted, last_post_at=last),
    )
    if result.counts:
        assert passed is not None and now >= START + WINDOW and now >= passed + WINDOW
        assert interrupted is None or now >= START + POLICY.event_redelivery_period
    else:
        assert result.reason


@pytest.mark.parametrize("rule", list(SilenceRule))
def test_every_rule_is_reachable(rule: SilenceRule) -> None:
    """Each branch of the rule is a real outcome (none is dead code)."""
    cases = {
        SilenceRule.WINDOW_OPEN: (START, {}),
        SilenceRule.NOT_PASSED: (at(10**5), {}),
        SilenceRule.SETTLING: (START + WINDOW, {"passed_at": START + WINDOW - timedelta(seconds=10)}),
        SilenceRule.INTERRUPTED: (PASSED + WINDOW, {"passed_at": PASSED, "interrupted_at": PASSED}),
        SilenceRule.COUNTS: (PASSED + WINDOW, {"passed_at": PASSED}),
    }
    now, stream = cases[rule]
    assert verdict(now, **stream) is rule
