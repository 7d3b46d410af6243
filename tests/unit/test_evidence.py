"""Best evidence across attempts (``herald.core.evidence``) and the absence proof (``herald.core.delivery_policy``).

Table-driven cases first; then a model-based property test: a driver that takes the workflow's
decisions from exactly the functions the workflow calls (``observe_across``, ``next_state``,
``may_dispatch``, ``absence_proven``), fed random interleavings of submit answers, reports, lookups
and retry timers across several attempts, checked against an oracle written here from the raw facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from herald.core.delivery_policy import DeliveryPolicy, absence_proven, may_retry, proof_window
from herald.core.evidence import Standing, may_dispatch, next_state, observe_across, settle, standing_of
from herald.core.lifecycle import AttemptView, IntentState, Observation, Source, SubmitResult, check_transition
from herald.core.outcomes import NotFound, ProviderStatus
from herald.providers.twilio_codes import is_retryable
from tests.depth import examples

S = IntentState
P = ProviderStatus
R = SubmitResult
AT = datetime(2026, 1, 1, tzinfo=UTC)
RETRYABLE_CODE = 30008
PERMANENT_CODE = 30003


def view(number: int, status: ProviderStatus | None = None, submit: SubmitResult | None = None, **extra) -> AttemptView:
    provider_id = f"SM{number:032d}" if status is not None else None
    return AttemptView(number=number, provider_id=provider_id, provider_status=status, submit_result=submit, **extra)


def fact(number: int, status: ProviderStatus, code: int | None = None, source: Source = Source.REPORT) -> Observation:
    return Observation(
        attempt_number=number,
        provider_id=f"SM{number:032d}",
        status=status,
        error_code=code,
        source=source,
        observed_at=AT,
    )


# ---- standing and settle --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (view(1), Standing.IN_FLIGHT),
        (view(1, submit=R.UNKNOWN), Standing.IN_FLIGHT),
        (view(1, P.QUEUED, R.ACCEPTED), Standing.LIVE),
        (view(1, P.SENT, R.UNKNOWN), Standing.LIVE),
        (view(1, P.DELIVERED, R.NOT_ACCEPTED), Standing.DELIVERED),
        (view(1, P.UNDELIVERED, R.ACCEPTED), Standing.UNDELIVERED),
        (view(1, P.UNDELIVERED, R.ACCEPTED, failure_retryable=True), Standing.RETRYABLE),
        (view(1, P.FAILED, R.ACCEPTED), Standing.REFUSED),
        (view(1, P.CANCELED, R.ACCEPTED), Standing.REFUSED),
        (view(1, submit=R.RETRYABLE), Standing.RETRYABLE),
        (view(1, submit=R.NOT_ACCEPTED), Standing.RETRYABLE),
        (view(1, submit=R.NOT_SENT), Standing.RETRYABLE),
        (view(1, submit=R.REJECTED), Standing.REFUSED),
        # A provider status outranks what the submit step concluded.
        (view(1, P.SENT, R.NOT_ACCEPTED), Standing.LIVE),
    ],
)
def test_standing_of_an_attempt(attempt: AttemptView, expected: Standing) -> None:
    """Each attempt reduces to one standing; a provider status beats the submit step's conclusion."""
    assert standing_of(attempt) is expected


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        pytest.param([], S.PENDING, id="no-attempt"),
        pytest.param([view(1, submit=R.NOT_ACCEPTED), view(2, P.DELIVERED, R.ACCEPTED)], S.DELIVERED, id="retry-delivered"),
        pytest.param(
            [view(1, P.DELIVERED, R.NOT_ACCEPTED), view(2, P.UNDELIVERED, R.ACCEPTED)], S.DELIVERED, id="delivered-wins"
        ),
        pytest.param([view(1, P.SENT, R.NOT_ACCEPTED), view(2, P.FAILED, R.ACCEPTED)], S.ACCEPTED, id="live-beats-failure"),
        pytest.param([view(1, P.SENT, R.NOT_ACCEPTED), view(2, submit=R.UNKNOWN)], S.ACCEPTED, id="live-beats-unknown"),
        pytest.param([view(1, submit=R.NOT_ACCEPTED), view(2, submit=R.UNKNOWN)], S.SUBMITTING, id="unknown"),
        pytest.param(
            [view(1, P.UNDELIVERED, R.NOT_ACCEPTED), view(2, submit=R.RETRYABLE)], S.UNDELIVERED, id="permanent-beats-retry"
        ),
        pytest.param([view(1, submit=R.RETRYABLE), view(2, submit=R.REJECTED)], S.PERMANENT_FAILURE, id="rejected"),
        pytest.param([view(1, submit=R.RETRYABLE), view(2, submit=R.NOT_ACCEPTED)], S.RETRYABLE_FAILURE, id="all-retryable"),
    ],
)
def test_settle_follows_the_best_evidence(attempts: list[AttemptView], expected: IntentState) -> None:
    """Delivered > accepted > unknown > permanent failure > retryable failure, across every attempt."""
    assert settle(attempts) is expected


def test_next_state_keeps_pending_and_terminal_states() -> None:
    """A retryable verdict leaves a pending intent pending (its backoff already ran); a terminal state absorbs."""
    retryable = [view(1, submit=R.NOT_ACCEPTED)]
    assert next_state(S.PENDING, retryable) is S.PENDING
    assert next_state(S.CANCELLED, [view(1, P.DELIVERED, R.ACCEPTED)]) is S.CANCELLED
    assert next_state(S.PENDING, [view(1, P.SENT, R.NOT_ACCEPTED)]) is S.ACCEPTED


@pytest.mark.parametrize(
    ("attempts", "allowed"),
    [
        ([view(1, submit=R.NOT_ACCEPTED)], True),
        ([view(1, submit=R.RETRYABLE), view(2, P.FAILED, R.ACCEPTED, failure_retryable=True)], True),
        ([view(1, submit=R.NOT_SENT)], True),
        ([view(1, P.SENT, R.NOT_ACCEPTED)], False),
        ([view(1, P.QUEUED, R.NOT_ACCEPTED), view(2, submit=R.NOT_ACCEPTED)], False),
        ([view(1, P.DELIVERED, R.NOT_ACCEPTED), view(2, submit=R.NOT_ACCEPTED)], False),
        ([view(1, submit=R.UNKNOWN)], False),
        ([view(1, submit=R.REJECTED)], False),
    ],
)
def test_may_dispatch_only_when_every_attempt_ended_without_reaching_anyone(
    attempts: list[AttemptView], allowed: bool
) -> None:
    """Proof that any attempt is live, delivered or unresolved stops dispatch, whichever attempt is current."""
    assert may_dispatch(attempts) is allowed


# ---- observe_across -------------------------------------------------------------------------------


def test_report_for_an_attempt_presumed_absent_stops_the_retry() -> None:
    """A `sent` report for attempt 1, presumed not accepted, moves an intent waiting to retry to accepted."""
    attempts = [view(1, submit=R.NOT_ACCEPTED)]
    verdict = observe_across(S.RETRYABLE_FAILURE, attempts, fact(1, P.SENT), retryable_code=False)
    assert verdict.applied and verdict.intent_state is S.ACCEPTED


def test_report_for_an_earlier_attempt_settles_while_the_latest_is_unknown() -> None:
    """Attempt 1 delivered while attempt 2 is still unknown: the intent is delivered, and says why."""
    attempts = [view(1, submit=R.NOT_ACCEPTED), view(2, submit=R.UNKNOWN)]
    verdict = observe_across(S.SUBMITTING, attempts, fact(1, P.DELIVERED), retryable_code=False)
    assert verdict.intent_state is S.DELIVERED
    assert "evidence about attempt 1 settles the intent" in verdict.reason


def test_a_later_failure_never_beats_a_delivered_copy() -> None:
    """Attempt 2 failing permanently after attempt 1 was delivered changes nothing about the outcome."""
    attempts = [view(1, P.SENT, R.NOT_ACCEPTED), view(2, P.SENT, R.ACCEPTED)]
    first = observe_across(S.ACCEPTED, attempts, fact(1, P.DELIVERED), retryable_code=False)
    assert first.intent_state is S.DELIVERED
    attempts = [view(1, P.DELIVERED, R.NOT_ACCEPTED), view(2, P.SENT, R.ACCEPTED)]
    later = observe_across(S.ACCEPTED, attempts, fact(2, P.UNDELIVERED, PERMANENT_CODE), retryable_code=False)
    assert later.intent_state is S.DELIVERED


def test_failure_of_the_current_attempt_waits_for_a_live_earlier_copy() -> None:
    """While attempt 1 is live, attempt 2 undelivered does not close the intent: attempt 1 may still arrive."""
    attempts = [view(1, P.SENT, R.NOT_ACCEPTED), view(2, P.SENT, R.ACCEPTED)]
    verdict = observe_across(S.ACCEPTED, attempts, fact(2, P.UNDELIVERED, PERMANENT_CODE), retryable_code=False)
    assert verdict.applied and verdict.intent_state is S.ACCEPTED


# A fact about attempt 1, whose submit concluded it was never accepted, arriving while the intent is
# in each state it can hold then. Expected intent state per kind of fact: a live or delivered copy
# settles the intent at once; a failure closes it only when no other attempt is live or unresolved,
# and a retryable one never does (a pending intent stays pending: its backoff already ran).
LATE_FACT_CONTEXTS = {
    "submitting, attempt 2 unknown": (S.SUBMITTING, [view(1, submit=R.NOT_ACCEPTED), view(2, submit=R.UNKNOWN)]),
    "accepted, attempt 2 live": (S.ACCEPTED, [view(1, submit=R.NOT_ACCEPTED), view(2, P.SENT, R.ACCEPTED)]),
    "retryable_failure, attempt 2 refused": (
        S.RETRYABLE_FAILURE,
        [view(1, submit=R.NOT_ACCEPTED), view(2, submit=R.RETRYABLE)],
    ),
    "pending, attempt 2 refused": (S.PENDING, [view(1, submit=R.NOT_ACCEPTED), view(2, submit=R.RETRYABLE)]),
    "retryable_failure, only attempt": (S.RETRYABLE_FAILURE, [view(1, submit=R.NOT_ACCEPTED)]),
    "pending, only attempt": (S.PENDING, [view(1, submit=R.NOT_ACCEPTED)]),
}
LATE_FACT_EXPECTED = {
    #                                       live         delivered     retryable failure    undelivered     failed/canceled
    "submitting, attempt 2 unknown":        (S.ACCEPTED, S.DELIVERED, S.SUBMITTING,        S.SUBMITTING,   S.SUBMITTING),
    "accepted, attempt 2 live":             (S.ACCEPTED, S.DELIVERED, S.ACCEPTED,          S.ACCEPTED,     S.ACCEPTED),
    "retryable_failure, attempt 2 refused": (S.ACCEPTED, S.DELIVERED, S.RETRYABLE_FAILURE, S.UNDELIVERED,  S.PERMANENT_FAILURE),
    "pending, attempt 2 refused":           (S.ACCEPTED, S.DELIVERED, S.PENDING,           S.UNDELIVERED,  S.PERMANENT_FAILURE),
    "retryable_failure, only attempt":      (S.ACCEPTED, S.DELIVERED, S.RETRYABLE_FAILURE, S.UNDELIVERED,  S.PERMANENT_FAILURE),
    "pending, only attempt":                (S.ACCEPTED, S.DELIVERED, S.PENDING,           S.UNDELIVERED,  S.PERMANENT_FAILURE),
}  # fmt: skip


@pytest.mark.parametrize("context", list(LATE_FACT_CONTEXTS))
@pytest.mark.parametrize("status", list(P), ids=str)
@pytest.mark.parametrize("retryable", [False, True], ids=["permanent-code", "retryable-code"])
def test_late_fact_about_an_attempt_presumed_absent_settles_the_intent(
    context: str, status: ProviderStatus, retryable: bool
) -> None:
    """Evidence about an earlier attempt, or about the one awaiting its retry, moves the intent to the
    best evidence across all attempts: whichever attempt it names, and while pending too."""
    state, attempts = LATE_FACT_CONTEXTS[context]
    live, delivered, retryable_failure, undelivered, failed = LATE_FACT_EXPECTED[context]
    if status in (P.QUEUED, P.SENT):
        expected = live
    elif status is P.DELIVERED:
        expected = delivered
    elif retryable:
        expected = retryable_failure
    else:
        expected = undelivered if status is P.UNDELIVERED else failed
    verdict = observe_across(state, attempts, fact(1, status), retryable_code=retryable)
    assert verdict.applied and verdict.attempt_status is status
    assert verdict.intent_state is expected
    if expected is not state:
        check_transition(state, expected)
    if len(attempts) == 2:
        said = "settles the intent" if expected is not state else f"stays {state.value} on the evidence of all 2"
        assert said in verdict.reason


def test_observe_across_keeps_the_attempt_level_rules() -> None:
    """Duplicates, stale facts and another provider id are recorded unapplied, exactly as before."""
    attempts = [view(1, P.DELIVERED, R.ACCEPTED)]
    assert not observe_across(S.DELIVERED, attempts, fact(1, P.DELIVERED), retryable_code=False).applied
    assert not observe_across(S.DELIVERED, attempts, fact(1, P.SENT), retryable_code=False).applied
    other = fact(1, P.DELIVERED).model_copy(update={"provider_id": "SMother"})
    assert not observe_across(S.ACCEPTED, [view(1, P.SENT, R.ACCEPTED)], other, retryable_code=False).applied


def test_observe_across_refuses_an_attempt_it_was_not_given() -> None:
    """An observation naming an attempt outside the list is a caller bug, not a verdict."""
    with pytest.raises(ValueError, match="attempt 3"):
        observe_across(S.SUBMITTING, [view(1, submit=R.UNKNOWN)], fact(3, P.SENT), retryable_code=False)


# ---- the absence proof ----------------------------------------------------------------------------

POLICY = DeliveryPolicy(submit_in_flight_bound=timedelta(seconds=60), provider_queue_validity=timedelta(seconds=600))


def not_found(after: timedelta, *, bounded: bool = True) -> NotFound:
    return NotFound(searched_since=AT, searched_at=AT + after, queue_bounded=bounded)


def test_proof_window_is_in_flight_bound_plus_queue_validity() -> None:
    """The window is the time a request can still create the message plus the time it may then stay queued."""
    assert proof_window(POLICY) == timedelta(seconds=660)


@pytest.mark.parametrize(
    ("result", "proven"),
    [
        # The in-flight bound alone proves nothing: a request may have created the message, still queued.
        (not_found(timedelta(seconds=60)), False),
        (not_found(timedelta(seconds=659)), False),
        (not_found(timedelta(seconds=660)), True),
        (not_found(timedelta(hours=3)), True),
        (not_found(timedelta(hours=3), bounded=False), False),
        (NotFound(searched_since=AT, queue_bounded=True), False),
    ],
)
def test_absence_is_proven_only_once_the_provider_cannot_hold_it_unlisted(result: NotFound, proven: bool) -> None:
    """"Not found" proves absence only from a search begun after the window, from an adapter whose queue is bounded."""
    assert absence_proven(POLICY, AT, result) is proven


@pytest.mark.parametrize("seconds", [0, 0.5, 1.5, 36_001])
def test_queue_validity_must_be_whole_seconds_twilio_accepts(seconds: float) -> None:
    """The queue bound is sent as Twilio's ValidityPeriod: whole seconds from 1 to 36,000, or the policy is refused."""
    with pytest.raises(ValidationError, match="provider_queue_validity"):
        DeliveryPolicy(provider_queue_validity=timedelta(seconds=seconds))


# ---- the model-based property ---------------------------------------------------------------------

EVIDENCE_STATUSES = [P.QUEUED, P.SENT, P.DELIVERED, P.UNDELIVERED, P.FAILED]
CODES = st.sampled_from([None, RETRYABLE_CODE, PERMANENT_CODE])
LIVE = {P.QUEUED, P.SENT}


@dataclass
class Attempt:
    number: int
    submit: SubmitResult | None = None
    status: ProviderStatus | None = None
    code: int | None = None
    retryable_failure: bool = False

    def view(self) -> AttemptView:
        return AttemptView(
            number=self.number,
            provider_id=f"SM{self.number:032d}" if self.status is not None else None,
            provider_status=self.status,
            submit_result=self.submit,
            failure_retryable=self.retryable_failure,
        )


@dataclass
class Workflow:
    """The workflow's bookkeeping, its decisions taken from the functions NotificationWorkflow calls."""

    policy: DeliveryPolicy
    state: IntentState = S.PENDING
    attempts: list[Attempt] = field(default_factory=list)
    # Each dispatch, with what was known at that moment (for the property).
    dispatched_with: list[list[Attempt]] = field(default_factory=list)
    closed_with: tuple[IntentState, list[tuple[ProviderStatus | None, SubmitResult | None, bool]]] | None = None

    def views(self) -> list[AttemptView]:
        return [attempt.view() for attempt in self.attempts]

    def move(self, target: IntentState) -> None:
        if target is self.state:
            return
        check_transition(self.state, target)
        self.state = target
        if target.is_terminal and self.closed_with is None:
            self.closed_with = (target, [(a.status, a.submit, a.retryable_failure) for a in self.attempts])

    def settle(self) -> None:
        self.move(next_state(self.state, self.views()))

    def dispatch(self) -> None:
        if not may_dispatch(self.views()):
            self.settle()
            return
        self.dispatched_with.append([Attempt(**vars(a)) for a in self.attempts])
        self.attempts.append(Attempt(len(self.attempts) + 1))
        self.move(S.SUBMITTING)

    def submit_answer(self, answer: str, status: ProviderStatus) -> None:
        current = self.attempts[-1]
        if current.submit is not None:
            return
        current.submit = SubmitResult(answer)
        if answer == "accepted":
            self.observe(Observation(attempt_number=current.number, provider_id=f"SM{current.number:032d}",
                                     status=status, source=Source.SUBMIT, observed_at=AT))  # fmt: skip
        else:
            self.settle()

    def observe(self, observation: Observation) -> None:
        if not 1 <= observation.attempt_number <= len(self.attempts):
            return  # the workflow records it as naming an attempt it never made
        attempt = self.attempts[observation.attempt_number - 1]
        retryable = is_retryable(observation.error_code)
        verdict = observe_across(self.state, self.views(), observation, retryable)
        if verdict.applied:
            attempt.status = verdict.attempt_status
            attempt.code = observation.error_code
            attempt.retryable_failure = observation.status in (P.UNDELIVERED, P.FAILED) and retryable
        self.move(verdict.intent_state)

    def lookup_not_found(self, number: int) -> None:
        """A search past the proof window found nothing for an attempt whose submit is unknown."""
        attempt = self.attempts[number - 1] if 1 <= number <= len(self.attempts) else None
        if attempt is None or attempt.submit is not SubmitResult.UNKNOWN or attempt.status is not None:
            return
        result = NotFound(searched_since=AT, searched_at=AT + proof_window(self.policy), queue_bounded=True)
        if absence_proven(self.policy, AT, result):
            attempt.submit = SubmitResult.NOT_ACCEPTED
            self.settle()

    def retry_timer(self) -> None:
        if self.state is not S.RETRYABLE_FAILURE:
            return
        if not may_retry(self.policy, len(self.attempts)):
            self.move(S.PERMANENT_FAILURE)
            return
        self.move(S.PENDING)
        self.dispatch()


def oracle(facts: list[tuple[ProviderStatus | None, SubmitResult | None, bool]]) -> IntentState:
    """The best evidence, written from the raw facts and independent of herald.core.evidence."""
    statuses = [status for status, _, _ in facts]
    if P.DELIVERED in statuses:
        return S.DELIVERED
    if any(status in LIVE for status in statuses):
        return S.ACCEPTED
    if any(status is None and submit in (None, R.UNKNOWN, R.ACCEPTED) for status, submit, _ in facts):
        return S.SUBMITTING
    for status, submit, retryable in reversed(facts):
        if status is P.UNDELIVERED and not retryable:
            return S.UNDELIVERED
        if (status in (P.FAILED, P.CANCELED) and not retryable) or (status is None and submit is R.REJECTED):
            return S.PERMANENT_FAILURE
    return S.RETRYABLE_FAILURE


EVENTS = st.one_of(
    st.tuples(st.just("answer"), st.sampled_from(["accepted", "unknown", "retryable", "rejected"]),
              st.sampled_from([P.QUEUED, P.SENT])),  # fmt: skip
    st.tuples(st.just("report"), st.integers(1, 4), st.sampled_from(EVIDENCE_STATUSES), CODES),
    st.tuples(st.just("not_found"), st.integers(1, 4)),
    st.tuples(st.just("retry_timer")),
)


@settings(derandomize=True, database=None, max_examples=examples(600), deadline=None)
@given(max_attempts=st.integers(1, 4), events=st.lists(EVENTS, max_size=40))
def test_no_submit_follows_evidence_of_acceptance_and_the_outcome_is_the_best_evidence(
    max_attempts: int, events: list[tuple]
) -> None:
    """For any interleaving of submit answers, reports and lookups across several attempts: no attempt
    is dispatched while an earlier one is live, delivered or unresolved, the state always equals the
    best evidence (an oracle from the raw facts), and a terminal outcome is the best evidence at its close."""
    workflow = Workflow(DeliveryPolicy(max_attempts=max_attempts))
    workflow.dispatch()
    for event in events:
        if event[0] == "answer":
            workflow.submit_answer(event[1], event[2])
        elif event[0] == "report":
            _, number, status, code = event
            workflow.observe(Observation(attempt_number=number, provider_id=f"SM{number:032d}", status=status,
                                         error_code=code, source=Source.REPORT, observed_at=AT))  # fmt: skip
        elif event[0] == "not_found":
            workflow.lookup_not_found(event[1])
        else:
            workflow.retry_timer()
        if not workflow.state.is_terminal:
            expected = oracle([(a.status, a.submit, a.retryable_failure) for a in workflow.attempts])
            if workflow.state is S.PENDING:
                assert expected is S.RETRYABLE_FAILURE
            else:
                assert workflow.state is expected, f"state {workflow.state.value}, evidence says {expected.value}"
    for known in workflow.dispatched_with:
        for attempt in known:
            assert attempt.status not in (*LIVE, P.DELIVERED), "an attempt was dispatched after evidence of acceptance"
            assert not (attempt.status is None and attempt.submit in (None, R.UNKNOWN)), "dispatched while unresolved"
    assert len(workflow.attempts) <= max_attempts
    if workflow.closed_with is not None:
        state, facts = workflow.closed_with
        if state is not S.PERMANENT_FAILURE or oracle(facts) is not S.RETRYABLE_FAILURE:  # budget exhausted
            assert state is oracle(facts)
        assert not (state in (S.UNDELIVERED, S.PERMANENT_FAILURE) and any(s is P.DELIVERED for s, _, _ in facts))
