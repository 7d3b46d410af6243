"""The delivery policy: retry budget, backoff, poll schedule and horizons, as pure functions.

The workflow asks these functions what to do and sleeps on a durable timer for
the answer; jitter comes in as an argument (``workflow.random()`` inside the
workflow) so the same history always replays to the same decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import Field, field_validator

from herald.core.lifecycle import SubmitResult
from herald.core.outcomes import Frozen, NotFound

# The longest queue time a provider is asked to honour, in whole seconds: Twilio's ValidityPeriod
# range (1 s to 10 h). A bound the provider cannot express would make the proof window a guess.
QUEUE_VALIDITY_RANGE_SECONDS = (1, 36_000)


class DeliveryPolicy(Frozen):
    """Every knob of one intent's delivery; travels in the workflow input so history shows it."""

    # Sends of new attempts, the first included. A compliance notice needs a terminal
    # state, so the budget is finite; four covers a provider blip without hammering a handset.
    max_attempts: int = Field(default=4, ge=1, le=20)
    backoff_initial: timedelta = timedelta(seconds=5)
    backoff_multiplier: float = Field(default=2.0, ge=1.0)
    backoff_max: timedelta = timedelta(minutes=10)
    # A provider's Retry-After is honoured, up to this cap: an absurd hint must not park a receipt for days.
    retry_after_cap: timedelta = timedelta(minutes=30)
    # The submit activity's whole budget; above the adapter's connect+read timeout so the
    # adapter, not Temporal, reports the timeout as an Unknown outcome.
    submit_timeout: timedelta = timedelta(seconds=20)
    # Wait this long after an unknown submit before the first lookup: the provider needs a
    # moment to make an accepted message visible to its list API.
    lookup_first_delay: timedelta = timedelta(seconds=5)
    # How long after an attempt began a request of ours can still reach the provider and create a
    # message there (our request timeouts, plus margin for a provider that holds a request open and
    # for a listing that shows a new message late). First half of the not-found proof window.
    submit_in_flight_bound: timedelta = timedelta(seconds=60)
    # The longest an accepted message may wait in the provider's own queue before the provider drops
    # it (sent to Twilio as ValidityPeriod; Twilio fails it with 30036). Second half of the proof
    # window: after both, a message the attempt created has been sent (and is listed) or dropped.
    # Ten minutes: a transactional notice that has not left the queue by then is late anyway.
    provider_queue_validity: timedelta = timedelta(minutes=10)
    # Providers without lookups (e-mail over SMTP): how long after an attempt with an unknown
    # outcome began Herald waits for any event carrying its reference, and, once the ESP's event
    # stream has moved past the attempt (events for later submissions arrived as they happened),
    # how long it waits more for posts the ESP may redeliver. Only then does the silence count
    # (``herald.core.silence``): presumed not accepted, recorded with its inputs; a later event that
    # contradicts it is counted among the duplicates (`events_absent`). SendGrid posts about 30 s
    # after events happen; ten minutes is generous for its batching.
    event_evidence_window: timedelta = timedelta(minutes=10)
    # A post that arrives more than this after its newest event was redelivered, not posted as its
    # events happened (SendGrid batches for about 30 s; 2 minutes leaves room for its load and for
    # skew between its clock and ours). Such a post shows the stream was interrupted.
    event_stream_lag: timedelta = timedelta(minutes=2)
    # How long the ESP keeps redelivering posts that failed ("All events are retried at increasing
    # intervals for up to 24 hours after the event occurs", SendGrid). After an interruption over
    # an attempt's events, its silence counts only once this has passed since the attempt began.
    event_redelivery_period: timedelta = timedelta(hours=24)
    # Lookups of an unknown submit run on their own schedule, doubling from lookup_first_delay up to
    # this; never on the (much slower) poll schedule of accepted messages, or an unknown submit
    # could wait an hour for its second look.
    lookup_max: timedelta = timedelta(seconds=30)
    # Status polls while waiting for reports: the first after poll_initial, then growing.
    poll_initial: timedelta = timedelta(seconds=30)
    poll_max: timedelta = timedelta(minutes=30)
    # After this long without a final outcome the intent becomes `unknown`: terminal for
    # automation, raised for a human. Never `failed`: those carry different resend risk.
    resolution_horizon: timedelta = timedelta(hours=48)

    @field_validator("provider_queue_validity")
    @classmethod
    def _whole_seconds_in_provider_range(cls, value: timedelta) -> timedelta:
        low, high = QUEUE_VALIDITY_RANGE_SECONDS
        seconds = value.total_seconds()
        if seconds != int(seconds) or not low <= seconds <= high:
            raise ValueError(f"must be whole seconds from {low} to {high}")
        return value


def retry_delay(policy: DeliveryPolicy, failed_attempts: int, provider_hint: timedelta | None, jitter: float) -> timedelta:
    """Delay before the next attempt after `failed_attempts` definite retryable failures.

    Capped exponential backoff with "equal jitter" (half fixed, half random) so a fleet of
    intents failing together does not wake together; a provider's own delay wins when it is
    longer, up to ``retry_after_cap``.
    """
    if not 0.0 <= jitter <= 1.0:
        raise ValueError("jitter must be in [0, 1]")
    base = _capped_growth(
        policy.backoff_initial.total_seconds(),
        policy.backoff_multiplier,
        max(failed_attempts - 1, 0),
        policy.backoff_max.total_seconds(),
    )
    computed = timedelta(seconds=base / 2 + base / 2 * jitter)
    if provider_hint is None:
        return computed
    return max(computed, min(provider_hint, policy.retry_after_cap))


def _capped_growth(initial: float, factor: float, steps: int, cap: float) -> float:
    """min(initial * factor**steps, cap), computed in logs: a days-long poll or a large factor would
    overflow a float power long before the cap matters."""
    if initial <= 0 or factor <= 1.0 or steps == 0:
        return min(initial, cap)
    if initial >= cap or steps * math.log(factor) >= math.log(cap / initial):
        return cap
    return initial * factor**steps


def not_sent_delay(policy: DeliveryPolicy, waits: int) -> timedelta:
    """Delay before preparing the same attempt again after `waits` submits the ledger could not
    record (nothing reached the provider): linear from backoff_initial, capped at backoff_max."""
    return min(policy.backoff_initial * waits, policy.backoff_max)


def may_retry(policy: DeliveryPolicy, attempts_made: int) -> bool:
    return attempts_made < policy.max_attempts


# Attempts that never met the provider's judgement: an outage (nothing reached it) or a ledger that
# was away (the provider was never called). They cost the recipient nothing and prove nothing about
# the message, so they do not spend the budget that bounds real refusals.
_OUTSIDE_THE_BUDGET = frozenset({SubmitResult.UNREACHABLE, SubmitResult.NOT_SENT})


def budget_spent(results: Sequence[SubmitResult | None]) -> int:
    """How many attempts count against ``max_attempts``: every one the provider saw or judged."""
    return sum(1 for result in results if result not in _OUTSIDE_THE_BUDGET)


def outage_length(results: Sequence[SubmitResult | None]) -> int:
    """How many of the latest attempts in a row found the provider unreachable (0: the latest did not)."""
    count = 0
    for result in reversed(results):
        if result is not SubmitResult.UNREACHABLE:
            break
        count += 1
    return count


def next_attempt_delay(
    policy: DeliveryPolicy, results: Sequence[SubmitResult | None], provider_hint: timedelta | None, jitter: float
) -> timedelta | None:
    """How long to wait before the next attempt, or None when the retry budget is spent.

    After an outage (the latest attempt reached no provider) there is always a next attempt: the
    backoff grows with the outage's length, capped at ``backoff_max`` and stretched by a provider's
    Retry-After, and only the intent's deadline ends the wait. "I'm not sure any generic retry
    count is defensible without the notice deadline" (seed 003): the deadline is the bound here.
    After a refusal of the message itself, the budget decides, as before.
    """
    outage = outage_length(results)
    if outage:
        return retry_delay(policy, outage, provider_hint, jitter)
    spent = budget_spent(results)
    if not may_retry(policy, spent):
        return None
    return retry_delay(policy, spent, provider_hint, jitter)


def lookup_delay(policy: DeliveryPolicy, lookups_made: int, jitter: float) -> timedelta:
    """Delay before lookup number ``lookups_made + 1`` of an attempt whose submit outcome is unknown."""
    base = _capped_growth(
        policy.lookup_first_delay.total_seconds(), 2.0, lookups_made, policy.lookup_max.total_seconds()
    )
    return timedelta(seconds=base * (0.9 + 0.2 * jitter))


def poll_delay(policy: DeliveryPolicy, polls_made: int, jitter: float) -> timedelta:
    """Delay before status poll number ``polls_made + 1``: doubling from poll_initial, capped."""
    base = _capped_growth(policy.poll_initial.total_seconds(), 2.0, polls_made, policy.poll_max.total_seconds())
    # +/-10 % jitter keeps restarts from aligning every intent's poll on the same second.
    return timedelta(seconds=base * (0.9 + 0.2 * jitter))


def proof_window(policy: DeliveryPolicy, validity: timedelta | None = None) -> timedelta:
    """How long after an attempt began "not found" can prove it was not accepted.

    An attempt's message, if it exists, was created within ``submit_in_flight_bound`` of the
    attempt's start and left the provider's queue within the validity it was sent with (the
    category's, else ``provider_queue_validity``) of its creation: sent, and so listed where a
    search by reference finds it, or dropped unsent.
    """
    return policy.submit_in_flight_bound + (validity if validity is not None else policy.provider_queue_validity)


def absence_proven(
    policy: DeliveryPolicy, attempt_started_at: datetime, not_found: NotFound, validity: timedelta | None = None
) -> bool:
    """Whether a search that found nothing proves the attempt was never accepted.

    Only when the search could have seen the message in every state the provider can hold it in:
    the adapter bounds the provider's queue time (``queue_bounded``) and the search began after
    the proof window; or the search lists every accepted message within a known lag
    (``listed_within_seconds``, an ESP's activity feed) and began after the in-flight bound plus
    that lag. Anything less is "not found yet", and the attempt is looked up again.
    """
    if not_found.searched_at is None:
        return False
    if not_found.queue_bounded:
        return not_found.searched_at >= attempt_started_at + proof_window(policy, validity)
    if not_found.listed_within_seconds is not None:
        listed_by = policy.submit_in_flight_bound + timedelta(seconds=not_found.listed_within_seconds)
        return not_found.searched_at >= attempt_started_at + listed_by
    return False
