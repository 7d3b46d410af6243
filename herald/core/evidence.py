"""Best evidence across an intent's attempts: where the intent stands, and when another attempt may go.

An intent can have several attempts, and what Herald learns about them does not arrive in order:
a lookup proves attempt 1 absent, attempt 2 goes out, then a report for attempt 1 arrives after
all. Two rules keep that from becoming a third message or a wrong outcome:

* ``may_dispatch``: a new attempt only while every attempt so far has ended without reaching the
  recipient (refused for now, proven absent, never sent, or failed with a retryable code). Proof
  that any attempt was accepted stops dispatch at once, whichever attempt is current.
* ``settle``: the intent follows the best evidence across all its attempts, ranked

      delivered > accepted (live) > outcome unknown > undelivered / refused > retryable

  so a delivered copy wins over a later failure, and an intent is never closed as a failure
  while one of its attempts is delivered or may still be.

Each attempt's evidence is reduced to one ``Standing`` first; the ranking works on those.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from herald.core.lifecycle import AttemptView, IntentState, Observation, SubmitResult, Verdict, judge_attempt
from herald.core.outcomes import ProviderStatus


class Standing(str, Enum):
    """Where one attempt stands, judged from everything known about it."""

    IN_FLIGHT = "in_flight"  # handed to the provider (or about to be) and its outcome is not known
    LIVE = "live"  # the provider has it and reported no final status yet
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"  # final: the carrier could not deliver, and retrying would not help
    REFUSED = "refused"  # final: rejected at submit, or failed with a permanent code
    # Ended without reaching the recipient and may be tried again: refused for now, proven absent,
    # never sent, or failed/undelivered with a retryable code.
    RETRYABLE = "retryable"


_NEGATIVE_SUBMITS = frozenset(
    {
        SubmitResult.RETRYABLE,
        SubmitResult.UNREACHABLE,
        SubmitResult.NOT_ACCEPTED,
        SubmitResult.NO_EVIDENCE,
        SubmitResult.NOT_SENT,
    }
)
_FINAL_FAILURES = frozenset({ProviderStatus.UNDELIVERED, ProviderStatus.FAILED, ProviderStatus.CANCELED})


def standing_of(attempt: AttemptView) -> Standing:
    """One attempt's standing: a provider status outranks what the submit step concluded."""
    status = attempt.provider_status
    if status is ProviderStatus.DELIVERED:
        return Standing.DELIVERED
    if status in (ProviderStatus.QUEUED, ProviderStatus.SENT):
        return Standing.LIVE
    if status in _FINAL_FAILURES:
        if attempt.failure_retryable:
            return Standing.RETRYABLE
        return Standing.UNDELIVERED if status is ProviderStatus.UNDELIVERED else Standing.REFUSED
    if attempt.submit_result in _NEGATIVE_SUBMITS:
        return Standing.RETRYABLE
    if attempt.submit_result is SubmitResult.REJECTED:
        return Standing.REFUSED
    # Not answered yet, or answered "unknown": the provider may have it.
    return Standing.IN_FLIGHT


def may_dispatch(attempts: Sequence[AttemptView]) -> bool:
    """Whether another attempt may be sent: only when every attempt so far ended without reaching
    the recipient and may be retried. Evidence that any attempt is live, delivered or unresolved
    stops dispatch, whichever attempt it concerns."""
    return all(standing_of(attempt) is Standing.RETRYABLE for attempt in attempts)


def settle(attempts: Sequence[AttemptView]) -> IntentState:
    """The intent state the best evidence across ``attempts`` supports (``PENDING`` with none)."""
    standings = [standing_of(attempt) for attempt in attempts]
    if Standing.DELIVERED in standings:
        return IntentState.DELIVERED
    if Standing.LIVE in standings:
        return IntentState.ACCEPTED
    if Standing.IN_FLIGHT in standings:
        return IntentState.SUBMITTING
    # Every attempt has ended without delivery; a permanent ending (the latest one) outranks a
    # retryable one: the recipient cannot be reached, so no further attempt would help.
    for standing in reversed(standings):
        if standing is Standing.UNDELIVERED:
            return IntentState.UNDELIVERED
        if standing is Standing.REFUSED:
            return IntentState.PERMANENT_FAILURE
    return IntentState.RETRYABLE_FAILURE if standings else IntentState.PENDING


def next_state(state: IntentState, attempts: Sequence[AttemptView]) -> IntentState:
    """Where the evidence moves an open intent (``state`` itself when it changes nothing).

    ``PENDING`` is a retryable failure whose backoff has run out: the evidence saying "retryable"
    leaves it pending. A terminal state absorbs everything.
    """
    if state.is_terminal:
        return state
    target = settle(attempts)
    if target is IntentState.RETRYABLE_FAILURE and state is IntentState.PENDING:
        return state
    return target


def observe_across(
    state: IntentState,
    attempts: Sequence[AttemptView],
    observation: Observation,
    retryable_code: bool,
) -> Verdict:
    """Judge one provider observation, then settle the intent on all its attempts' evidence.

    Args:
        state: the intent's state now.
        attempts: every attempt of the intent, in order, as the workflow knows them; the
            observation's ``attempt_number`` must name one of them.
        observation: the fact to judge.
        retryable_code: whether the observation's error code is classified retryable.

    Returns:
        A verdict: ``applied`` is False for another provider id, a duplicate, a fact after a
        final status or a stale one (recorded with the reason, never applied); ``intent_state``
        is where the evidence, this fact included, puts the intent.

    Raises:
        ValueError: the observation names no attempt in ``attempts``.
    """
    number = observation.attempt_number
    if not 1 <= number <= len(attempts) or attempts[number - 1].number != number:
        raise ValueError(f"observation names attempt {number}, which is not among the attempts given")
    attempt = attempts[number - 1]
    unapplied = judge_attempt(state, attempt, observation)
    if unapplied is not None:
        return unapplied
    status = observation.status
    updated = attempt.model_copy(
        update={
            "provider_id": observation.provider_id,
            "provider_status": status,
            "failure_retryable": status in _FINAL_FAILURES and retryable_code,
        }
    )
    views = [updated if view.number == number else view for view in attempts]
    target = next_state(state, views)
    reason = f"attempt {number} {status.value} ({observation.source.value})"
    if state.is_terminal:
        reason += f"; intent stays {state.value} (terminal)"
    elif target is not state and number != len(attempts):
        reason += f"; evidence about attempt {number} settles the intent (attempt {len(attempts)} is the latest)"
    elif target is state and number != len(attempts):
        reason += f"; intent stays {state.value} on the evidence of all {len(attempts)} attempts"
    return Verdict(applied=True, reason=reason, attempt_status=status, intent_state=target)

