"""NotificationWorkflow: runs one intent's machine (``herald.machine``) on Temporal.

It decides nothing and changes nothing itself: it asks the machine what to do, waits on durable
timers and the ``delivery_reports`` signal, calls the activities (``workflows/provider_calls.py``)
and hands what they said back to the machine. Checkpoints write the machine's rows to the ledger
before every long wait, before continuing as new and at the close.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from herald.contracts import (
        CancelAnswer,
        CancelRequest,
        Held,
        IntentStatus,
        KeyConflict,
        NotificationInput,
        NotSent,
        ReportBatch,
        SubmitStep,
    )
    from herald.lifecycle import OPEN_STATES, IntentState
    from herald.machine import IntentMachine, Look
    from herald.machine.attempt import AttemptRecord
    from herald.machine.looks import LookPlan
    from herald.metrics.instruments import count_finished
    from herald.workflow_api import (
        QUERY_STATUS,
        SIGNAL_DELIVERY_REPORTS,
        SIGNAL_KEY_CONFLICT,
        UPDATE_CANCEL,
        WORKFLOW_TYPE,
    )
    from workflows import provider_calls
    from workflows.checkpoints import Checkpoints
    from workflows.durable_clock import DurableClock, WorkflowClock

# The last look at the horizon asks a provider that cannot answer again, 2 s and 4 s later: a
# passing outage must not turn into `unknown`, and a lasting one must not hold the verdict forever.
_LAST_LOOK_TRIES = 3
_LAST_LOOK_BACKOFF_SECONDS = 2


@workflow.defn(name=WORKFLOW_TYPE)
class NotificationWorkflow:
    @workflow.init
    def __init__(self, input: NotificationInput) -> None:
        # Signals and updates delivered with the first task run before run(): all state lives here.
        self._clock = WorkflowClock()
        self._machine = IntentMachine(input, self._clock, workflow.info().first_execution_run_id)
        self._timer = DurableClock()
        self._checkpoints = Checkpoints(self._machine, input.carried)

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        machine = self._machine
        while not machine.state.is_terminal:
            if machine.state is IntentState.PENDING:
                await self._dispatch()
            elif machine.state in OPEN_STATES:
                await self._resolve_open_attempts()
            elif machine.state is IntentState.RETRYABLE_FAILURE:
                await self._wait_for_retry()
        await self._follow_open_attempt()
        await self._settle_handlers()
        # Temporal counts every normal return as a success, undelivered included: this counter
        # says how the intent ended. The SDK records nothing during replay; only a final workflow
        # task that is run again (its worker died before completing it) can count an intent twice.
        count_finished(workflow.metric_meter(), machine.state.value, input.intent.channel.value)
        return machine.status()

    async def _settle_handlers(self) -> None:
        """Apply and write everything, let running handlers finish, apply and write what they did."""
        self._machine.apply_reports()
        await self._checkpoints.checkpoint()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._machine.apply_reports()
        await self._checkpoints.checkpoint()
        self._timer.disarm()

    async def _continue_as_new_if_suggested(self) -> None:
        """Keep a days-long poll's history bounded: hand the state to a fresh run when Temporal asks."""
        if workflow.info().is_continue_as_new_suggested():
            await self._settle_handlers()
            machine = self._machine
            workflow.continue_as_new(
                NotificationInput(intent=machine.intent, policy=machine.policy, carried=machine.carry())
            )

    # ---- pending -> submitting -> an answer --------------------------------------------

    async def _dispatch(self) -> None:
        machine = self._machine
        order = machine.known_order() or await provider_calls.dispatch_order_for(machine.dispatch_query())
        attempt = machine.begin_attempt(order)
        if attempt is None:
            return
        step = await self._submit(attempt)
        while isinstance(step, NotSent):
            # Nothing reached the provider: wait without writing (the ledger is the problem), then
            # try the same attempt again, unless a cancel, a closing clock or late evidence came first.
            due = machine.not_sent()
            while machine.waits_to_resubmit(due):
                await self._wait_until(due, lazy=True)
            if machine.abandon_not_sent(attempt, step):
                return
            step = await self._submit(attempt)
        not_before = machine.on_submit(attempt, step)
        while isinstance(step, Held) and not_before is not None and machine.deferred(not_before):
            await self._wait_until(not_before)
            machine.deferral_woken(step)

    async def _submit(self, attempt: AttemptRecord) -> SubmitStep:
        machine = self._machine
        try:
            return await provider_calls.submit(attempt, machine.intent, machine.policy, machine.rows_for_submit())
        except ActivityError as error:
            if provider_calls.never_started(error):
                return machine.expired_in_queue()
            return machine.submit_did_not_finish(provider_calls.activity_failure(error))

    # ---- submitting / accepted: open attempts are looked up or polled, never resent ------

    async def _resolve_open_attempts(self) -> None:
        machine, plan = self._machine, LookPlan(self._machine)
        while machine.state in OPEN_STATES:
            await self._continue_as_new_if_suggested()
            until, governing, lazy = plan.next_wait()
            waited_in = machine.state
            timer_fired = await self._wait_until(until, governing, lazy=lazy)
            if machine.state not in OPEN_STATES:
                return
            if machine.state is not waited_in:
                continue  # submitting <-> accepted: the schedules change before anything else is judged
            closing = machine.closing(governing)
            if closing is not None and closing.state is IntentState.UNKNOWN:
                await self._last_look(closing.reason)
                return
            if machine.close_if(closing):
                return
            if timer_fired:
                for attempt in plan.watched:
                    if plan.take_if_due(attempt):
                        await self._look(attempt)

    async def _look(self, attempt: AttemptRecord, *, following: bool = False) -> str | None:
        """Ask about one attempt as its provider allows; what was found, None if it could not answer."""
        machine = self._machine
        way = machine.way_to_look(attempt)
        if way is Look.NOTHING and not following:
            return machine.why_nothing_to_ask(attempt)
        if way is Look.STREAM and not following:
            return machine.on_event_stream(
                attempt, await provider_calls.read_event_stream(machine.stream_query(attempt))
            )
        outcome = await provider_calls.lookup(attempt, machine.intent, machine.policy)
        return machine.on_lookup(attempt, outcome, by_reference=way is Look.LOOKUP and not following)

    async def _last_look(self, reason: str) -> None:
        """The horizon passed: look at every open attempt once more (a provider that cannot answer
        is asked again, a bounded number of times) before the machine may say `unknown`."""
        looked_at, answers = workflow.now(), []
        for attempt in self._machine.open_attempts():
            answer = None
            for tries in range(_LAST_LOOK_TRIES):
                if not attempt.open:
                    break
                if tries:
                    await workflow.sleep(_LAST_LOOK_BACKOFF_SECONDS * tries)
                answer = await self._look(attempt)
                if answer is not None:
                    break
            answers.append(f"attempt {attempt.number} {answer or 'unavailable'}")
        self._machine.close_unknown(reason, looked_at, answers)

    async def _follow_open_attempt(self) -> None:
        """After a cancel or expiry closed the intent, keep recording what its attempt does."""
        machine = self._machine
        attempt = machine.attempt_to_follow()
        if attempt is None:
            return
        if machine.asks_provider_to_cancel(attempt):
            canceled, why = await provider_calls.ask_to_cancel(attempt, machine.intent)
            machine.on_provider_cancel(attempt, canceled, why)
        due: datetime | None = None  # kept across wake-ups by reports: one timer per wait
        while machine.following(attempt):
            await self._continue_as_new_if_suggested()
            due = due or machine.follow_due(attempt)
            if await self._wait_until(due, attempt, closing_clocks=False):
                due = None
                if machine.follow_asks(attempt):
                    await self._look(attempt, following=True)

    # ---- retryable_failure: the next attempt, on a durable timer ------------------------

    async def _wait_for_retry(self) -> None:
        machine = self._machine
        due = machine.retry_due()
        while due is not None and machine.state is IntentState.RETRYABLE_FAILURE:
            await self._continue_as_new_if_suggested()
            if machine.close_if(machine.closing()):
                return
            if workflow.now() >= due:
                machine.retry_elapsed()
                return
            # Reports for earlier attempts may wake this wait; they never shorten the backoff, and
            # late evidence that the attempt was accepted after all ends it without a new send.
            await self._wait_until(due)

    # ---- the one wait -------------------------------------------------------------------

    async def _wait_until(
        self, until: datetime, attempt: AttemptRecord | None = None, *, closing_clocks: bool = True, lazy: bool = False
    ) -> bool:
        """Sleep until `until`, a report arrives, or (with closing_clocks) a cancel or closing
        clock is due: the earliest wins. Unless `lazy`, the ledger and the search attributes
        are brought up to date first, since the wait may be long.

        Returns True when `until` has passed (the caller's own clock fired).
        """
        machine = self._machine
        if not lazy:
            await self._checkpoints.checkpoint()
        limit = min(until, machine.deadline()) if closing_clocks else until
        if attempt is not None:
            limit = min(limit, machine.horizon(attempt))
        if limit > workflow.now():
            timer = self._timer.arm(limit)
            await workflow.wait_condition(
                lambda: machine.has_reports or (closing_clocks and machine.cancel_request is not None) or timer.done()
            )
        machine.apply_reports()
        return workflow.now() >= until

    # ---- handlers ----------------------------------------------------------------------

    @workflow.signal(name=SIGNAL_DELIVERY_REPORTS)
    def delivery_reports(self, batch: ReportBatch) -> None:
        self._machine.receive_reports(batch)

    @workflow.signal(name=SIGNAL_KEY_CONFLICT)
    def key_conflict(self, conflict: KeyConflict) -> None:
        self._machine.on_key_conflict(conflict)

    @workflow.update(name=UPDATE_CANCEL)
    def cancel(self, request: CancelRequest) -> CancelAnswer:
        return self._machine.on_cancel(request)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> IntentStatus:
        return self._machine.status()
