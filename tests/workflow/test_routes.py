"""Failover only on proof, through the real NotificationWorkflow on the time-skipping server.

The providers are test doubles named "a" and "b" on one route (a then b). The submit stand-in
routes as the submit activity does (``herald.core.routes.choose`` over what the machine sent in
``SubmitInput.route``, an attempt's provider kept as its ledger row keeps it) and answers with each
provider's own script; the lookup stand-in answers for the provider the lookup names, and counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from herald.core.contracts import Called, LookupInput, SubmitInput
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.outcomes import Accepted, LookupOutcome, ProviderStatus, SubmitOutcome, Unknown, Unreachable
from herald.core.routes import ProviderHealth, choose
from tests.workflow import standins
from tests.workflow.harness import FAST_POLICY, running, server_now, sms_intent
from tests.workflow.standins import TWILIO, StandIns

pytestmark = pytest.mark.workflow_fast

ROUTE = ["a", "b"]


def queued(provider_id: str) -> Accepted:
    return Accepted(provider_id=provider_id, status=ProviderStatus.QUEUED)


class TwoProviders:
    """Two provider doubles behind one route: what each was asked, and its scripted answers."""

    def __init__(self, submits: dict[str, Sequence[Any]], lookups: dict[str, Sequence[Any]] | None = None,
                 outages: set[str] | None = None) -> None:  # fmt: skip
        self._submits = {name: list(answers) for name, answers in submits.items()}
        self._lookups = {name: list(answers) for name, answers in (lookups or {}).items()}
        self._healths = {name: ProviderHealth(provider=name, outage_since=datetime(2026, 1, 1)) for name in outages or ()}
        # attempt ref -> provider, as the attempt row records it in the submit's transaction.
        self.rows: dict[str, str] = {}
        self.submitted: list[tuple[str, str]] = []  # (attempt ref, provider), in order
        self.looked_up: list[tuple[str, str | None]] = []  # (attempt ref, provider named by the lookup)
        # Providers that go into outage (for everyone else) once the first submit was made.
        self.down_after_submit: set[str] = set()

    def _next(self, script: dict[str, list[Any]], name: str, count: int) -> Any:
        answers = script[name]
        return answers[min(count, len(answers)) - 1]

    def submit(self, input: SubmitInput, _now: datetime) -> Called:
        intent = input.route
        pinned_to = intent.pinned_to or (self.rows.get(intent.pinned_attempt) if intent.pinned_attempt else None)
        choice = choose(ROUTE, "test", intent, pinned_to, self._healths, set(ROUTE))
        assert choice.provider is not None, choice.reason
        name = self.rows.setdefault(input.attempt_ref, choice.provider)
        self.submitted.append((input.attempt_ref, name))
        result = self._next(self._submits, name, sum(1 for _, n in self.submitted if n == name))
        following = None
        if isinstance(result, Unreachable) and intent.pinned_attempt is None:
            demoted = intent.model_copy(update={"demoted": [*intent.demoted, name]})
            after = choose(ROUTE, "test", demoted, None, self._healths, set(ROUTE)).provider
            following = after if after not in (name, *intent.demoted) else None
        for down in self.down_after_submit:
            self._healths[down] = ProviderHealth(provider=down, outage_since=datetime(2026, 1, 1))
        return Called(outcome=SubmitOutcome(result=result), provider=name, capabilities=TWILIO, next_provider=following)

    def lookup(self, input: LookupInput, now: datetime) -> LookupOutcome:
        ref = input.reference.attempt_ref
        self.looked_up.append((ref, input.provider))
        # A lookup that names no provider is answered where the attempt's row says it went.
        name = input.provider or self.rows[ref]
        answer = self._next(self._lookups, name, sum(1 for r, _ in self.looked_up if self.rows[r] == name))
        return answer(input, now) if callable(answer) else answer

    def at(self, name: str) -> list[str]:
        return [ref for ref, provider in self.submitted if provider == name]


async def test_unreachable_at_a_goes_to_b_at_once(env: WorkflowEnvironment) -> None:
    """A refused connection at the primary proves nothing was sent: attempt 2 goes to b with no backoff."""
    doubles = TwoProviders(
        submits={"a": [Unreachable(reason="ConnectError before the request left")],
                 "b": [Accepted(provider_id="B1", status=ProviderStatus.QUEUED)]},
        lookups={"b": [standins.found("B1", ProviderStatus.DELIVERED)]},
    )  # fmt: skip
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert doubles.submitted == [(run.attempt_ref(1), "a"), (run.attempt_ref(2), "b")]
    first, second = st.submits
    assert second.route.demoted == ["a"] and second.route.pinned_attempt is None
    # No backoff: the next provider was offered, and nothing was sent at the first.
    assert st.times(standins.SUBMIT)[1] - st.times(standins.SUBMIT)[0] < FAST_POLICY.backoff_initial
    assert [a.provider for a in status.attempts] == ["a", "b"]
    assert status.attempts[0].submit_result is SubmitResult.UNREACHABLE
    # Lookups about b's attempt go to b, by name.
    assert {provider for _, provider in doubles.looked_up} == {"b"}


async def test_unreachable_everywhere_backs_off_and_names_the_providers(env: WorkflowEnvironment) -> None:
    """With both providers unreachable the intent retries a, b, a ... with the backoff between
    returns to a provider, and expires naming both."""
    down = Unreachable(reason="ConnectError before the request left")
    doubles = TwoProviders(submits={"a": [down], "b": [down]})
    now = await server_now(env)
    intent = sms_intent(now, expires_at=(now + FAST_POLICY.backoff_initial * 40).isoformat())
    st = StandIns(submit=[doubles.submit])
    async with running(env, st, intent) as run:
        status = await run.result()
    assert status.state is IntentState.EXPIRED
    assert [name for _, name in doubles.submitted[:3]] == ["a", "b", "a"]
    times = st.times(standins.SUBMIT)
    assert times[1] - times[0] < FAST_POLICY.backoff_initial <= times[2] - times[1]
    assert "provider unreachable since" in status.transitions[-1].reason
    assert "at a, b" in status.transitions[-1].reason


async def test_an_unknown_at_a_is_looked_up_at_a_and_never_goes_to_b(env: WorkflowEnvironment) -> None:
    """A lost answer at a is resolved at a: every lookup names a, and b is never submitted to,
    even with a in outage for everyone else, until a's lookup settles it (delivered)."""
    doubles = TwoProviders(
        submits={"a": [Unknown(reason="ReadTimeout after the request was sent")], "b": [queued("B1")]},
        lookups={"a": [standins.not_found(), standins.not_found(), standins.found("A1", ProviderStatus.DELIVERED)]},
    )
    doubles.down_after_submit = {"a"}
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert doubles.at("b") == [] and doubles.at("a") == [run.attempt_ref(1)]
    assert {provider for _, provider in doubles.looked_up} == {"a"}


async def test_a_failure_after_acceptance_pins_the_next_attempt_to_its_provider(env: WorkflowEnvironment) -> None:
    """Accepted at a, then a retryable failure: the message may exist at a, so attempt 2 is pinned
    to a although a is in outage for everyone else and b is healthy."""
    doubles = TwoProviders(
        submits={"a": [queued("A1"), queued("A2")], "b": [queued("B1")]},
        lookups={"a": [standins.by_reference_then_by_id(
            standins.not_found(),
            lambda input, now: standins.found(
                input.provider_id, ProviderStatus.UNDELIVERED if input.provider_id == "A1" else ProviderStatus.DELIVERED,
                error_code=30003, failure_retryable=input.provider_id == "A1",
            ),
        )]},
    )  # fmt: skip
    doubles.down_after_submit = {"a"}
    st = StandIns(submit=[doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert doubles.submitted == [(run.attempt_ref(1), "a"), (run.attempt_ref(2), "a")]
    assert st.submits[1].route.pinned_attempt == run.attempt_ref(1) and st.submits[1].route.pinned_to == "a"


async def test_a_submit_that_never_finished_pins_by_its_row(env: WorkflowEnvironment) -> None:
    """The submit activity crashed after a's row committed: the machine never heard the provider,
    so lookups name none (the activity reads the row) and the route pins by the attempt's ref."""
    doubles = TwoProviders(submits={"a": [queued("A1"), queued("A2")], "b": [queued("B1")]})

    def crash_after_choosing(input: SubmitInput, now: datetime) -> Any:
        doubles.submit(input, now)  # the row is written and a is called ...
        raise standins.crashes()  # ... and the answer is lost

    found = standins.found("A1", ProviderStatus.UNDELIVERED, error_code=30003, failure_retryable=True)
    doubles._lookups = {"a": [found, standins.found("A2", ProviderStatus.DELIVERED)]}
    st = StandIns(submit=[crash_after_choosing, doubles.submit], lookup=[doubles.lookup])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert doubles.looked_up[0] == (run.attempt_ref(1), None)
    assert st.submits[1].route.pinned_attempt == run.attempt_ref(1) and st.submits[1].route.pinned_to is None
    assert [name for _, name in doubles.submitted] == ["a", "a"]
    assert status.state is IntentState.DELIVERED
