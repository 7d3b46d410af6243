"""Where each submit stands in its route's queue: the send policy's priority and the tenant's
fairness, asked for each attempt when it is prepared (on the time-skipping server, activities
stood in by name)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.common import Priority
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from herald.core.contracts import DispatchQuery
from herald.core.delivery_policy import proof_window
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.outcomes import ProviderStatus
from herald.core.send_policy import CategoryRules, PolicyRules, dispatch_order
from tests.workflow import standins
from tests.workflow.harness import FAST_POLICY, running, server_now, sms_intent
from tests.workflow.standins import DISPATCH_ORDER, LOOKUP, SUBMIT, StandIns

pytestmark = pytest.mark.workflow_fast


async def test_the_submit_goes_at_its_categorys_priority_with_the_tenant_as_fairness_key(env: WorkflowEnvironment) -> None:
    """A transactional SMS for tenant "acme" (weight 3 in the policy) is submitted at priority 2,
    fairness key "acme", weight 3; the attempt records both and its "prepared" transition says why."""
    weighted = PolicyRules(tenant_weights={"acme": 3.0})

    def order(query: DispatchQuery, _now: None) -> object:
        return dispatch_order(weighted, 4, query.category, query.tenant, query.requested)

    st = StandIns(dispatch=[order], submit=[standins.accepted("SM1")], lookup=[standins.found("SM1", ProviderStatus.DELIVERED)])
    async with running(env, st, sms_intent(await server_now(env), tenant="acme")) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    [query] = st.calls(DISPATCH_ORDER)
    assert (query.tenant, query.requested) == ("acme", None)
    assert st.priorities(SUBMIT) == [Priority(priority_key=2, fairness_key="acme", fairness_weight=3.0)]
    [attempt] = status.attempts
    assert (attempt.priority, attempt.fairness_weight) == (2, 3.0)
    assert [row.priority for batch in st.ledger_batches for row in batch.attempts] == [2]
    assert status.transitions[0].reason == "attempt 1 prepared: transactional priority 2 (policy v4); tenant acme weight 3"


async def test_a_policy_published_between_attempts_applies_to_the_next_one(env: WorkflowEnvironment) -> None:
    """Attempt 1 goes at priority 2; a version moving transactional to 4 is in force when attempt 2
    is prepared (after a retryable refusal): attempt 2 goes at 4, and each attempt records its own."""
    moved = PolicyRules(categories={**PolicyRules().categories, "transactional": CategoryRules(urgent=True, priority=4)})
    orders = [
        lambda q, _: dispatch_order(PolicyRules(), 1, q.category, q.tenant, q.requested),
        lambda q, _: dispatch_order(moved, 2, q.category, q.tenant, q.requested),
    ]
    st = StandIns(
        dispatch=orders,
        submit=[standins.retryable(), standins.accepted("SM2")],
        lookup=[standins.found("SM2", ProviderStatus.DELIVERED)],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [p.priority_key for p in st.priorities(SUBMIT)] == [2, 4]
    assert [attempt.priority for attempt in status.attempts] == [2, 4]


async def test_an_intent_may_go_lower_than_its_category_never_higher(env: WorkflowEnvironment) -> None:
    """Asked for 5, a transactional intent goes at 5; asked for 1, it goes at its category's 2, and
    the prepared transition says the request was not granted."""
    for requested, expected, said in ((5, 5, "lowered to 5 by the intent"), (1, 2, "the intent asked for 1, ahead of its category: not granted")):
        st = StandIns(submit=[standins.accepted("SM3")], lookup=[standins.found("SM3", ProviderStatus.DELIVERED)])
        async with running(env, st, sms_intent(await server_now(env), priority=requested)) as run:
            status = await run.result()
        assert [p.priority_key for p in st.priorities(SUBMIT)] == [expected]
        assert said in status.transitions[0].reason


async def test_a_policy_that_cannot_be_read_sends_at_the_built_in_priority(env: WorkflowEnvironment) -> None:
    """The ledger is away when the order is asked for: the attempt goes at its category's built-in
    priority (its submit meets the outage where that is handled), and the transition says why."""
    away = ApplicationError("PoolTimeout: couldn't get a connection after 1.00 sec", type="PoolTimeout")
    st = StandIns(dispatch=[away], submit=[standins.accepted("SM4")], lookup=[standins.found("SM4", ProviderStatus.DELIVERED)])
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert len(st.calls(DISPATCH_ORDER)) == 1  # asked once, not retried
    assert [p.priority_key for p in st.priorities(SUBMIT)] == [2]
    assert status.transitions[0].reason.startswith("attempt 1 prepared: send policy unreadable (")


async def test_a_categorys_provider_validity_is_sent_and_bounds_the_proof_of_absence(env: WorkflowEnvironment) -> None:
    """The category gives the provider 120 s (the delivery policy: 600 s): the submit carries a
    ValidityPeriod of 120, and an unanswered submit is proven absent, and attempt 2 sent, once a
    lookup past in-flight bound + 120 s finds nothing, not after the default window."""
    short = PolicyRules(
        categories={**PolicyRules().categories, "transactional": CategoryRules(urgent=True, provider_queue_validity_seconds=120)}
    )

    def order(query: DispatchQuery, _now: None) -> object:
        return dispatch_order(short, 3, query.category, query.tenant, query.requested)

    st = StandIns(
        dispatch=[order],
        submit=[standins.crashes(), standins.accepted("SM5")],
        lookup=[standins.by_reference_then_by_id(standins.not_found(), standins.found("SM5", ProviderStatus.DELIVERED))],
    )
    async with running(env, st, sms_intent(await server_now(env))) as run:
        status = await run.result()
    assert status.state is IntentState.DELIVERED
    assert [submit.validity_seconds for submit in st.submits] == [120, 120]
    first, second = status.attempts
    assert first.validity_seconds == 120 and first.submit_result is SubmitResult.NOT_ACCEPTED
    window = FAST_POLICY.submit_in_flight_bound + timedelta(seconds=120)
    assert window < proof_window(FAST_POLICY)  # shorter than the default: the point of the rule
    by_reference = [at for at, lookup in zip(st.times(LOOKUP), st.lookups) if lookup.provider_id is None]
    assert by_reference[-1] - first.started_at >= window > by_reference[-2] - first.started_at
    assert second.started_at - first.started_at < proof_window(FAST_POLICY)
