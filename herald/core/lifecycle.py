"""The intent state machine as pure functions: no I/O, no clocks, no randomness.

    pending ──► submitting ──► accepted ──► delivered | undelivered
       ▲            │  ▲            │
       │            │  └─ lookup ───┤   (an unknown submit is resolved by looking
       │            ▼               ▼    the same attempt up, never by resending)
       └──── retryable_failure ◄────┘
    terminal: delivered, undelivered, unknown, permanent_failure, expired, cancelled, suppressed,
              relayed (an SMTP relay without delivery events took it: nothing more can be known)

States only move forward and terminal states absorb: a late, duplicate or
contradictory observation is recorded, never applied. Reports and polls are two
observations of one attempt and go through ``observe`` alike.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from herald.core.outcomes import Frozen, ProviderStatus


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
    # Handed to a relay that reports nothing back (an SMTP relay without an event webhook): the
    # relay accepted it, and that is all anyone will know. Never called delivered.
    RELAYED = "relayed"

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
        IntentState.RELAYED,
    }
)

# An attempt is out at the provider and not resolved: looked up or polled, never resent.
OPEN_STATES = frozenset({IntentState.SUBMITTING, IntentState.ACCEPTED})

# How an expiry that caught the submit still queued on the route begins its reason, so the ledger's
# report can count those closes apart from other expiries.
EXPIRED_IN_QUEUE_MARK = "expired in the route queue"

# Where an intent with an attempt at its provider (submitting, accepted) may go as that attempt
# settles, or as a clock or a cancel closes the intent.
_ATTEMPT_SETTLED = frozenset(
    {
        IntentState.DELIVERED,
        IntentState.UNDELIVERED,
        IntentState.RETRYABLE_FAILURE,
        IntentState.PERMANENT_FAILURE,
        IntentState.UNKNOWN,
        IntentState.EXPIRED,
        IntentState.CANCELLED,
    }
)
# Where an intent between attempts (pending, retryable_failure) may go besides its next step: late
# evidence about an earlier attempt (herald.core.evidence) settles it, or a clock or a cancel closes it.
_BETWEEN_ATTEMPTS = frozenset(
    {
        IntentState.ACCEPTED,
        IntentState.DELIVERED,
        IntentState.UNDELIVERED,
        IntentState.PERMANENT_FAILURE,
        IntentState.EXPIRED,
        IntentState.CANCELLED,
    }
)
# Declared transitions; anything else is a bug in the caller, not a judgement call.
ALLOWED_TRANSITIONS: dict[IntentState, frozenset[IntentState]] = {
    # Beyond submitting: late evidence arriving while a new attempt waits to be prepared settles the
    # intent instead; the send policy may suppress it.
    IntentState.PENDING: _BETWEEN_ATTEMPTS | {IntentState.SUBMITTING, IntentState.SUPPRESSED},
    IntentState.SUBMITTING: _ATTEMPT_SETTLED | {IntentState.ACCEPTED},
    # Back to submitting only when the accepted attempt failed while another attempt's outcome is
    # still unknown (two attempts open at once happen only after a wrong "not accepted").
    IntentState.ACCEPTED: _ATTEMPT_SETTLED | {IntentState.RELAYED, IntentState.SUBMITTING},
    # Back to pending for a new attempt; or forward, when late evidence shows the attempt that
    # a lookup called "not accepted" was accepted after all (then no second message is sent).
    IntentState.RETRYABLE_FAILURE: _BETWEEN_ATTEMPTS | {IntentState.PENDING},
    **{state: frozenset() for state in TERMINAL_STATES},
}


class SubmitResult(str, Enum):
    """What the submit step established about one attempt, before any lookup or report."""

    ACCEPTED = "accepted"  # the provider returned its id
    UNKNOWN = "unknown"  # the request may have reached the provider; looked up, never resent
    # Provably nothing reached the provider (an outage): retried until the deadline, budget unspent.
    UNREACHABLE = "unreachable"
    RETRYABLE = "retryable"  # a definite "not now" for this message: the provider does not have it
    REJECTED = "rejected"  # a definite, permanent refusal
    NOT_SENT = "not_sent"  # the ledger was away, so the provider was never called
    NOT_ACCEPTED = "not_accepted"  # was unknown; a lookup then proved the provider never took it
    # Was unknown, and no event carrying its reference came within the evidence window (providers
    # without lookups): presumed not accepted by a recorded rule, never proven.
    NO_EVIDENCE = "no_evidence"

    @property
    def presumption(self) -> str | None:
        """Why Herald concluded the provider does not have this attempt (and so may send another),
        or None when it concluded no such thing. The ledger's duplicate counts group by it."""
        return _PRESUMPTIONS.get(self)


_PRESUMPTIONS = {
    SubmitResult.RETRYABLE: "submit_refused",
    SubmitResult.UNREACHABLE: "provider_unreachable",
    SubmitResult.NOT_ACCEPTED: "lookup_not_found",
    SubmitResult.NO_EVIDENCE: "events_absent",
}


class ObservationKind(str, Enum):
    """What an observation row records (the ledger's ``observations.kind``)."""

    # The submit step's answer, one of SubmitResult's values.
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    UNREACHABLE = "unreachable"
    RETRYABLE = "retryable"
    REJECTED = "rejected"
    NOT_SENT = "not_sent"
    # An attempt whose answer was lost, sent again under its own id to a provider that refuses a
    # repeat within its grace: written before the call (the claim on it); the answer follows.
    RESUBMITTED = "resubmitted"
    # A lookup or poll: the provider has it (with its status), has no such message, or could not say.
    FOUND = "found"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    # The evidence window of a provider without lookups passed with no event about the attempt,
    # while its event stream was demonstrably flowing past it: presumed not accepted.
    NO_EVIDENCE = "no_evidence"
    # The same window passed while the event stream was not (silent, or interrupted around the
    # attempt): silence proves nothing, and the attempt keeps waiting for evidence.
    STREAM_SILENT = "stream_silent"
    STATUS = "status"  # a delivery report
    DEFERRED = "deferred"  # a clock or the send policy held the next attempt back
    POLICY_SUPPRESSED = "policy_suppressed"  # the send policy refused the intent for good
    KEY_CONFLICT = "key_conflict"  # a client reused the key with another payload
    PROVIDER_CANCEL = "provider_cancel"  # the answer to asking the provider to drop an attempt
    # Evidence that the provider had an attempt Herald had concluded it never took: a duplicate
    # Herald may have caused, recorded so its own report counts it.
    PRESUMED_NOT_ACCEPTED_THEN_SEEN = "presumed_not_accepted_then_seen"


class Source(str, Enum):
    """Who produced a fact: the four observation paths of the design, plus the clocks."""

    SUBMIT = "submit"
    POLL = "poll"
    REPORT = "report"
    OPERATOR = "operator"
    CLOCK = "clock"
    LEDGER = "ledger"
    CLIENT = "client"
    POLICY = "policy"  # the send policy deferred or suppressed an attempt before it was sent


class AttemptView(Frozen):
    """What the workflow knows about one attempt when an observation arrives."""

    number: int
    provider_id: str | None = None
    provider_status: ProviderStatus | None = None
    submit_result: SubmitResult | None = None
    # For a final failed/undelivered status: whether its error code is classified retryable.
    failure_retryable: bool = False


class Observation(Frozen):
    """One provider fact about one attempt, from a submit answer, a poll or a report."""

    attempt_number: int
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    source: Source
    observed_at: datetime
    # The adapter's (or receipt edge's) classification: whether a failure may be retried.
    failure_retryable: bool = False


class Verdict(Frozen):
    """The result of judging an observation: whether it moves the attempt, and the intent."""

    applied: bool
    reason: str
    attempt_status: ProviderStatus | None
    intent_state: IntentState


def check_transition(current: IntentState, target: IntentState) -> None:
    if target not in ALLOWED_TRANSITIONS[current]:
        raise ValueError(f"transition {current.value} -> {target.value} is not declared")


def judge_attempt(state: IntentState, attempt: AttemptView, observation: Observation) -> Verdict | None:
    """The attempt-level rules: None when the fact may be applied to the attempt, else the
    verdict that records it unapplied (another provider id, a duplicate, after a final status,
    or stale)."""
    if attempt.provider_id is not None and attempt.provider_id != observation.provider_id:
        return Verdict(
            applied=False,
            reason=f"names provider id {observation.provider_id}, attempt {attempt.number} is {attempt.provider_id}",
            attempt_status=attempt.provider_status,
            intent_state=state,
        )
    previous = attempt.provider_status
    if previous is None:
        return None
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
    return None


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
