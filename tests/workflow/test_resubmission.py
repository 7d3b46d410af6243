"""Resubmission under the same message id, through the real NotificationWorkflow on the time-skipping server.

The providers are test doubles "a" (primary) and "b" on one route. "a" declares that it refuses a
repeated message id within a grace (``Capabilities.resubmit_dedupe_seconds``, as Infobip does with
idempotent sending on) or, for the baseline, declares nothing (as today). The submit stand-in
routes a first call as the submit activity does and sends a resubmission to the provider the
attempt's row names, asserting it is the one ``SubmitInput.resubmission`` names.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from herald.core.capabilities import Capabilities
from herald.core.contracts import Called, LookupInput, SubmitInput
from herald.core.lifecycle import IntentState, ObservationKind, SubmitResult
from herald.core.outcomes import Accepted, LookupOutcome, ProviderStatus, Rejected, SubmitOutcome, Unknown
from herald.core.resubmission import DEDUPE_MARGIN
from herald.core.routes import choose
from tests.workflow import standins
from tests.workflow.harness import FAST_POLICY, running, server_now, sms_intent
from tests.workflow.standins import TWILIO, StandIns

pytestmark = pytest.mark.workflow_fast

ROUTE = ["a", "b"]
GRACE = 600  # seconds: the double's declared dedupe grace
TIMEOUT = Unknown(reason="ReadTimeout after the request may have been sent; acceptance unknown")
HTTP_500 = Unknown(reason="HTTP 500 from Infobip: acceptance unknown")
HTTP_503 = Unknown(reason="HTTP 503 from Infobip: acceptance unknown")


def queued(provider_id: str) -> Accepted:
    return Accepted(provider_id=provider_id, status=ProviderStatus.QUEUED)


class Doubles:
    """Provider doubles behind one route: their declared capabilities, scripted answers, and every call."""

    def __init__(self, submits: dict[str, Sequence[Any]], capabilities: dict[str, Capabilities],
                 lookups: dict[str, Sequence[Any]] | None = None) -> None:  # fmt: skip
        self._submits = {name: list(answers) for name, answers in submits.items()}
        self._lookups = {name: list(answers) for name, answers in (lookups or {}).items()}
        self._capabilities = capabilities
        self.rows: dict[str, str] = {}  # attempt ref -> provider, as its ledger row records it
        # (attempt ref, provider, resubmission number or 0 for the first call, server time), in order.
        self.calls: list[tuple[str, str, int, datetime]] = []
        self.looked_up: list[LookupInput] = []

    def submit(self, input: SubmitInput, now: datetime) -> Called:
        if input.resubmission is None:
            intent = input.route
            pinned = intent.pinned_to or (self.rows.get(intent.pinned_attempt) if intent.pinned_attempt else None)
            choice = choose(ROUTE, "test", intent, pinned, {}, set(ROUTE))
            assert choice.provider is not None, choice.reason
            name = self.rows.setdefault(input.attempt_ref, choice.provider)
        else:
            name = self.rows[input.attempt_ref]
            assert input.resubmission.provider == name  # the same provider, never another
        self.calls.append((input.attempt_ref, name, input.resubmission.number if input.resubmission else 0, now))
        answers = self._submits[name]
        result = answers[min(sum(1 for c in self.calls if c[1] == name), len(answers)) - 1]
        return Called(outcome=SubmitOutcome(result=result), provider=name, capabilities=self._capabilities[name])

    def lookup(self, input: LookupInput, now: datetime) -> LookupOutcome:
        self.looked_up.append(input)
        answers = self._lookups[self.rows[input.reference.attempt_ref]]
        answer = answers[min(len(self.looked_up), len(answers)) - 1]
        return answer(input, now) if callable(answer) else answer


def _accepted_at(status: Any) -> datetime:
    [accepted] = [t.at for t in status.transitions if t.to_state is IntentState.ACCEPTED]
    return accepted


async def test_three_lost_answers_at_a_deduping_provider_are_resubmitted_not_waited_out(
    env: WorkflowEnvironment,
) -> None:
    """A timeout, then two 5xx at a provider that refuses a repeated id: the same attempt goes to the
    same provider again under the same id 2, 4 and 8 s later and is accepted on the third
    resubmission (about 14 s), where today the intent waits three 11-minute proof windows (printed)."""
    deduping = TWILIO.model_copy(update={"resubmit_dedupe_seconds": GRACE})
    delivered = standins.found("att", ProviderStatus.DELIVERED)
    doubles = Doubles(
        submits={"a": [TIMEOUT, HTTP_500, HTTP_503, queued("att")], "b": [queued("B1")]},
        capabilities={"a": deduping, "b": TWILIO},
        lookups={"a": [delivered]},
    )
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    # One attempt, at a, called four times under its own id: never a new attempt, never b.
    assert [(ref, name, number) for ref, name, number, _ in doubles.calls] == [
        (run.attempt_ref(1), "a", 0), (run.attempt_ref(1), "a", 1), (run.attempt_ref(1), "a", 2),
        (run.attempt_ref(1), "a", 3),
    ]  # fmt: skip
    times = [at for *_, at in doubles.calls]
    # The backoffs, plus the real time each call and the workflow task took (the server skips only waits).
    assert [round((later - earlier).total_seconds()) for earlier, later in zip(times, times[1:])] == [2, 4, 8]
    [attempt] = status.attempts
    assert (attempt.submit_result, attempt.resubmissions) == (SubmitResult.ACCEPTED, 3)
    # No lookup by reference while the answer was lost: only the poll by id after acceptance.
    assert [look.provider_id for look in doubles.looked_up] == ["att"]
    # Each resubmission is recorded before its call, and each answer after it.
    kinds = [o.kind for batch in st.ledger_batches for o in batch.observations]
    assert kinds.count(ObservationKind.RESUBMITTED) == 3
    # Each resubmission's claim is the observation row its own submit commits first.
    for submit in st.submits[1:]:
        assert submit.resubmission is not None
        [claim] = [o for o in submit.ledger.observations if o.seq == submit.resubmission.claim_seq]
        assert claim.kind is ObservationKind.RESUBMITTED
        assert submit.resubmission.call_by == attempt.started_at + timedelta(seconds=GRACE) - DEDUPE_MARGIN
    with_dedupe = _accepted_at(status) - times[0]

    # Today: the same three lost answers at a provider that declares no dedupe.
    baseline = Doubles(
        submits={"a": [TIMEOUT, HTTP_500, HTTP_503, queued("att4")], "b": [queued("B1")]},
        capabilities={"a": TWILIO, "b": TWILIO},
        lookups={"a": [standins.by_reference_then_by_id(
            standins.not_found(), standins.found("att4", ProviderStatus.DELIVERED)
        )]},
    )  # fmt: skip
    st = StandIns(submit=[baseline.submit], lookup=[baseline.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        today = await run.result()
    assert today.state is IntentState.DELIVERED
    assert [number for *_, number, _ in baseline.calls] == [0, 0, 0, 0]  # never resubmitted
    assert len(today.attempts) == 4 and st.submits[0].resubmission is None
    waited = _accepted_at(today) - baseline.calls[0][3]
    assert waited > timedelta(minutes=33) and with_dedupe < timedelta(seconds=20)
    print(f"\nthree lost answers in a row (timeout, 500, 503), the fourth call accepted: "
          f"today {waited.total_seconds() / 60:.1f} min (4 attempts, three 11-minute proof windows, "
          f"{len([look for look in baseline.looked_up if look.provider_id is None])} lookups); with dedupe "
          f"{with_dedupe.total_seconds():.0f} s (1 attempt, 3 resubmissions, 0 lookups), plus the "
          f"adapter's read timeout (10 s) on the real first call")  # fmt: skip


async def test_past_the_grace_a_lost_answer_is_looked_up_never_resubmitted(env: WorkflowEnvironment) -> None:
    """A grace too short for any resubmission to reach the provider inside it (31 s, less the 30 s
    margin, leaves none after the 2 s backoff): the attempt is looked up, as today, and never sent again."""
    short = TWILIO.model_copy(update={"resubmit_dedupe_seconds": 31})
    doubles = Doubles(
        submits={"a": [TIMEOUT], "b": [queued("B1")]},
        capabilities={"a": short, "b": TWILIO},
        lookups={"a": [standins.not_found(), standins.found("att", ProviderStatus.DELIVERED)]},
    )
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [(name, number) for _, name, number, _ in doubles.calls] == [("a", 0)]
    assert doubles.looked_up[0].provider_id is None and status.attempts[0].resubmissions == 0


async def test_a_refused_resubmission_proves_nothing_and_the_attempt_is_looked_up(env: WorkflowEnvironment) -> None:
    """A resubmission refused outright says nothing about the first call (it may exist): no new
    attempt, no other provider, no more resubmissions; the attempt is looked up at its provider,
    its proof window counted from the latest moment a resubmission could have called."""
    deduping = TWILIO.model_copy(update={"resubmit_dedupe_seconds": GRACE})
    doubles = Doubles(
        submits={"a": [TIMEOUT, Rejected(reason="Infobip 400: invalid destination")], "b": [queued("B1")]},
        capabilities={"a": deduping, "b": TWILIO},
        lookups={"a": [standins.found("att", ProviderStatus.DELIVERED)]},
    )
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [(name, number) for _, name, number, _ in doubles.calls] == [("a", 0), ("a", 1)]
    [attempt] = status.attempts
    assert attempt.resubmissions == 1 and attempt.next_resubmit_at is None
    look = doubles.looked_up[0]
    assert look.provider_id is None and look.provider == "a"
    latest_call = attempt.started_at + timedelta(seconds=GRACE) - DEDUPE_MARGIN
    assert look.reference.created_by == latest_call + FAST_POLICY.submit_in_flight_bound
