"""Tests of the pure delivery policy: retry backoff, retry budget and poll schedule."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.delivery_policy import (
    DeliveryPolicy,
    budget_spent,
    may_retry,
    next_attempt_delay,
    outage_length,
    poll_delay,
    retry_delay,
)
from herald.core.lifecycle import SubmitResult
from tests.depth import examples

DEFAULT = DeliveryPolicy()
# timedelta keeps microseconds; a float bound may round by one.
TICK = timedelta(microseconds=1)
PROPERTY = settings(derandomize=True, database=None, max_examples=examples(300), deadline=None)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


@st.composite
def policies(draw: st.DrawFn) -> DeliveryPolicy:
    initial = draw(st.floats(min_value=0.01, max_value=120, allow_nan=False))
    backoff_max = draw(st.floats(min_value=initial, max_value=3600, allow_nan=False))
    return DeliveryPolicy(
        max_attempts=draw(st.integers(min_value=1, max_value=20)),
        backoff_initial=seconds(initial),
        backoff_multiplier=draw(st.floats(min_value=1.0, max_value=4.0, allow_nan=False)),
        backoff_max=seconds(backoff_max),
        retry_after_cap=seconds(draw(st.floats(min_value=backoff_max, max_value=7200, allow_nan=False))),
        poll_initial=seconds(draw(st.floats(min_value=0.5, max_value=120, allow_nan=False))),
        poll_max=seconds(draw(st.floats(min_value=120, max_value=3600, allow_nan=False))),
    )


def backoff_base(policy: DeliveryPolicy, failed_attempts: int) -> float:
    """The un-jittered delay of the design: initial * multiplier^(n-1), capped at backoff_max."""
    exponent = max(failed_attempts - 1, 0)
    return min(
        policy.backoff_initial.total_seconds() * policy.backoff_multiplier**exponent,
        policy.backoff_max.total_seconds(),
    )


# ---- retry_delay ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failed_attempts,expected_seconds",
    [(1, 5), (2, 10), (3, 20), (4, 40), (5, 80), (6, 160), (7, 320), (8, 600), (9, 600), (20, 600)],
)
def test_retry_delay_doubles_then_caps(failed_attempts: int, expected_seconds: float) -> None:
    """With full jitter the default delay doubles from 5 s per failure and stops at backoff_max (10 min)."""
    assert retry_delay(DEFAULT, failed_attempts, None, 1.0) == seconds(expected_seconds)


@pytest.mark.parametrize("failed_attempts", [1, 2, 3, 8, 20])
def test_retry_delay_equal_jitter_spans_half_to_full(failed_attempts: int) -> None:
    """Jitter 0 gives exactly half the base delay, jitter 1 the whole of it, jitter 0.5 three quarters."""
    base = backoff_base(DEFAULT, failed_attempts)
    assert retry_delay(DEFAULT, failed_attempts, None, 0.0) == seconds(base / 2)
    assert retry_delay(DEFAULT, failed_attempts, None, 0.5) == seconds(base * 0.75)
    assert retry_delay(DEFAULT, failed_attempts, None, 1.0) == seconds(base)


def test_retry_delay_before_any_failure_equals_first_failure() -> None:
    """A call with zero failed attempts never shortens the delay below the first backoff step."""
    assert retry_delay(DEFAULT, 0, None, 0.3) == retry_delay(DEFAULT, 1, None, 0.3)


@pytest.mark.parametrize("jitter", [-0.01, 1.01, -1.0, 2.0, math.nan, math.inf, -math.inf])
def test_retry_delay_rejects_jitter_outside_unit_interval(jitter: float) -> None:
    """Jitter outside [0, 1] (or not a number) is a caller bug and raises ValueError."""
    with pytest.raises(ValueError, match="jitter"):
        retry_delay(DEFAULT, 1, None, jitter)


@pytest.mark.parametrize("hint_seconds", [1, 5, 60, 599, 600, 1200, 1800])
def test_retry_delay_honours_a_provider_hint_up_to_the_cap(hint_seconds: float) -> None:
    """A provider hint no longer than retry_after_cap is never undercut: the delay is at least the hint."""
    delay = retry_delay(DEFAULT, 1, seconds(hint_seconds), 0.0)
    assert delay >= seconds(hint_seconds)
    assert delay == max(seconds(2.5), seconds(hint_seconds))


@pytest.mark.parametrize("hint", [timedelta(minutes=31), timedelta(days=3), timedelta(days=3650)])
def test_retry_delay_caps_an_absurd_hint(hint: timedelta) -> None:
    """A provider hint beyond retry_after_cap is cut to the cap (30 min), never honoured in full."""
    assert retry_delay(DEFAULT, 1, hint, 1.0) == DEFAULT.retry_after_cap
    assert retry_delay(DEFAULT, 20, hint, 1.0) == DEFAULT.retry_after_cap


def test_retry_delay_short_hint_does_not_shorten_backoff() -> None:
    """A hint shorter than the computed backoff leaves the backoff as it was."""
    assert retry_delay(DEFAULT, 4, seconds(1), 1.0) == retry_delay(DEFAULT, 4, None, 1.0) == seconds(40)


@pytest.mark.parametrize("multiplier", [1e3, 1e17, 1e300])
def test_any_accepted_multiplier_gives_capped_delays(multiplier: float) -> None:
    """A backoff multiplier is either refused by the policy or yields delays capped at backoff_max over the whole budget, never an overflow."""
    try:
        policy = DeliveryPolicy(max_attempts=20, backoff_multiplier=multiplier)
    except ValueError:
        return
    assert retry_delay(policy, policy.max_attempts, None, 1.0) == policy.backoff_max


@PROPERTY
@given(policy=policies(), failed_attempts=st.integers(min_value=0, max_value=20), jitter=st.floats(0.0, 1.0))
def test_retry_delay_stays_within_half_and_full_base(policy: DeliveryPolicy, failed_attempts: int, jitter: float) -> None:
    """For any policy, failure count and jitter in [0, 1], the delay lies in [base/2, base] and never exceeds backoff_max."""
    base = backoff_base(policy, failed_attempts)
    delay = retry_delay(policy, failed_attempts, None, jitter)
    assert seconds(base / 2) - TICK <= delay <= seconds(base) + TICK
    assert delay <= policy.backoff_max + TICK
    assert delay >= policy.backoff_initial / 2 - TICK


@PROPERTY
@given(
    policy=policies(),
    failed_attempts=st.integers(min_value=1, max_value=19),
    jitter=st.floats(0.0, 1.0),
)
def test_retry_delay_never_shrinks_with_more_failures(policy: DeliveryPolicy, failed_attempts: int, jitter: float) -> None:
    """At a fixed jitter, one more failure never gives a shorter delay."""
    assert retry_delay(policy, failed_attempts + 1, None, jitter) >= retry_delay(policy, failed_attempts, None, jitter)


@PROPERTY
@given(
    policy=policies(),
    failed_attempts=st.integers(min_value=0, max_value=20),
    hint_seconds=st.floats(min_value=0, max_value=10 * 365 * 86400, allow_nan=False),
    jitter=st.floats(0.0, 1.0),
)
def test_retry_delay_with_hint_is_bounded(
    policy: DeliveryPolicy, failed_attempts: int, hint_seconds: float, jitter: float
) -> None:
    """With any hint the delay is at least min(hint, retry_after_cap), at least the hint when the hint is within the cap, and never beyond the larger cap."""
    hint = seconds(hint_seconds)
    delay = retry_delay(policy, failed_attempts, hint, jitter)
    assert delay >= min(hint, policy.retry_after_cap)
    if hint <= policy.retry_after_cap:
        assert delay >= hint
    assert delay >= retry_delay(policy, failed_attempts, None, jitter)
    assert delay <= max(policy.backoff_max, policy.retry_after_cap) + TICK


# ---- may_retry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts_made,allowed", [(0, True), (1, True), (3, True), (4, False), (5, False), (100, False)])
def test_may_retry_bounds_the_default_budget(attempts_made: int, allowed: bool) -> None:
    """The default budget allows four sends in all: a fifth is refused."""
    assert may_retry(DEFAULT, attempts_made) is allowed


def test_single_attempt_policy_never_retries() -> None:
    """max_attempts=1 means the first send is the only one."""
    assert may_retry(DeliveryPolicy(max_attempts=1), 1) is False


@PROPERTY
@given(max_attempts=st.integers(min_value=1, max_value=20), attempts_made=st.integers(min_value=0, max_value=100))
def test_may_retry_allows_exactly_max_attempts(max_attempts: int, attempts_made: int) -> None:
    """A retry is allowed exactly while fewer than max_attempts sends were made."""
    assert may_retry(DeliveryPolicy(max_attempts=max_attempts), attempts_made) is (attempts_made < max_attempts)


@pytest.mark.parametrize("max_attempts", [0, 21, -1])
def test_policy_rejects_a_budget_outside_one_to_twenty(max_attempts: int) -> None:
    """A policy with no send at all or an unbounded-looking budget is refused at construction."""
    with pytest.raises(ValueError):
        DeliveryPolicy(max_attempts=max_attempts)


# ---- poll_delay ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "polls_made,expected_seconds",
    [(0, 30), (1, 60), (2, 120), (3, 240), (4, 480), (5, 960), (6, 1800), (7, 1800), (50, 1800)],
)
def test_poll_delay_doubles_then_caps(polls_made: int, expected_seconds: float) -> None:
    """At mid jitter the default poll delay doubles from 30 s and stops at poll_max (30 min)."""
    assert poll_delay(DEFAULT, polls_made, 0.5) == seconds(expected_seconds)


@pytest.mark.parametrize("polls_made", [0, 3, 50])
def test_poll_delay_jitter_is_plus_minus_ten_percent(polls_made: int) -> None:
    """Jitter 0 and 1 give exactly 90 % and 110 % of the base poll delay."""
    base = poll_delay(DEFAULT, polls_made, 0.5).total_seconds()
    assert poll_delay(DEFAULT, polls_made, 0.0) == seconds(base * 0.9)
    assert poll_delay(DEFAULT, polls_made, 1.0) == seconds(base * 1.1)


@pytest.mark.parametrize("polls_made", [1023, 1024, 10_000])
def test_poll_delay_stays_capped_after_very_many_polls(polls_made: int) -> None:
    """However many polls were made, the delay stays at poll_max instead of overflowing (a 1-min poll cap reaches 1,024 polls within the 48 h horizon)."""
    policy = DeliveryPolicy(poll_initial=seconds(30), poll_max=timedelta(minutes=1))
    assert poll_delay(policy, polls_made, 0.5) == timedelta(minutes=1)


@PROPERTY
@given(policy=policies(), polls_made=st.integers(min_value=0, max_value=1000), jitter=st.floats(0.0, 1.0))
def test_poll_delay_within_ten_percent_of_capped_base(policy: DeliveryPolicy, polls_made: int, jitter: float) -> None:
    """For any policy and jitter in [0, 1], the poll delay is within ±10 % of min(poll_initial·2^n, poll_max)."""
    base = min(policy.poll_initial.total_seconds() * 2.0**polls_made, policy.poll_max.total_seconds())
    delay = poll_delay(policy, polls_made, jitter)
    assert seconds(base * 0.9) - TICK <= delay <= seconds(base * 1.1) + TICK
    assert delay <= policy.poll_max * 1.1 + TICK


@PROPERTY
@given(policy=policies(), polls_made=st.integers(min_value=0, max_value=999), jitter=st.floats(0.0, 1.0))
def test_poll_delay_never_shrinks_with_more_polls(policy: DeliveryPolicy, polls_made: int, jitter: float) -> None:
    """At a fixed jitter, one more poll never gives a shorter delay."""
    assert poll_delay(policy, polls_made + 1, jitter) >= poll_delay(policy, polls_made, jitter)


# ---- outages: attempts that reached no provider ---------------------------------------------------

U, R, N, A = SubmitResult.UNREACHABLE, SubmitResult.RETRYABLE, SubmitResult.NOT_SENT, SubmitResult.ACCEPTED


@pytest.mark.parametrize(
    ("results", "spent", "outage"),
    [([], 0, 0), ([U, U, U], 0, 3), ([R, U, U], 1, 2), ([U, R], 1, 0), ([N, R, U], 1, 1), ([R, R, A], 3, 0)],
)
def test_only_attempts_a_provider_judged_spend_the_budget(results: list[SubmitResult], spent: int, outage: int) -> None:
    """Unreachable and never-sent attempts spend nothing; the outage is the run of unreachable ones at the end."""
    assert budget_spent(results) == spent and outage_length(results) == outage


@given(outage=st.integers(min_value=1, max_value=500), refusals=st.integers(min_value=0, max_value=30))
def test_an_outage_always_has_a_next_attempt_whatever_the_budget(outage: int, refusals: int) -> None:
    """However long the outage and however spent the budget, the next attempt after an unreachable one
    waits a capped backoff (never None): only the intent's deadline ends an outage."""
    results = [SubmitResult.RETRYABLE] * refusals + [SubmitResult.UNREACHABLE] * outage
    delay = next_attempt_delay(DEFAULT, results, None, 1.0)
    assert delay is not None and timedelta(0) < delay <= DEFAULT.backoff_max


def test_after_an_outage_a_refusal_is_judged_by_the_budget_again() -> None:
    """Four refusals around any number of unreachable attempts exhaust the default budget of four."""
    results = [R, U, U, R, U, R, R]
    assert budget_spent(results) == 4 and next_attempt_delay(DEFAULT, results, None, 0.5) is None
    assert next_attempt_delay(DEFAULT, results[:-1], None, 0.5) is not None


def test_an_outage_honours_the_providers_retry_after_up_to_the_cap() -> None:
    """A 429's Retry-After stretches the outage's backoff, capped like any hint."""
    assert next_attempt_delay(DEFAULT, [U], seconds(90), 0.0) == seconds(90)
    assert next_attempt_delay(DEFAULT, [U], timedelta(days=2), 0.0) == DEFAULT.retry_after_cap
