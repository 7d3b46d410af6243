"""Table-driven tests of the pure intent state machine: ``check_transition`` and its tables, and
``observe``, the per-fact rule of runs recorded before ``EVIDENCE_RULES_PATCH`` (replayed runs use
it; ``herald.evidence.observe_across`` is the current rule, tested in ``test_evidence.py``)."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest

from herald.lifecycle import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    AttemptView,
    IntentState,
    Observation,
    Source,
    Verdict,
    check_transition,
    intent_state_for,
    observe,
)
from herald.outcomes import ProviderStatus

S = IntentState
P = ProviderStatus
AT = datetime(2025, 1, 1, tzinfo=timezone.utc)
NON_TERMINAL = [state for state in S if state not in TERMINAL_STATES]
PROOF_OF_ACCEPTANCE = [P.QUEUED, P.SENT, P.DELIVERED, P.UNDELIVERED]


def obs(
    status: ProviderStatus,
    *,
    attempt: int = 1,
    provider_id: str = "SM1",
    code: int | None = None,
    source: Source = Source.REPORT,
) -> Observation:
    return Observation(
        attempt_number=attempt, provider_id=provider_id, status=status, error_code=code, source=source, observed_at=AT
    )


def view(number: int = 1, status: ProviderStatus | None = None, provider_id: str | None = "SM1") -> AttemptView:
    return AttemptView(number=number, provider_id=provider_id, provider_status=status)


def judge(
    state: IntentState,
    previous: ProviderStatus | None,
    status: ProviderStatus,
    *,
    retryable: bool = False,
    number: int = 1,
    current: int = 1,
) -> Verdict:
    return observe(state, view(number, previous), current, obs(status, attempt=number), retryable_code=retryable)


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


# ---- observe: forward movement --------------------------------------------------------------------


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
def test_observe_moves_the_intent_forward(
    state: IntentState, previous: ProviderStatus | None, status: ProviderStatus, retryable: bool, expected: IntentState
) -> None:
    """A fresh, higher-ranked status of the current attempt is applied and moves the intent along a declared edge."""
    verdict = judge(state, previous, status, retryable=retryable)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is expected
    if expected is not state:
        check_transition(state, expected)


def test_observe_never_moves_backwards_or_off_the_table() -> None:
    """Over every state, previous status, status, code class and attempt, observe only moves along declared edges, never back to pending or submitting, never lowers an attempt's rank, and leaves everything alone when it does not apply."""
    previous_options: list[ProviderStatus | None] = [None, *P]
    checked = 0
    for state, previous, status, retryable, number in itertools.product(S, previous_options, P, (False, True), (1, 2)):
        verdict = judge(state, previous, status, retryable=retryable, number=number, current=2)
        checked += 1
        assert verdict.reason
        if not verdict.applied:
            assert verdict.intent_state is state
            assert verdict.attempt_status is previous
            continue
        assert verdict.attempt_status is status
        if previous is not None:
            assert status.rank >= previous.rank and not previous.is_final
        if verdict.intent_state is not state:
            check_transition(state, verdict.intent_state)
            assert verdict.intent_state not in (S.PENDING, S.SUBMITTING)
    assert checked == len(S) * 7 * 6 * 2 * 2


# ---- observe: terminal absorption -----------------------------------------------------------------


@pytest.mark.parametrize(
    "state,status,retryable",
    list(itertools.product(sorted(TERMINAL_STATES, key=lambda s: s.value), P, (False, True))),
    ids=str,
)
def test_terminal_state_absorbs_observations(state: IntentState, status: ProviderStatus, retryable: bool) -> None:
    """After a terminal state, an observation of the current attempt is applied to the attempt but never moves the intent."""
    verdict = judge(state, None, status, retryable=retryable)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is state
    assert "terminal" in verdict.reason


def test_cancelled_intent_still_tracks_its_attempt_to_delivery() -> None:
    """A cancelled intent records its accepted attempt's later delivery at attempt level and stays cancelled."""
    verdict = observe(S.CANCELLED, view(1, P.SENT), 1, obs(P.DELIVERED), retryable_code=False)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.DELIVERED, S.CANCELLED)


# ---- observe: duplicates, stale and contradictory facts ------------------------------------------


@pytest.mark.parametrize(
    "state,status",
    list(itertools.product([S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.DELIVERED, S.UNDELIVERED], P)),
    ids=str,
)
def test_duplicate_status_is_not_applied(state: IntentState, status: ProviderStatus) -> None:
    """The same status again is recorded as a duplicate: not applied, nothing moves."""
    verdict = judge(state, status, status)
    assert verdict.applied is False
    assert verdict.attempt_status is status
    assert verdict.intent_state is state
    assert "duplicate" in verdict.reason


@pytest.mark.parametrize("state", [S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.CANCELLED])
def test_stale_status_is_not_applied(state: IntentState) -> None:
    """A queued status arriving after sent is stale: not applied, with a reason saying so."""
    verdict = judge(state, P.SENT, P.QUEUED)
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
def test_final_attempt_status_is_never_replaced(
    state: IntentState, previous: ProviderStatus, status: ProviderStatus
) -> None:
    """Once an attempt is final, any other status (contradictory or earlier) is recorded but never applied."""
    verdict = judge(state, previous, status)
    assert verdict.applied is False
    assert verdict.attempt_status is previous
    assert verdict.intent_state is state
    assert "final" in verdict.reason


# ---- observe: identity of the attempt -------------------------------------------------------------


@pytest.mark.parametrize("state", [S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.DELIVERED])
@pytest.mark.parametrize("status", list(P))
def test_provider_id_mismatch_is_ignored(state: IntentState, status: ProviderStatus) -> None:
    """An observation naming another provider id than the attempt's is not applied and names the id it carried."""
    verdict = observe(state, view(1, P.QUEUED, "SM1"), 1, obs(status, provider_id="SM2"), retryable_code=False)
    assert verdict.applied is False
    assert verdict.attempt_status is P.QUEUED
    assert verdict.intent_state is state
    assert "SM2" in verdict.reason


def test_first_provider_id_is_accepted_when_the_attempt_has_none() -> None:
    """An attempt whose submit outcome was unknown (no id yet) accepts the first id an observation brings."""
    verdict = observe(S.SUBMITTING, view(1, None, provider_id=None), 1, obs(P.SENT, provider_id="SMx"), retryable_code=False)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.SENT, S.ACCEPTED)


@pytest.mark.parametrize("state", [S.SUBMITTING, S.ACCEPTED, S.RETRYABLE_FAILURE, S.PENDING])
@pytest.mark.parametrize("status", list(P))
@pytest.mark.parametrize("retryable", [False, True])
def test_non_current_attempt_never_moves_the_intent(state: IntentState, status: ProviderStatus, retryable: bool) -> None:
    """An observation of an earlier attempt is applied to that attempt but never moves the intent."""
    verdict = judge(state, None, status, retryable=retryable, number=1, current=2)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is state


@pytest.mark.parametrize("status", list(P))
def test_pending_intent_is_not_moved_by_observations(status: ProviderStatus) -> None:
    """While pending (between attempts) an observation is recorded on its attempt but the intent stays pending."""
    verdict = judge(S.PENDING, None, status)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, status, S.PENDING)


# ---- observe: retryable failure and late proof of acceptance -------------------------------------


@pytest.mark.parametrize("state,previous", [(S.SUBMITTING, None), (S.ACCEPTED, P.QUEUED), (S.ACCEPTED, P.SENT)])
@pytest.mark.parametrize("status", [P.UNDELIVERED, P.FAILED])
def test_retryable_code_on_failure_gives_retryable_failure(
    state: IntentState, previous: ProviderStatus | None, status: ProviderStatus
) -> None:
    """An undelivered or failed current attempt with a retryable code returns the intent to retryable_failure."""
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
    """Proof that the current attempt was accepted after all moves retryable_failure forward, so no second message is sent."""
    verdict = observe(S.RETRYABLE_FAILURE, view(1, None, None), 1, obs(status, code=None), retryable_code=retryable)
    assert verdict.applied is True
    assert verdict.intent_state is expected
    assert verdict.intent_state is not S.PENDING
    check_transition(S.RETRYABLE_FAILURE, expected)


def test_retryable_undelivered_proof_keeps_retryable_failure() -> None:
    """An undelivered report with a retryable code while awaiting a retry keeps the intent awaiting that retry."""
    verdict = judge(S.RETRYABLE_FAILURE, None, P.UNDELIVERED, retryable=True)
    assert (verdict.applied, verdict.attempt_status, verdict.intent_state) == (True, P.UNDELIVERED, S.RETRYABLE_FAILURE)


@pytest.mark.parametrize("status", [P.FAILED, P.CANCELED])
@pytest.mark.parametrize("retryable", [False, True])
def test_failed_or_canceled_does_not_move_retryable_failure(status: ProviderStatus, retryable: bool) -> None:
    """A failed or canceled fact is no proof of acceptance: the intent keeps awaiting its retry."""
    verdict = judge(S.RETRYABLE_FAILURE, None, status, retryable=retryable)
    assert verdict.applied is True
    assert verdict.attempt_status is status
    assert verdict.intent_state is S.RETRYABLE_FAILURE


@pytest.mark.parametrize("status", PROOF_OF_ACCEPTANCE)
def test_proof_for_an_earlier_attempt_does_not_move_retryable_failure(status: ProviderStatus) -> None:
    """Proof of acceptance of a superseded attempt is recorded but does not move the current intent."""
    verdict = judge(S.RETRYABLE_FAILURE, None, status, number=1, current=2)
    assert (verdict.applied, verdict.intent_state) == (True, S.RETRYABLE_FAILURE)


def test_verdict_reason_names_the_source() -> None:
    """An applied verdict that moves the intent names the observation path, for the audit trail."""
    verdict = observe(S.SUBMITTING, view(1), 1, obs(P.QUEUED, source=Source.POLL), retryable_code=False)
    assert verdict.intent_state is S.ACCEPTED
    assert "poll" in verdict.reason
