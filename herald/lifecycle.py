"""The intent state machine as pure functions: no I/O, no clocks, no randomness.

    pending ──► submitting ──► accepted ──► delivered | undelivered
       ▲            │  ▲            │
       │            │  └─ lookup ───┤   (an unknown submit is resolved by looking
       │            ▼               ▼    the same attempt up, never by resending)
       └──── retryable_failure ◄────┘
    terminal: delivered, undelivered, unknown, permanent_failure, expired, cancelled, suppressed

States only move forward and terminal states absorb: a late, duplicate or
contradictory observation is recorded, never applied. Reports and polls are two
observations of one attempt and go through ``observe`` alike.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from herald.outcomes import Frozen, ProviderStatus


class IntentState(str, Enum):
    PENDING = "pending"
    SUBMITTING = "submitting"
    ACCEPTED = "accepted"
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"
    RETRYABLE_FAILURE = "retryable_failure"
    PERMANENT_FAILURE = "permanent_failure"
    UNKNOWN = "unknown"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    SUPPRESSED = "suppressed"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        IntentState.DELIVERED,
        IntentState.UNDELIVERED,
        IntentState.UNKNOWN,
        IntentState.PERMANENT_FAILURE,
        IntentState.EXPIRED,
        IntentState.CANCELLED,
        IntentState.SUPPRESSED,
    }
)

# Declared transitions; anything else is a bug in the caller, not a judgement call.
ALLOWED_TRANSITIONS: dict[IntentState, frozenset[IntentState]] = {
    IntentState.PENDING: frozenset(
        {IntentState.SUBMITTING, IntentState.EXPIRED, IntentState.CANCELLED, IntentState.SUPPRESSED}
    ),
    IntentState.SUBMITTING: frozenset(
        {
            IntentState.ACCEPTED,
            IntentState.DELIVERED,
            IntentState.UNDELIVERED,
            IntentState.RETRYABLE_FAILURE,
            IntentState.PERMANENT_FAILURE,
            IntentState.UNKNOWN,
            IntentState.EXPIRED,
            IntentState.CANCELLED,
        }
    ),
    IntentState.ACCEPTED: frozenset(
        {
            IntentState.DELIVERED,
            IntentState.UNDELIVERED,
            IntentState.RETRYABLE_FAILURE,
            IntentState.PERMANENT_FAILURE,
            IntentState.UNKNOWN,
            IntentState.EXPIRED,
            IntentState.CANCELLED,
        }
    ),
    # Back to pending for a new attempt; or forward, when late evidence shows the attempt that
    # a lookup called "not accepted" was accepted after all (then no second message is sent).
    IntentState.RETRYABLE_FAILURE: frozenset(
        {
            IntentState.PENDING,
            IntentState.ACCEPTED,
            IntentState.DELIVERED,
            IntentState.UNDELIVERED,
            IntentState.PERMANENT_FAILURE,
            IntentState.EXPIRED,
            IntentState.CANCELLED,
        }
    ),
    **{state: frozenset() for state in TERMINAL_STATES},
}


class Source(str, Enum):
    """Who produced a fact: the four observation paths of the design, plus the clocks."""

    SUBMIT = "submit"
    POLL = "poll"
    REPORT = "report"
    OPERATOR = "operator"
    CLOCK = "clock"
    LEDGER = "ledger"
    CLIENT = "client"


class AttemptView(Frozen):
    """What the workflow knows about one attempt when an observation arrives."""

    number: int
    provider_id: str | None = None
    provider_status: ProviderStatus | None = None


class Observation(Frozen):
    """One provider fact about one attempt, from a submit answer, a poll or a report."""

    attempt_number: int
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    source: Source
    observed_at: datetime


class Verdict(Frozen):
    """The result of judging an observation: whether it moves the attempt, and the intent."""

    applied: bool
    reason: str
    attempt_status: ProviderStatus | None
    intent_state: IntentState


# States in which a provider observation of the current attempt may move the intent.
_OBSERVABLE_STATES = frozenset({IntentState.SUBMITTING, IntentState.ACCEPTED, IntentState.RETRYABLE_FAILURE})
_PROOF_OF_ACCEPTANCE = frozenset(
    {ProviderStatus.QUEUED, ProviderStatus.SENT, ProviderStatus.DELIVERED, ProviderStatus.UNDELIVERED}
)


def check_transition(current: IntentState, target: IntentState) -> None:
    if target not in ALLOWED_TRANSITIONS[current]:
        raise ValueError(f"transition {current.value} -> {target.value} is not declared")


def observe(
    state: IntentState,
    attempt: AttemptView,
    current_attempt_number: int,
    observation: Observation,
    retryable_code: bool,
) -> Verdict:
    """Judge one provider observation against the intent and the attempt it names.

    Args:
        state: the intent's state now.
        attempt: the attempt the observation names, as the workflow knows it.
        current_attempt_number: the intent's newest attempt; only it may move the intent.
        observation: the fact to judge.
        retryable_code: whether the observation's error code is classified retryable,
            so an undelivered/failed attempt may return the intent to pending.

    Returns:
        A verdict: ``applied`` is False for stale, duplicate or contradictory facts,
        which the caller still records with the verdict's reason.
    """
    if attempt.provider_id is not None and attempt.provider_id != observation.provider_id:
        return Verdict(
            applied=False,
            reason=f"names provider id {observation.provider_id}, attempt {attempt.number} is {attempt.provider_id}",
            attempt_status=attempt.provider_status,
            intent_state=state,
        )
    previous = attempt.provider_status
    if previous is not None:
        if previous == observation.status:
            return Verdict(
                applied=False, reason=f"duplicate: attempt already {previous.value}", attempt_status=previous, intent_state=state
            )
        if previous.is_final:
            return Verdict(
                applied=False,
                reason=f"attempt already final ({previous.value}); {observation.status.value} ignored",
                attempt_status=previous,
                intent_state=state,
            )
        if observation.status.rank < previous.rank:
            return Verdict(
                applied=False,
                reason=f"stale: {observation.status.value} arrived after {previous.value}",
                attempt_status=previous,
                intent_state=state,
            )
    # The attempt-level fact is accepted; now decide whether it moves the intent.
    status = observation.status
    if state.is_terminal:
        return Verdict(
            applied=True,
            reason=f"attempt {attempt.number} {status.value}; intent stays {state.value} (terminal)",
            attempt_status=status,
            intent_state=state,
        )
    if state not in _OBSERVABLE_STATES:
        return Verdict(
            applied=True,
            reason=f"attempt {attempt.number} {status.value}; intent is {state.value}",
            attempt_status=status,
            intent_state=state,
        )
    if state is IntentState.RETRYABLE_FAILURE and status not in _PROOF_OF_ACCEPTANCE:
        return Verdict(
            applied=True,
            reason=f"attempt {attempt.number} {status.value}; intent already awaits a retry",
            attempt_status=status,
            intent_state=state,
        )
    if attempt.number != current_attempt_number:
        return Verdict(
            applied=True,
            reason=f"attempt {attempt.number} {status.value}; attempt {current_attempt_number} is current",
            attempt_status=status,
            intent_state=state,
        )
    target = intent_state_for(status, retryable_code)
    return Verdict(
        applied=True,
        reason=f"attempt {attempt.number} {status.value} ({observation.source.value})",
        attempt_status=status,
        intent_state=target,
    )


def intent_state_for(status: ProviderStatus, retryable_code: bool) -> IntentState:
    """Map a provider status of the current attempt onto the intent's state."""
    if status in (ProviderStatus.QUEUED, ProviderStatus.SENT):
        return IntentState.ACCEPTED
    if status is ProviderStatus.DELIVERED:
        return IntentState.DELIVERED
    if retryable_code:
        return IntentState.RETRYABLE_FAILURE
    if status is ProviderStatus.UNDELIVERED:
        return IntentState.UNDELIVERED
    return IntentState.PERMANENT_FAILURE
