"""The machine's calls out: provider activities and the ledger's local activities, each run with
the timeout and retry policy its side effect allows, and its answer (or failure) turned into the
event the machine is stepped with. Deterministic code only (it schedules, it does no I/O itself).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError, FailureError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from activities.ledger import LedgerActivities
    from activities.provider import ProviderActivities
    from herald.machine.commands import AskToCancel, Command, Look, ReadOrder, ReadStream, Submit, WriteRows
    from herald.machine.events import (
        Answer,
        LookAnswered,
        OrderRead,
        ProviderCancelAnswered,
        RowsWritten,
        StreamRead,
        SubmitAnswered,
        SubmitFailed,
    )
    from herald.outcomes import LookupOutcome, Unavailable
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
# The dispatch order is read once: with the ledger away, the machine sends the attempt at the
# built-in priorities rather than wait.
_ORDER_RETRY = RetryPolicy(maximum_attempts=1)
_ORDER_TIMEOUT = timedelta(seconds=5)


async def call(command: Command) -> Answer:
    """Run one of the machine's calls out; the event that answers it."""
    match command:
        case Submit():
            return await submit(command)
        case Look():
            return await look(command)
        case AskToCancel():
            return await ask_to_cancel(command)
        case WriteRows():
            recorded = await workflow.execute_local_activity_method(
                LedgerActivities.append_ledger,
                command.batch,
                start_to_close_timeout=_LEDGER_TIMEOUT,
                retry_policy=_LEDGER_RETRY,
            )
            return RowsWritten(recorded=recorded)
        case ReadOrder():
            return await read_order(command)
        case ReadStream():
            stream = await workflow.execute_local_activity_method(
                LedgerActivities.read_event_stream,
                command.query,
                start_to_close_timeout=_LEDGER_TIMEOUT,
                retry_policy=_LEDGER_RETRY,
            )
            return StreamRead(stream=stream)
    raise TypeError(f"{command.kind}: not a call out")


async def submit(command: Submit) -> SubmitAnswered | SubmitFailed:
    """Write the rows and send the attempt once, on the submit queue the Temporal server paces.

    An activity that did not finish (the worker died, it timed out) is SubmitFailed: the rows may
    or may not be written and the provider may or may not have the message; ``never_started``
    when it was still queued at the deadline (then it did nothing).
    """
    try:
        step = await workflow.execute_activity_method(
            ProviderActivities.submit,
            command.input,
            task_queue=submit_task_queue(workflow.info().task_queue),
            schedule_to_start_timeout=command.queue_timeout,
            start_to_close_timeout=command.timeout,
            retry_policy=_SUBMIT_RETRY,
            priority=Priority(
                priority_key=command.priority_key,
                fairness_key=command.fairness_key,
                fairness_weight=command.fairness_weight,
            ),
        )
    except ActivityError as error:
        return SubmitFailed(failure=activity_failure(error), never_started=never_started(error))
    return SubmitAnswered(step=step)


async def look(command: Look) -> LookAnswered:
    """Find the attempt at the provider; a lookup that could not run is Unavailable, which says
    nothing about the attempt."""
    try:
        outcome = await workflow.execute_activity_method(
            ProviderActivities.lookup, command.input, start_to_close_timeout=_READ_TIMEOUT, retry_policy=_READ_RETRY
        )
    except ActivityError as error:
        outcome = LookupOutcome(result=Unavailable(reason=f"lookup activity failed: {activity_failure(error)}"))
    return LookAnswered(outcome=outcome)


async def ask_to_cancel(command: AskToCancel) -> ProviderCancelAnswered:
    """Ask the provider once to drop an accepted attempt."""
    try:
        answer = await workflow.execute_activity_method(
            ProviderActivities.cancel, command.input, start_to_close_timeout=_READ_TIMEOUT, retry_policy=_READ_RETRY
        )
    except ActivityError as error:
        return ProviderCancelAnswered(canceled=False, reason=f"cancel activity failed: {activity_failure(error)}")
    return ProviderCancelAnswered(canceled=answer.canceled, reason=answer.reason)


async def read_order(command: ReadOrder) -> OrderRead:
    """The send policy's place for the next attempt in its route's queue (a ledger read)."""
    try:
        order = await workflow.execute_local_activity_method(
            LedgerActivities.dispatch_order,
            command.query,
            start_to_close_timeout=_ORDER_TIMEOUT,
            retry_policy=_ORDER_RETRY,
        )
    except FailureError as error:
        # A local activity out of attempts surfaces as its own failure (an ApplicationError), not
        # wrapped in an ActivityError as a remote one is.
        why = activity_failure(error) if isinstance(error, ActivityError) else getattr(error, "type", None) or type(error).__name__
        return OrderRead(order=None, failure=why)
    return OrderRead(order=order)


def never_started(error: ActivityError) -> bool:
    """The activity timed out in its queue: no worker started it, so it did nothing."""
    cause = error.cause
    return isinstance(cause, TimeoutError) and cause.type is TimeoutType.SCHEDULE_TO_START


def activity_failure(error: ActivityError) -> str:
    cause = error.cause
    return type(cause).__name__ if cause is not None else "ActivityError"
