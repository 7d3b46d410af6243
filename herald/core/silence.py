"""When the silence of an ESP's event stream counts as evidence, as a pure function of recorded facts.

An e-mail submit whose outcome is unknown (the connection dropped after DATA) can only be resolved
by evidence about it: an event carrying its reference, or the ESP's lookup where one is configured.
Without either, Herald may presume it was not accepted (and send once more) only when its absence
means something, which is when the stream that would have carried its events was flowing:

    silence_verdict(policy, attempt began, now, stream read from the ledger)
      ├── WINDOW_OPEN    the evidence window since the attempt has not passed ........ wait
      ├── NOT_PASSED     no event has arrived, posted as it happened, for a submission
      │                  made after the attempt could still have been in flight: the
      │                  stream is silent or has not reached it ......................... wait
      ├── SETTLING       it has, but less than a window ago: redelivered posts of the
      │                  moments before may still be on their way ...................... wait
      ├── INTERRUPTED    a post arrived late (redelivered) covering the time the
      │                  attempt's events would have been posted: they may still be in
      │                  the ESP's redelivery queue, until its redelivery period ends ... wait
      └── COUNTS         presumed not accepted: the rule, its inputs and the verdict
                         are recorded on the attempt

A wait is never a verdict: at the resolution horizon the intent ends ``unknown`` with the reason,
never resent. What stays out of reach, said plainly: an interruption that struck only this
attempt's events and whose redelivery comes later than the settling window after the stream moved
on is invisible to this rule; the ESP's lookup (``Capabilities.lookup_by_reference``) closes it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from herald.core.delivery_policy import DeliveryPolicy
from herald.core.outcomes import Frozen


class EventStream(Frozen):
    """What the ledger recorded of one ESP's event posts, read for one attempt (``event_stream_marks``)."""

    # The ESP the attempt was handed to; None when the ledger has no record of that (then nothing counts).
    provider: str | None
    # When a post from this ESP last arrived, whatever it carried (None: never).
    last_post_at: datetime | None = None
    # The first fresh post (posted as its events happened) naming a submission prepared after the
    # attempt's in-flight bound: when the stream was first seen live past the attempt.
    passed_at: datetime | None = None
    # The first late (redelivered) post whose events cover the time the attempt's events would
    # have been posted: the stream was interrupted around the attempt.
    interrupted_at: datetime | None = None


class EventStreamQuery(Frozen):
    """What the workflow asks the ledger about the stream that would carry one attempt's events."""

    attempt_ref: str
    # A fresh post naming a submission prepared at or after this shows the stream past the attempt.
    passed_after: datetime
    # The ESP times at which the attempt's events would have been posted.
    window_from: datetime
    window_to: datetime
    # A post later than this after its newest event was redelivered (the stream was interrupted).
    lag: timedelta


def stream_query(policy: DeliveryPolicy, attempt_ref: str, attempt_started_at: datetime) -> EventStreamQuery:
    """The ledger read that ``silence_verdict`` needs for one attempt."""
    window_from, window_to = attempt_event_window(policy, attempt_started_at)
    return EventStreamQuery(
        attempt_ref=attempt_ref,
        passed_after=passing_submissions_after(policy, attempt_started_at),
        window_from=window_from,
        window_to=window_to,
        lag=policy.event_stream_lag,
    )


class SilenceRule(str, Enum):
    WINDOW_OPEN = "window_open"
    NOT_PASSED = "not_passed"
    SETTLING = "settling"
    INTERRUPTED = "interrupted"
    COUNTS = "counts"


class SilenceVerdict(Frozen):
    rule: SilenceRule
    reason: str

    @property
    def counts(self) -> bool:
        return self.rule is SilenceRule.COUNTS


def passing_submissions_after(policy: DeliveryPolicy, attempt_started_at: datetime) -> datetime:
    """A submission prepared from this instant on was accepted, if at all, after this attempt could
    still have been: its events arriving show the stream has moved past the attempt."""
    return attempt_started_at + policy.submit_in_flight_bound


def attempt_event_window(policy: DeliveryPolicy, attempt_started_at: datetime) -> tuple[datetime, datetime]:
    """The ESP times at which the attempt's events, if it was accepted, would have been created and
    posted: from its start to the in-flight bound, widened by the stream's normal lag either side."""
    lag = policy.event_stream_lag
    return attempt_started_at - lag, attempt_started_at + policy.submit_in_flight_bound + lag


def silence_verdict(
    policy: DeliveryPolicy, attempt_started_at: datetime, now: datetime, stream: EventStream
) -> SilenceVerdict:
    """Whether the absence of events about an attempt counts as "not accepted" now.

    Args:
        policy: the windows (``event_evidence_window``, ``event_stream_lag``,
            ``event_redelivery_period``, ``submit_in_flight_bound``).
        attempt_started_at: when the attempt began (the workflow's clock).
        now: the workflow's clock.
        stream: the ESP's recorded posts, read for this attempt.
    """
    window = policy.event_evidence_window
    if now < attempt_started_at + window:
        return SilenceVerdict(
            rule=SilenceRule.WINDOW_OPEN,
            reason=f"evidence window open until {(attempt_started_at + window).isoformat()}",
        )
    silent_since = stream.last_post_at.isoformat() if stream.last_post_at else "ever (no post recorded)"
    if stream.provider is None or stream.passed_at is None:
        return SilenceVerdict(
            rule=SilenceRule.NOT_PASSED,
            reason=(
                f"waiting: event stream silent since {silent_since}; no event yet for a submission made after "
                f"{passing_submissions_after(policy, attempt_started_at).isoformat()}"
            ),
        )
    if now < stream.passed_at + window:
        return SilenceVerdict(
            rule=SilenceRule.SETTLING,
            reason=(
                f"waiting: event stream passed this attempt at {stream.passed_at.isoformat()}; its silence counts "
                f"from {(stream.passed_at + window).isoformat()} (posts redelivered meanwhile may still arrive)"
            ),
        )
    redelivered_until = attempt_started_at + policy.event_redelivery_period
    if stream.interrupted_at is not None and now < redelivered_until:
        return SilenceVerdict(
            rule=SilenceRule.INTERRUPTED,
            reason=(
                f"waiting: event stream was interrupted around this attempt (a redelivered post arrived at "
                f"{stream.interrupted_at.isoformat()}); its events may still be in the ESP's redelivery queue "
                f"until {redelivered_until.isoformat()}"
            ),
        )
    return SilenceVerdict(
        rule=SilenceRule.COUNTS,
        reason=(
            f"rule event_stream_silence: no event about this attempt, while the {stream.provider} event stream "
            f"passed it at {stream.passed_at.isoformat()} (fresh events for later submissions) "
            + (
                f"and its redelivery period after an interruption ended at {redelivered_until.isoformat()}"
                if stream.interrupted_at is not None
                else "with no interruption over its events"
            )
            + f"; window {window.total_seconds():g}s: presumed not accepted"
        ),
    )
