"""The workflow's calls out: provider activities and the ledger's local activities, each with the
timeout and retry policy its side effect allows. Deterministic code only (it schedules, it does
no I/O itself).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, FailureError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from activities.ledger import LedgerActivities
    from activities.provider import ProviderActivities
    from herald.contracts import DispatchQuery, LookupInput, ProviderCancelInput, SubmitInput, SubmitStep
    from herald.delivery_policy import DeliveryPolicy
    from herald.intent import Intent
    from herald.ledger.records import IntentRecorded, LedgerBatch
    from herald.machine.attempt import AttemptRecord
    from herald.outcomes import LookupOutcome, Unavailable
    from herald.send_policy import DispatchOrder, built_in_order
    from herald.silence import EventStream, EventStreamQuery
    from herald.task_queues import submit_task_queue

# Ledger writes are idempotent, so they may retry for as long as the database is away; the
# workflow waits rather than submit before its attempt row is committed.
_LEDGER_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10))
_LEDGER_TIMEOUT = timedelta(seconds=10)
# A submit is never retried by Temporal: a retry after a lost answer is exactly the duplicate
# send this system exists to prevent. A failed activity is an unknown outcome, resolved by lookup.
_SUBMIT_RETRY = RetryPolicy(maximum_attempts=1)
# Lookups and cancels are reads or refusals; retrying them is harmless.
_READ_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
_READ_TIMEOUT = timedelta(seconds=30)
# The dispatch order is read once: with the ledger away, the attempt goes at the built-in
# priorities rather than wait (its submit finds the ledger away too, and waits there).
_ORDER_RETRY = RetryPolicy(maximum_attempts=1)
_ORDER_TIMEOUT = timedelta(seconds=5)


async def submit(attempt: AttemptRecord, intent: Intent, policy: DeliveryPolicy, rows: LedgerBatch) -> SubmitStep:
    """Write `rows` and send the attempt once, on the submit queue the Temporal server paces.

    The submit waits in the route's queue no later than the intent's expiry: a task still queued
    then is never started (the server refuses it to every worker), so nothing can be sent late.

    Raises:
        ActivityError: the activity did not finish (the worker died, it timed out): the rows may
            or may not be written and the provider may or may not have the message; unless
            ``never_started`` says it was still queued at the deadline.
    """
    return await workflow.execute_activity_method(
        ProviderActivities.submit,
        SubmitInput(
            attempt_ref=attempt.ref,
            to=intent.recipient,
            body=intent.body,
            html_body=intent.html_body,
            ledger=rows,
            validity_seconds=int((attempt.validity or policy.provider_queue_validity).total_seconds()),
            channel=intent.channel,
            subject=intent.subject,
            attachment=intent.attachment,
            message_id_of=attempt.message_id_of,
            workflow_id=intent.workflow_id,
            category=intent.category,
            time_zone=intent.time_zone,
            policy_at=workflow.now(),
        ),
        task_queue=submit_task_queue(workflow.info().task_queue),
        schedule_to_start_timeout=max(intent.expires_at - workflow.now(), timedelta(seconds=1)),
        start_to_close_timeout=policy.submit_timeout,
        retry_policy=_SUBMIT_RETRY,
        # Where the submit stands while the route's rate limit holds a backlog (DispatchOrder).
        priority=Priority(
            priority_key=attempt.priority, fairness_key=intent.tenant, fairness_weight=attempt.fairness_weight
        ),
    )


async def lookup(attempt: AttemptRecord, intent: Intent, policy: DeliveryPolicy) -> LookupOutcome:
    """Find the attempt at the provider (by id when known, else by our reference); a lookup that
    could not run is Unavailable, which says nothing about the attempt."""
    try:
        return await workflow.execute_activity_method(
            ProviderActivities.lookup,
            LookupInput(
                channel=intent.channel,
                attempt_ref=attempt.ref,
                provider_id=attempt.provider_id,
                to=intent.recipient,
                content_sha256=intent.content_sha256,
                since=attempt.started_at,
                message_id_of=attempt.message_id_of,
                in_flight_bound=policy.submit_in_flight_bound,
            ),
            start_to_close_timeout=_READ_TIMEOUT,
            retry_policy=_READ_RETRY,
        )
    except ActivityError as error:
        return LookupOutcome(result=Unavailable(reason=f"lookup activity failed: {activity_failure(error)}"))


async def ask_to_cancel(attempt: AttemptRecord, intent: Intent) -> tuple[bool, str]:
    """Ask the provider once to drop an accepted attempt: (canceled, reason)."""
    try:
        answer = await workflow.execute_activity_method(
            ProviderActivities.cancel,
            ProviderCancelInput(channel=intent.channel, provider_id=attempt.provider_id),
            start_to_close_timeout=_READ_TIMEOUT,
            retry_policy=_READ_RETRY,
        )
    except ActivityError as error:
        return False, f"cancel activity failed: {activity_failure(error)}"
    return answer.canceled, answer.reason


async def append_ledger(batch: LedgerBatch) -> IntentRecorded | None:
    return await workflow.execute_local_activity_method(
        LedgerActivities.append_ledger, batch, start_to_close_timeout=_LEDGER_TIMEOUT, retry_policy=_LEDGER_RETRY
    )


async def dispatch_order_for(query: DispatchQuery) -> DispatchOrder:
    """The send policy's place for the next attempt in its route's queue (a ledger read)."""
    try:
        return await workflow.execute_local_activity_method(
            LedgerActivities.dispatch_order, query, start_to_close_timeout=_ORDER_TIMEOUT, retry_policy=_ORDER_RETRY
        )
    except FailureError as error:
        # A local activity out of attempts surfaces as its own failure (an ApplicationError), not
        # wrapped in an ActivityError as a remote one is.
        why = activity_failure(error) if isinstance(error, ActivityError) else getattr(error, "type", None) or type(error).__name__
        order = built_in_order(query.category, query.tenant, query.requested)
        reason = f"send policy unreadable ({why}): built-in defaults, {order.reason}"
        return order.model_copy(update={"reason": reason})


async def read_event_stream(query: EventStreamQuery) -> EventStream:
    """The recorded posts of the ESP that would carry an attempt's events (a ledger read, retried)."""
    return await workflow.execute_local_activity_method(
        LedgerActivities.read_event_stream, query, start_to_close_timeout=_LEDGER_TIMEOUT, retry_policy=_LEDGER_RETRY
    )


def never_started(error: ActivityError) -> bool:
    """The activity timed out in its queue: no worker started it, so it did nothing."""
    cause = error.cause
    return isinstance(cause, TimeoutError) and cause.type is TimeoutType.SCHEDULE_TO_START


def activity_failure(error: ActivityError) -> str:
    cause = error.cause
    return type(cause).__name__ if cause is not None else "ActivityError"
