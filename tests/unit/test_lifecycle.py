"""Table-driven tests of the pure intent state machine: ``check_transition`` and its tables,
``intent_state_for``, and the per-fact judgement of ``herald.core.evidence.observe_across`` seen from
the state machine's side: the attempt-level rules (duplicates, stale facts, facts after a final
status and facts naming another provider id are recorded unapplied), terminal states absorbing,
and moves only along declared edges. How evidence about several attempts settles the intent (the
best evidence across all of them) is tested in ``test_evidence.py``."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest

from herald.core.evidence import observe_across, settle
from herald.core.lifecycle import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    AttemptView,
    IntentState,
    Observation,
    Source,
    SubmitResult,
    Verdict,
    check_transition,
    intent_state_for,
)
from herald.core.outcomes import ProviderStatus

S = IntentState
P = ProviderStatus
R = SubmitResult
AT = datetime(2025, 1, 1, tzinfo=timezone.utc)
NON_TERMINAL = [state for state in S if state not in TERMINAL_STATES]
OWN_ID = "own"  # view(): the attempt carries its own provider id, SM<number>


def obs(
    status: ProviderStatus,
    *,
    attempt: int = 1,
    provider_id: str | None = None,
    code: int | None = None,
    source: Source = Source.REPORT,
) -> Observation:
    return Observation(
        attempt_number=attempt,
        provider_id=provider_id or f"SM{attempt}",
        status=status,
        error_code=code,
        source=source,
        observed_at=AT,
    )


def view(
    number: int = 1,
    status: ProviderStatus | None = None,
    provider_id: str | None = OWN_ID,
    *,
    submit: SubmitResult | None = None,
    failure_retryable: bool = False,
) -> AttemptView:
    return AttemptView(
        number=number,
        provider_id=f"SM{number}" if provider_id == OWN_ID else provider_id,
        provider_status=status,
        submit_result=submit,
        failure_retryable=failure_retryable,
    )


def judge(
    state: IntentState,
    previous: ProviderStatus | None,
    status: ProviderStatus,
    *,
    retryable: bool = False,
    submit: SubmitResult | None = None,
    of_two: bool = False,
) -> Verdict:
    """Judge a fact about attempt 1: the intent's only attempt, or (``of_two``) the earlier of two,
    the later one still in flight."""
    attempts = [view(1, previous, submit=submit)]
    if of_two:
        attempts.append(view(2, None, None, submit=R.UNKNOWN))
    return observe_across(state, attempts, obs(status), retryable_code=retryable)


# ---- the declared tables ------------------------------------------------------------------------


def test_every_state_has_a_transition_entry() -> None:
    """ALLOWED_TRANSITIONS names every intent state, so check_transition never hits a KeyError."""
    assert set(ALLOWED_TRANSITIONS) == set(S)


def test_terminal_states_are_the_designed_ones() -> None:
    """The terminal set is exactly the design's: delivered, undelivered, unknown, the four closers, and
    relayed (a relay without events accepted it: all that can be known)."""
    assert TERMINAL_STATES == {
        S.DELIVERED,
        S.UNDELIVERED,
        S.UNKNOWN,
        S.PERMANENT_FAILURE,
        S.EXPIRED,
        S.CANCELLED,
        S.SUPPRESSED,
        S.RELAYED,
    }
    assert all(state.is_terminal == (state in TERMINAL_STATES) for state in S)


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES, key=lambda s: s.value))
def test_terminal_states_declare_no_transition(state: IntentState) -> None:
    """A terminal state has an empty transition set: nothing ever leaves it."""
    assert ALLOWED_TRANSITIONS[state] == frozenset()


@pytest.mark.parametrize("state", NON_TERMINAL)
def test_non_terminal_states_can_close(state: IntentState) -> None:
    """Every non-terminal state can reach a terminal state directly, so no intent is ever stuck open."""
    assert ALLOWED_TRANSITIONS[state] & TERMINAL_STATES


def test_no_state_declares_a_transition_to_itself() -> None:
    """A self-transition is never declared: staying put is not a transition and must not be recorded as one."""
    assert all(state not in targets for state, targets in ALLOWED_TRANSITIONS.items())


def test_pending_is_reentered_only_from_retryable_failure() -> None:
    """The only way back to pending (a new attempt) is a definite retryable failure."""
    sources = {state for state, targets in ALLOWED_TRANSITIONS.items() if S.PENDING in targets}
    assert sources == {S.RETRYABLE_FAILURE}


def test_submitting_is_entered_from_pending_or_from_a_failed_late_copy() -> None:
    """Submitting is entered from pending (a new attempt) or from accepted, when the accepted copy
    fails while another attempt's outcome is still unknown; no state after a retryable failure
    leads there without passing through pending (tests/unit/test_evidence.py: no dispatch follows
    evidence of acceptance)."""
    sources = {state for state, targets in ALLOWED_TRANSITIONS.items() if S.SUBMITTING in targets}
    assert sources == {S.PENDING, S.ACCEPTED}


@pytest.mark.parametrize("current,target", list(itertools.product(S, S)), ids=lambda s: s.value)
def test_check_transition_accepts_exactly_the_declared_table(current: IntentState, target: IntentState) -> None:
    """check_transition passes declared transitions and raises ValueError, naming both states, for any other."""
    if target in ALLOWED_TRANSITIONS[current]:
        check_transition(current, target)
    else:
        with pytest.raises(ValueError, match=f"{current.value} -> {target.value}"):
            check_transition(current, target)


# ---- intent_state_for -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,retryable,expected",
    [
        (P.QUEUED, False, S.ACCEPTED),
        (P.QUEUED, True, S.ACCEPTED),
        (P.SENT, False, S.ACCEPTED),
        (P.SENT, True, S.ACCEPTED),
        (P.DELIVERED, False, S.DELIVERED),
        (P.DELIVERED, True, S.DELIVERED),
        (P.UNDELIVERED, False, S.UNDELIVERED),
        (P.UNDELIVERED, True, S.RETRYABLE_FAILURE),
        (P.FAILED, False, S.PERMANENT_FAILURE),
        (P.FAILED, True, S.RETRYABLE_FAILURE),
        (P.CANCELED, False, S.PERMANENT_FAILURE),
        (P.CANCELED, True, S.RETRYABLE_FAILURE),
    ],
)
def test_intent_state_for_maps_provider_status(status: ProviderStatus, retryable: bool, expected: IntentState) -> None:
    """Each provider status of the current attempt maps to one intent state; a retryable code only matters on failure."""
    assert intent_state_for(status, retryable) is expected


# ---- observe_across: forward movement ------------------------------------------------------------


@pytest.mark.parametrize(
    "state,previous,status,retryable,expected",
    [
        (S.SUBMITTING, None, P.QUEUED, False, S.ACCEPTED),
        (S.SUBMITTING, None, P.SENT, False, S.ACCEPTED),
        (S.SUBMITTING, None, P.DELIVERED, False, S.DELIVERED),
        (S.SUBMITTING, None, P.UNDELIVERED, False, S.UNDELIVERED),
        (S.SUBMITTING, None, P.FAILED, False, S.PERMANENT_FAILURE),
        (S.SUBMITTING, None, P.CANCELED, False, S.PERMANENT_FAILURE),
        (S.SUBMITTING, None, P.FAILED, True, S.RETRYABLE_FAILURE),
        (S.SUBMITTING, None, P.UNDELIVERED, True, S.RETRYABLE_FAILURE),
        (S.ACCEPTED, P.QUEUED, P.SENT, False, S.ACCEPTED),
        (S.ACCEPTED, P.QUEUED, P.DELIVERED, False, S.DELIVERED),
        (S.ACCEPTED, P.SENT, P.DELIVERED, True, S.DELIVERED),
        (S.ACCEPTED, P.SENT, P.UNDELIVERED, False, S.UNDELIVERED),
        (S.ACCEPTED, P.SENT, P.UNDELIVERED, True, S.RETRYABLE_FAILURE),
        (S.ACCEPTED, P.QUEUED, P.FAILED, False, S.PERMANENT_FAILURE),
        (S.ACCEPTED, P.QUEUED, P.FAILED, True, S.RETRYABLE_FAILURE),
        (S.ACCEPTED, None, P.SENT, True, S.ACCEPTED),
    ],
)
def test_observe_across_moves_a_single_attempt_forward(
    state: IntentState, previous: ProviderStatus | None, status: ProviderStatus, retryable: bool, expected: IntentState
) -> None:
    """A fresh, higher-ranked status of the intent's only attempt is applied and moves the intent along a declared edge."""
    verdict = judge(state, previous, status, retryable=retryable)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is expected
    if expected is not state:
        check_transition(state, expected)


# What the workflow can know about one attempt: (provider status, submit answer, failure retryable).
ATTEMPT_KNOWLEDGE: list[tuple[ProviderStatus | None, SubmitResult | None, bool]] = [
    *((None, submit, False) for submit in (None, *R)),
    *((status, R.ACCEPTED, False) for status in (P.QUEUED, P.SENT, P.DELIVERED)),
    *(
        (status, R.ACCEPTED, retryable)
        for status in (P.UNDELIVERED, P.FAILED, P.CANCELED)
        for retryable in (False, True)
    ),
]


def _contexts() -> list[list[AttemptView]]:
    """Every one- and two-attempt combination of ATTEMPT_KNOWLEDGE, as views."""
    contexts: list[list[AttemptView]] = []
    for count in (1, 2):
        for known in itertools.product(ATTEMPT_KNOWLEDGE, repeat=count):
            contexts.append(
                [
                    view(number, status, None if status is None else OWN_ID, submit=submit, failure_retryable=retryable)
                    for number, (status, submit, retryable) in enumerate(known, start=1)
                ]
            )
    return contexts


def _unresolved(attempt: AttemptView) -> bool:
    """The provider may have this attempt and has said nothing about it."""
    return attempt.provider_status is None and attempt.submit_result in (None, R.UNKNOWN, R.ACCEPTED)


def _may_reach_or_reached(attempt: AttemptView) -> bool:
    return _unresolved(attempt) or attempt.provider_status in (P.QUEUED, P.SENT, P.DELIVERED)


def test_observe_across_never_moves_backwards_or_off_the_table() -> None:
    """Over every one- and two-attempt history, every state the workflow can hold with it (the state
    the evidence settles on, pending while that is a retryable failure, or cancelled by a clock), every
    status, code class and attempt named: observe_across moves the intent only along declared edges,
    out of no terminal state, never back to pending, back to submitting only while another attempt is
    unresolved, and never to a failure while an attempt is delivered, live or unresolved; it never
    lowers an attempt's rank, and leaves everything alone when it does not apply."""
    moves: set[tuple[IntentState, IntentState]] = set()
    checked = 0
    for attempts in _contexts():
        settled = settle(attempts)
        states = {settled, S.CANCELLED} | ({S.PENDING} if settled is S.RETRYABLE_FAILURE else set())
        for state, attempt, status, retryable in itertools.product(states, attempts, P, (False, True)):
            previous = attempt.provider_status
            verdict = observe_across(state, attempts, obs(status, attempt=attempt.number), retryable_code=retryable)
            checked += 1
            assert verdict.reason
            if not verdict.applied:
                assert verdict.intent_state is state
                assert verdict.attempt_status is previous
                continue
            assert verdict.attempt_status is status
            if previous is not None:
                assert status.rank >= previous.rank and not previous.is_final
            target = verdict.intent_state
            if target is state:
                continue
            moves.add((state, target))
            check_transition(state, target)
            assert not state.is_terminal
            assert target is not S.PENDING
            others = [each for each in attempts if each.number != attempt.number]
            if target is S.SUBMITTING:
                assert any(_unresolved(each) for each in others), "back to submitting with nothing unresolved"
            if target in (S.UNDELIVERED, S.PERMANENT_FAILURE, S.RETRYABLE_FAILURE):
                assert not any(_may_reach_or_reached(each) for each in others), "closed as a failure too early"
                assert status not in (P.QUEUED, P.SENT, P.DELIVERED)
    assert checked > 15_000
    # The sweep is not vacuous: it reaches the moves today's rules exist for.
    assert {
        (S.SUBMITTING, S.ACCEPTED),
        (S.ACCEPTED, S.SUBMITTING),
        (S.RETRYABLE_FAILURE, S.ACCEPTED),
        (S.PENDING, S.DELIVERED),
        (S.PENDING, S.UNDELIVERED),
        (S.SUBMITTING, S.RETRYABLE_FAILURE),
    } <= moves


# ---- observe_across: terminal absorption ---------------------------------------------------------


@pytest.mark.parametrize(
    "state,status,retryable",
    list(itertools.product(sorted(TERMINAL_STATES, key=lambda s: s.value), P, (False, True))),
    ids=str,
)
@pytest.mark.parametrize("of_two", [False, True], ids=["only-attempt", "earlier-attempt"])
def test_terminal_state_absorbs_observations(
    state: IntentState, status: ProviderStatus, retryable: bool, of_two: bool
) -> None:
    """After a terminal state, an observation of any attempt is applied to the attempt but never moves the intent."""
    verdict = judge(state, None, status, retryable=retryable, of_two=of_two)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is state
    assert "terminal" in verdict.reason


def test_cancelled_intent_still_tracks_its_attempt_to_delivery() -> None:
    """A cancelled intent records its accepted attempt's later delivery at attempt level and stays cancelled."""
    verdict = observe_across(S.CANCELLED, [view(1, P.SENT, submit=R.ACCEPTED)], obs(P.DELIVERED), retryable_code=False)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.DELIVERED, S.CANCELLED)


# ---- observe_across: duplicates, stale and contradictory facts -----------------------------------

OF_TWO = pytest.mark.parametrize("of_two", [False, True], ids=["only-attempt", "earlier-attempt"])


@pytest.mark.parametrize(
    "state,status",
    list(itertools.product([S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.DELIVERED, S.UNDELIVERED], P)),
    ids=str,
)
@OF_TWO
def test_duplicate_status_is_not_applied(state: IntentState, status: ProviderStatus, of_two: bool) -> None:
    """The same status again is recorded as a duplicate: not applied, nothing moves."""
    verdict = judge(state, status, status, of_two=of_two)
    assert verdict.applied is False
    assert verdict.attempt_status is status
    assert verdict.intent_state is state
    assert "duplicate" in verdict.reason


@pytest.mark.parametrize("state", [S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.CANCELLED])
@OF_TWO
def test_stale_status_is_not_applied(state: IntentState, of_two: bool) -> None:
    """A queued status arriving after sent is stale: not applied, with a reason saying so."""
    verdict = judge(state, P.SENT, P.QUEUED, of_two=of_two)
    assert verdict.applied is False
    assert verdict.attempt_status is P.SENT
    assert verdict.intent_state is state
    assert "stale" in verdict.reason


@pytest.mark.parametrize(
    "previous,status",
    [(previous, status) for previous in P if previous.is_final for status in P if status is not previous],
    ids=str,
)
@pytest.mark.parametrize("state", [S.ACCEPTED, S.RETRYABLE_FAILURE, S.DELIVERED, S.UNDELIVERED, S.PERMANENT_FAILURE])
@OF_TWO
def test_final_attempt_status_is_never_replaced(
    state: IntentState, previous: ProviderStatus, status: ProviderStatus, of_two: bool
) -> None:
    """Once an attempt is final, any other status (contradictory or earlier) is recorded but never applied."""
    verdict = judge(state, previous, status, of_two=of_two)
    assert verdict.applied is False
    assert verdict.attempt_status is previous
    assert verdict.intent_state is state
    assert "final" in verdict.reason


# ---- observe_across: identity of the attempt -----------------------------------------------------


@pytest.mark.parametrize("state", [S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.DELIVERED])
@pytest.mark.parametrize("status", list(P))
@OF_TWO
def test_provider_id_mismatch_is_ignored(state: IntentState, status: ProviderStatus, of_two: bool) -> None:
    """An observation naming another provider id than the attempt's is not applied and names the id it carried."""
    attempts = [view(1, P.QUEUED, "SM1")] + ([view(2, None, None, submit=R.UNKNOWN)] if of_two else [])
    verdict = observe_across(state, attempts, obs(status, provider_id="SM2"), retryable_code=False)
    assert verdict.applied is False
    assert verdict.attempt_status is P.QUEUED
    assert verdict.intent_state is state
    assert "SM2" in verdict.reason


def test_first_provider_id_is_accepted_when_the_attempt_has_none() -> None:
    """An attempt whose submit outcome was unknown (no id yet) accepts the first id an observation brings."""
    attempts = [view(1, None, provider_id=None, submit=R.UNKNOWN)]
    verdict = observe_across(S.SUBMITTING, attempts, obs(P.SENT, provider_id="SMx"), retryable_code=False)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.SENT, S.ACCEPTED)


# ---- observe_across: retryable failure and late proof of acceptance ------------------------------


@pytest.mark.parametrize("state,previous", [(S.SUBMITTING, None), (S.ACCEPTED, P.QUEUED), (S.ACCEPTED, P.SENT)])
@pytest.mark.parametrize("status", [P.UNDELIVERED, P.FAILED])
def test_retryable_code_on_failure_gives_retryable_failure(
    state: IntentState, previous: ProviderStatus | None, status: ProviderStatus
) -> None:
    """An undelivered or failed only attempt with a retryable code returns the intent to retryable_failure."""
    verdict = judge(state, previous, status, retryable=True)
    assert verdict.applied is True
    assert verdict.intent_state is S.RETRYABLE_FAILURE
    check_transition(state, S.RETRYABLE_FAILURE)


@pytest.mark.parametrize(
    "status,retryable,expected",
    [
        (P.QUEUED, False, S.ACCEPTED),
        (P.SENT, False, S.ACCEPTED),
        (P.SENT, True, S.ACCEPTED),
        (P.DELIVERED, False, S.DELIVERED),
        (P.UNDELIVERED, False, S.UNDELIVERED),
    ],
)
def test_late_proof_of_acceptance_moves_retryable_failure_forward(
    status: ProviderStatus, retryable: bool, expected: IntentState
) -> None:
    """Proof that an attempt presumed not accepted was accepted after all moves retryable_failure forward, so no second message is sent."""
    attempts = [view(1, None, None, submit=R.NOT_ACCEPTED)]
    verdict = observe_across(S.RETRYABLE_FAILURE, attempts, obs(status), retryable_code=retryable)
    assert verdict.applied is True
    assert verdict.intent_state is expected
    assert verdict.intent_state is not S.PENDING
    check_transition(S.RETRYABLE_FAILURE, expected)


def test_retryable_undelivered_proof_keeps_retryable_failure() -> None:
    """An undelivered report with a retryable code while awaiting a retry keeps the intent awaiting that retry."""
    verdict = judge(S.RETRYABLE_FAILURE, None, P.UNDELIVERED, retryable=True, submit=R.NOT_ACCEPTED)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.UNDELIVERED, S.RETRYABLE_FAILURE)


@pytest.mark.parametrize("status", [P.FAILED, P.CANCELED])
def test_retryable_failed_or_canceled_keeps_retryable_failure(status: ProviderStatus) -> None:
    """A failed or canceled fact with a retryable code is no proof of acceptance: the intent keeps
    awaiting its retry (with a permanent code it closes the intent: test_evidence.py)."""
    verdict = judge(S.RETRYABLE_FAILURE, None, status, retryable=True, submit=R.NOT_ACCEPTED)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is S.RETRYABLE_FAILURE


@pytest.mark.parametrize("of_two", [False, True], ids=["only-attempt", "earlier-attempt"])
def test_verdict_reason_names_the_source(of_two: bool) -> None:
    """An applied verdict that moves the intent names the observation path, for the audit trail."""
    attempts = [view(1, None, None, submit=R.UNKNOWN)] + ([view(2, None, None, submit=R.UNKNOWN)] if of_two else [])
    verdict = observe_across(S.SUBMITTING, attempts, obs(P.QUEUED, source=Source.POLL), retryable_code=False)
    assert verdict.intent_state is S.ACCEPTED
    assert "poll" in verdict.reason
