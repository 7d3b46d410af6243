"""NotificationWorkflow: one notification intent, from pending to an explained outcome.

It orchestrates only: it sequences durable timers, activities and the ``delivery_reports``
signal around decisions taken elsewhere. What it knows lives in an ``IntentRecord``
(``workflows/intent_record.py``: state, attempts, unwritten ledger rows), every decision is a pure
function of ``herald`` (the state machine in ``herald.lifecycle``, evidence across attempts in
``herald.evidence``, clocks in ``herald.clocks`` and ``herald.delivery_policy``), and its calls out
are in ``workflows/provider_calls.py``.

The central rule: a submit whose outcome is unknown is resolved by looking the same attempt up,
never by a second submit. Only an observation that proves the attempt was not accepted (a definite
retryable answer, or a lookup that still finds nothing once the provider can no longer hold the
message unlisted) opens another attempt, and only while no attempt of the intent is accepted or
unresolved. No intent is called ``unknown`` before a last lookup at the resolution horizon has
found nothing conclusive.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from herald.clocks import Closing, closing_clock
    from herald.contracts import (
        AlreadyRecorded,
        CancelAnswer,
        CancelRequest,
        DeliveryReport,
        Held,
        IntentStatus,
        KeyConflict,
        NotificationInput,
        NotSent,
        ReportBatch,
        Sent,
        SubmitStep,
    )
    from herald.delivery_policy import (
        budget_spent,
        lookup_delay,
        next_attempt_delay,
        not_sent_delay,
        outage_length,
        poll_delay,
    )
    from herald.evidence import may_dispatch
    from herald.ledger.records import LedgerBatch
    from herald.lifecycle import OPEN_STATES, IntentState, ObservationKind, Source, SubmitResult
    from herald.metrics.instruments import count_finished
    from herald.outcomes import SubmitOutcome, Unknown
    from herald.send_policy import PolicyDecision
    from herald.workflow_api import (
        QUERY_STATUS,
        SIGNAL_DELIVERY_REPORTS,
        SIGNAL_KEY_CONFLICT,
        UPDATE_CANCEL,
        WORKFLOW_TYPE,
    )
    from workflows import provider_calls
    from workflows.attempt_record import AttemptRecord
    from workflows.checkpoints import Checkpoints
    from workflows.durable_clock import DurableClock
    from workflows.intent_record import IntentRecord
    from workflows.reconciliation import Reconciler



@workflow.defn(name=WORKFLOW_TYPE)
class NotificationWorkflow:
    @workflow.init
    def __init__(self, input: NotificationInput) -> None:
        # Signals and updates delivered with the first task run before run(): all state lives here.
        self._intent = input.intent
        self._policy = input.policy
        self._record = IntentRecord(input.intent)
        self._reconciler = Reconciler(self._record, input.intent, input.policy)
        self._reports: deque[DeliveryReport] = deque()
        self._seen_inbox_ids: set[int] = set()
        self._cancel: CancelRequest | None = None
        self._clock = DurableClock()
        if input.carried is not None:
            self._record.restore(input.carried)
            self._seen_inbox_ids = set(input.carried.seen_inbox_ids)
            self._cancel = input.carried.cancel
        # The run checkpointed before continuing as new, and search attributes carry over.
        carried = input.carried
        self._checkpoints = Checkpoints(
            self._record, (carried.state, len(carried.attempts)) if carried else (IntentState.PENDING, 0)
        )

    @property
    def _state(self) -> IntentState:
        return self._record.state

    @property
    def _attempts(self) -> list[AttemptRecord]:
        return self._record.attempts

    async def _continue_as_new_if_suggested(self) -> None:
        """Keep a days-long poll's history bounded: hand the state to a fresh run when Temporal asks."""
        if not workflow.info().is_continue_as_new_suggested():
            return
        self._drain_reports()
        await self._checkpoints.checkpoint()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._drain_reports()
        await self._checkpoints.checkpoint()
        self._clock.disarm()
        carried = self._record.carry(seen_inbox_ids=self._seen_inbox_ids, cancel=self._cancel)
        workflow.continue_as_new(
            NotificationInput(intent=self._intent, policy=self._policy, carried=carried)
        )

    # ---- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        while not self._state.is_terminal:
            if self._state is IntentState.PENDING:
                await self._dispatch()
            elif self._state in OPEN_STATES:
                await self._resolve_open_attempts()
            elif self._state is IntentState.RETRYABLE_FAILURE:
                await self._wait_for_retry()
        await self._follow_open_attempt()
        self._drain_reports()
        await self._checkpoints.checkpoint()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._drain_reports()
        await self._checkpoints.checkpoint()
        self._clock.disarm()
        # Temporal counts every normal return as a success, undelivered included: this counter
        # says how the intent ended. The SDK records nothing during replay; only a final workflow
        # task that is run again (its worker died before completing it) can count an intent twice.
        count_finished(workflow.metric_meter(), self._state.value, self._intent.channel.value)
        return self.status()

    # ---- pending -> submitting -----------------------------------------------------------

    async def _dispatch(self) -> None:
        if self._close_if(self._closing()):
            return
        if not await self._recipient_cooldown_passed() or self._state is not IntentState.PENDING:
            return  # closed by a clock, or settled by late evidence about an earlier attempt
        if not may_dispatch([attempt.view() for attempt in self._attempts]):
            # Unreachable while every path settles first; if it were reached, settling beats sending.
            self._record.settle("an earlier attempt is accepted or unresolved: no new attempt", Source.CLOCK)
            return
        attempt = self._record.prepare_attempt()
        attempt.message_id_of = self._record.message_id_to_reuse()
        # The submit activity commits these rows (the attempt row among them) before it calls
        # the provider; if it cannot, it does not call, and the same attempt is prepared again.
        rows = self._record.ledger.take()
        not_sent_waits = 0
        while True:
            step = await self._submit(attempt, rows)
            if not isinstance(step, NotSent):
                break
            # Nothing reached the provider: wait (without writing: the ledger is the problem), then
            # prepare the same attempt again with whatever the workflow learned meanwhile, unless a
            # cancel or a closing clock came first.
            not_sent_waits += 1
            due = workflow.now() + not_sent_delay(self._policy, not_sent_waits)
            while workflow.now() < due and self._state is IntentState.SUBMITTING and self._closing() is None:
                await self._wait_until(due, None, lazy=True)
            rows = rows.merged_with(self._record.ledger.take())
            closing = self._closing() if self._state is IntentState.SUBMITTING else None
            if self._state is not IntentState.SUBMITTING or closing is not None:
                self._record.ledger.requeue(rows)
                attempt.submit_result = SubmitResult.NOT_SENT
                self._record.observe_fact(attempt, Source.SUBMIT, ObservationKind.NOT_SENT, True, step.reason)
                self._close_if(closing)
                return
        if isinstance(step, Held):
            await self._held_by_policy(attempt, rows, step.decision)
            return
        if isinstance(step, AlreadyRecorded):
            self._record.suppress(step.recorded)
            return
        attempt.provider, attempt.capabilities = step.provider, step.capabilities
        if step.give_up_after_seconds is not None:
            attempt.give_up_after = timedelta(seconds=step.give_up_after_seconds)
        self._record.apply_submit(attempt, step.outcome)
        self._drain_reports()
        if self._state is IntentState.ACCEPTED and self._reconciler.nothing_more_to_learn(attempt):
            self._record.transition(
                IntentState.RELAYED,
                f"handed to the relay ({attempt.provider}), which reports nothing back: nothing more can be known",
                Source.SUBMIT,
                attempt=attempt.number,
                closes=True,
            )

    async def _submit(self, attempt: AttemptRecord, rows: LedgerBatch) -> SubmitStep:
        try:
            step = await provider_calls.submit(attempt, self._intent, self._policy, rows)
        except ActivityError as error:
            # The worker died or the activity timed out: the rows may or may not be committed (they
            # are written again, idempotently, at the next checkpoint) and the request may have
            # reached the provider (it is looked up, never resent).
            self._record.ledger.requeue(rows)
            reason = f"submit activity did not finish: {provider_calls.activity_failure(error)}"
            return Sent(outcome=SubmitOutcome(result=Unknown(reason=reason)))
        if isinstance(step, (Sent, AlreadyRecorded)) and rows.record is not None:
            self._record.ledger.intent_recorded = True
        return step

    async def _held_by_policy(self, attempt: AttemptRecord, rows: LedgerBatch, decision: PolicyDecision) -> None:
        """The send policy held the attempt before anything was written or sent: the record
        suppresses it or defers it; a deferral waits here (pending, on a durable timer) and dispatch
        evaluates again, unless a closing clock comes first (then both reasons are recorded)."""
        not_before = self._record.held_by_policy(attempt, rows, decision)
        while not_before is not None and workflow.now() < not_before and self._state is IntentState.PENDING:
            await self._wait_until(not_before, None)
            closing = self._closing() if self._state is IntentState.PENDING else None
            if closing is not None:
                both = f"{closing.reason}; held by policy v{decision.version} ({decision.rule}): {decision.reason}"
                self._record.close(closing.state, both, closing.source)

    async def _recipient_cooldown_passed(self) -> bool:
        """Defer (never drop) while another intent's attempt to this recipient is too recent.

        Returns False when a closing clock closed the intent during the wait.
        """
        cooldown = self._policy.recipient_cooldown
        if cooldown <= timedelta(0):
            return True
        while True:
            last = await provider_calls.last_attempt_to_recipient(self._intent)
            if last is None or workflow.now() >= last + cooldown:
                return True
            not_before = last + cooldown
            self._record.ledger.add_observation(
                None,
                Source.CLOCK,
                ObservationKind.DEFERRED,
                True,
                f"recipient cooldown: next attempt not before {not_before.isoformat()}",
            )
            while workflow.now() < not_before:
                await self._wait_until(not_before, None)
                if self._state is not IntentState.PENDING or self._close_if(self._closing()):
                    return False

    # ---- submitting / accepted: open attempts are looked up or polled, never resent ------
    #
    # An attempt without a provider id (its submit's outcome is unknown) is looked up by our
    # reference on the lookup schedule; one with an id is polled on the slower poll schedule while
    # reports are awaited. Normally one attempt is open; two are open only when evidence showed
    # the provider had an attempt Herald had concluded it never took.

    async def _resolve_open_attempts(self) -> None:
        due: dict[int, tuple[bool, datetime]] = {}  # attempt number -> (polled by id, when)
        quiet_until: datetime | None = None  # end of a report-only attempt's lazy first wait
        while self._state in OPEN_STATES:
            await self._continue_as_new_if_suggested()
            open_attempts = self._record.open_attempts()
            for attempt in open_attempts:
                by_id = attempt.provider_id is not None
                if due.get(attempt.number, (None,))[0] is not by_id:
                    due[attempt.number] = (by_id, workflow.now() + self._reconciler.look_delay(attempt))
            for number in [number for number in due if number not in {a.number for a in open_attempts}]:
                del due[number]
            if not any(attempt.open for attempt in open_attempts):
                # The evidence rules keep an open attempt behind these states; looping here would
                # spin without waiting. Failing the task makes the bug visible instead.
                raise RuntimeError(f"intent is {self._state.value} with no open attempt")
            governing = open_attempts[-1]
            until = min(due[attempt.number][1] for attempt in open_attempts)
            # Until an accepted attempt's first poll, the ledger and search attributes are not
            # written: on the normal path the final report arrives first and one write at the close
            # records everything. An intent still waiting at its first poll is checkpointed then.
            lazy = all(
                attempt.provider_id is not None and attempt.lookups == 0 and self._reconciler.can_poll(attempt)
                for attempt in open_attempts
            )
            if not lazy and self._awaits_first_event(open_attempts):
                # Nothing to poll (SMTP): the same laziness, on a clock of its own: at poll_initial
                # the wait is checkpointed and goes on to the resolution horizon as before.
                quiet_until = quiet_until or workflow.now() + self._policy.poll_initial
                if workflow.now() < quiet_until:
                    until, lazy = min(until, quiet_until), True
            waited_in = self._state
            timer_fired = await self._wait_until(until, governing, lazy=lazy)
            if self._state not in OPEN_STATES:
                return
            if self._state is not waited_in:
                continue  # submitting <-> accepted: the schedules change before anything else is judged
            closing = self._closing(governing)
            if closing is not None:
                if closing.state is IntentState.UNKNOWN:
                    await self._reconciler.last_look(closing.reason)
                else:
                    self._close_if(closing)
                return
            if not timer_fired:
                continue
            for attempt in open_attempts:
                if due[attempt.number][1] <= workflow.now() and attempt.open:
                    del due[attempt.number]
                    await self._reconciler.look(attempt)

    def _awaits_first_event(self, open_attempts: list[AttemptRecord]) -> bool:
        """Every open attempt is accepted by a provider that only reports (no lookups)."""
        return all(
            attempt.provider_id is not None
            and not self._reconciler.can_poll(attempt)
            and self._reconciler.capabilities(attempt).delivery_reports
            for attempt in open_attempts
        )

    async def _follow_open_attempt(self) -> None:
        """After a cancel or expiry closed the intent, keep recording what its attempt does.

        Cancellation cannot recall an accepted message; the attempt is tracked to its own
        outcome (by reports, and by polls unless expiry closed polling) or to the horizon.
        """
        if not self._attempts:
            return
        attempt = self._attempts[-1]
        if self._reconciler.nothing_more_to_learn(attempt):
            return  # accepted by a provider that neither reports nor answers: nothing to wait for
        polls_allowed = self._record.closed_by != "clock:expiry"
        if (
            self._state is IntentState.CANCELLED
            and attempt.provider_id is not None
            and not attempt.resolved
            and self._reconciler.capabilities(attempt).cancel_accepted
        ):
            canceled, why = await provider_calls.ask_to_cancel(attempt, self._intent)
            self._record.observe_fact(attempt, Source.OPERATOR, ObservationKind.PROVIDER_CANCEL, canceled, why)
        due: datetime | None = None
        while not attempt.resolved and self._within_horizon(attempt):
            await self._continue_as_new_if_suggested()
            if attempt.submit_result is None:
                return  # never reached the provider
            if due is None and not self._reconciler.can_ask(attempt):
                # No one to ask (SMTP): reports alone can resolve it, so one wait to the horizon.
                due = attempt.started_at + self._policy.resolution_horizon
            elif due is None:
                # An attempt still without a provider id is looked up on the lookup schedule, a known one polled.
                schedule = lookup_delay if attempt.provider_id is None else poll_delay
                due = workflow.now() + schedule(self._policy, attempt.lookups, workflow.random().random())
            timer_fired = await self._wait_until(due, attempt, closing_clocks=False)
            if timer_fired:
                due = None
                asking = polls_allowed and self._reconciler.can_ask(attempt)
                if asking and not attempt.resolved and self._within_horizon(attempt):
                    await self._reconciler.poll(attempt)

    # ---- retryable_failure: the next attempt, on a durable timer ------------------------

    async def _wait_for_retry(self) -> None:
        attempt = self._attempts[-1]
        results = [each.submit_result for each in self._attempts]
        delay = next_attempt_delay(self._policy, results, attempt.retry_hint, workflow.random().random())
        if delay is None:
            self._record.transition(
                IntentState.PERMANENT_FAILURE,
                f"retry budget exhausted after {budget_spent(results)} attempts",
                Source.CLOCK,
                attempt=attempt.number,
                closes=True,
            )
            return
        attempt.retry_delay = delay
        due = workflow.now() + delay
        while self._state is IntentState.RETRYABLE_FAILURE:
            await self._continue_as_new_if_suggested()
            if self._close_if(self._closing()):
                return
            if workflow.now() >= due:
                break
            # Reports for earlier attempts may wake this wait; they never shorten the backoff.
            await self._wait_until(due, None)
        if self._state is not IntentState.RETRYABLE_FAILURE:
            return  # late evidence showed the attempt was accepted after all: no new send
        self._record.transition(IntentState.PENDING, f"retry backoff of {delay.total_seconds():.1f}s elapsed", Source.CLOCK)

    def _outage(self) -> str | None:
        """While the latest attempts found the provider unreachable: since when, how often, why."""
        count = outage_length([each.submit_result for each in self._attempts])
        if not count:
            return None
        first, last = self._attempts[-count], self._attempts[-1]
        return (
            f"provider unreachable since {first.started_at.isoformat()} "
            f"({count} attempt{'s' if count > 1 else ''}, nothing sent; last: {last.submit_reason or 'no answer'})"
        )

    # ---- clocks ------------------------------------------------------------------------

    async def _wait_until(
        self, until: datetime, attempt: AttemptRecord | None, *, closing_clocks: bool = True, lazy: bool = False
    ) -> bool:
        """Sleep until `until`, a report arrives, or (with closing_clocks) a cancel or closing
        clock is due: the earliest wins. Unless `lazy`, the ledger and the search attributes
        are brought up to date first, since the wait may be long.

        Returns True when `until` has passed (the caller's own clock fired).
        """
        if not lazy:
            await self._checkpoints.checkpoint()
        limit = until
        if closing_clocks:
            limit = min(limit, self._deadline())
        if attempt is not None:
            limit = min(limit, attempt.started_at + self._policy.resolution_horizon)
        if limit > workflow.now():
            timer = self._clock.arm(limit)
            await workflow.wait_condition(
                lambda: bool(self._reports) or (closing_clocks and self._cancel is not None) or timer.done()
            )
        self._drain_reports()
        return workflow.now() >= until

    def _within_horizon(self, attempt: AttemptRecord) -> bool:
        return workflow.now() < attempt.started_at + self._policy.resolution_horizon

    def _closing(self, attempt: AttemptRecord | None = None) -> Closing | None:
        horizon = attempt.started_at + self._policy.resolution_horizon if attempt else None
        return closing_clock(workflow.now(), self._deadline(), horizon)

    def _deadline(self) -> datetime:
        """The intent's expiry, or earlier while the provider is unreachable and the category's policy
        gives up on an outage sooner (``unreachable_give_up_seconds``, counted from creation)."""
        attempt = self._attempts[-1] if self._attempts else None
        if attempt is None or attempt.give_up_after is None or outage_length([attempt.submit_result]) == 0:
            return self._intent.expires_at
        return min(self._intent.expires_at, self._intent.created_at + attempt.give_up_after)

    def _close_if(self, closing: Closing | None) -> bool:
        """Close the intent when a closing clock has closed; whether it did."""
        if closing is None:
            return False
        reason = closing.reason
        outage = self._outage() if closing.state is IntentState.EXPIRED else None
        if outage is not None:
            # Never "permanent_failure" for an outage: the deadline passed while nothing could be sent.
            deadline = self._deadline()
            if deadline < self._intent.expires_at:
                give_up = self._attempts[-1].give_up_after or timedelta(0)
                reason = (
                    f"gave up at {deadline.isoformat()}: the send policy gives up on an unreachable provider "
                    f"{give_up.total_seconds():g}s after the intent was created"
                )
            reason = f"{reason}; {outage}"
        self._record.close(closing.state, reason, closing.source)
        return True

    def _drain_reports(self) -> None:
        while self._reports:
            self._record.observe_report(self._reports.popleft())

    # ---- handlers ----------------------------------------------------------------------

    @workflow.signal(name=SIGNAL_DELIVERY_REPORTS)
    def delivery_reports(self, batch: ReportBatch) -> None:
        """Stored reports of one attempt; the inbox id makes a re-signalled report a no-op."""
        for report in batch.reports:
            if report.inbox_id in self._seen_inbox_ids:
                continue
            self._seen_inbox_ids.add(report.inbox_id)
            self._reports.append(report)

    @workflow.signal(name=SIGNAL_KEY_CONFLICT)
    def key_conflict(self, conflict: KeyConflict) -> None:
        """Record a refused reuse of this key with another payload; nothing about the intent changes."""
        self._record.ledger.add_observation(
            None,
            Source.CLIENT,
            ObservationKind.KEY_CONFLICT,
            False,
            f"key reused with another payload (fingerprint {conflict.intent_fingerprint[:16]}...); refused",
            observed_at=conflict.observed_at,
        )

    @workflow.update(name=UPDATE_CANCEL)
    def cancel(self, request: CancelRequest) -> CancelAnswer:
        """Close future work; an attempt the provider already has is tracked, not recalled."""
        if self._state.is_terminal or self._cancel is not None:
            return self._record.cancel_refused()
        self._cancel = request
        return self._record.cancel(request)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> IntentStatus:
        return self._record.status()
