"""NotificationWorkflow: one notification intent, from pending to an explained outcome.

Deterministic code only. Every decision is a pure function from ``herald``
(the state machine in ``herald.lifecycle``, backoff and horizons in
``herald.delivery_policy``); this class sequences them around durable timers,
activities and the ``delivery_report`` signal.

The central rule: a submit whose outcome is unknown is resolved by looking the
same attempt up, never by a second submit. Only an observation that proves the
attempt was not accepted (a definite retryable answer, or a lookup that still
finds nothing once the provider can no longer hold the message unlisted) opens
another attempt, and only while no attempt of the intent is accepted or
unresolved (``herald.evidence``). No intent is called ``unknown`` before a last
lookup at the resolution horizon has found nothing conclusive.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.ledger import LedgerActivities
    from activities.provider import ProviderActivities
    from herald.contracts import (
        AttemptStatus,
        CancelAnswer,
        CancelRequest,
        CarriedState,
        DeliveryReport,
        IntentStatus,
        KeyConflict,
        LookupInput,
        NotificationInput,
        ProviderCancelInput,
        RecipientCooldownQuery,
        ReportBatch,
        SubmitInput,
        SubmitStep,
        TransitionStatus,
        attempt_number_of,
        attempt_ref,
    )
    from herald.delivery_policy import (
        absence_proven,
        legacy_absence_proven,
        lookup_delay,
        may_retry,
        poll_delay,
        retry_delay,
    )
    from herald.evidence import may_dispatch, next_state, observe_across
    from herald.ledger.records import (
        AttemptRow,
        IntentRecorded,
        LedgerBatch,
        ObservationRow,
        ReceiptOutcomeRow,
        RecordIntentInput,
        TransitionRow,
    )
    from herald.lifecycle import (
        AttemptView,
        IntentState,
        Observation,
        ObservationKind,
        Source,
        SubmitResult,
        check_transition,
        observe,
    )
    from herald.outcomes import (
        Accepted,
        Found,
        LookupOutcome,
        NotFound,
        ProviderStatus,
        Rejected,
        Retryable,
        SubmitOutcome,
        Unavailable,
        Unknown,
    )
    from herald.providers.twilio_codes import is_retryable
    from herald.task_queues import submit_task_queue
    from herald.workflow_api import (
        ATTEMPTS_KEY,
        QUERY_STATUS,
        SIGNAL_DELIVERY_REPORTS,
        SIGNAL_KEY_CONFLICT,
        STATE_KEY,
        UPDATE_CANCEL,
        WORKFLOW_TYPE,
    )

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

# Runs that record this marker prove absence only past the provider's queue bound, let evidence
# about any attempt settle the intent, and look once more at the horizon before `unknown`. The
# marker is asked for only where the earlier rules would decide otherwise (_new_rules), so a run
# whose decisions agree under both, the normal path among them, records none and pays nothing;
# runs recorded before it replay with the rules they were started under (tests/replay holds some).
EVIDENCE_RULES_PATCH = "absence-proof-evidence-across-attempts-final-lookup"
_OPEN_STATES = frozenset({IntentState.SUBMITTING, IntentState.ACCEPTED})


class _Attempt:
    """The workflow's working copy of one attempt (mutable; exposed as AttemptStatus)."""

    def __init__(self, number: int, ref: str, started_at: datetime) -> None:
        self.number = number
        self.ref = ref
        self.started_at = started_at
        self.submit_result: SubmitResult | None = None
        self.provider_id: str | None = None
        self.provider_status: ProviderStatus | None = None
        self.error_code: int | None = None
        self.failure_retryable = False
        self.retry_hint: timedelta | None = None
        self.retry_delay: timedelta | None = None
        self.lookups = 0
        self.seen_after_presumed_absent = False

    @classmethod
    def from_status(cls, status: AttemptStatus) -> _Attempt:
        attempt = cls(status.number, status.attempt_ref, status.started_at)
        attempt.submit_result = status.submit_result
        attempt.provider_id = status.provider_id
        attempt.provider_status = status.provider_status
        attempt.error_code = status.error_code
        attempt.failure_retryable = status.failure_retryable
        attempt.lookups = status.lookups
        attempt.seen_after_presumed_absent = status.seen_after_presumed_absent
        if status.retry_hint_seconds is not None:
            attempt.retry_hint = timedelta(seconds=status.retry_hint_seconds)
        if status.retry_delay_seconds is not None:
            attempt.retry_delay = timedelta(seconds=status.retry_delay_seconds)
        return attempt

    @property
    def resolved(self) -> bool:
        """True once nothing more can be learned about this attempt."""
        if self.provider_status is not None:
            return self.provider_status.is_final
        return self.submit_result in (
            SubmitResult.RETRYABLE,
            SubmitResult.REJECTED,
            SubmitResult.NOT_ACCEPTED,
            SubmitResult.NOT_SENT,
        )

    @property
    def open(self) -> bool:
        """Handed to the provider and not resolved: it is looked up or polled until it is."""
        return self.submit_result is not None and not self.resolved

    def view(self) -> AttemptView:
        return AttemptView(
            number=self.number,
            provider_id=self.provider_id,
            provider_status=self.provider_status,
            submit_result=self.submit_result,
            failure_retryable=self.failure_retryable,
        )

    def status(self) -> AttemptStatus:
        return AttemptStatus(
            number=self.number,
            attempt_ref=self.ref,
            started_at=self.started_at,
            submit_result=self.submit_result,
            provider_id=self.provider_id,
            provider_status=self.provider_status,
            error_code=self.error_code,
            failure_retryable=self.failure_retryable,
            retry_delay_seconds=self.retry_delay.total_seconds() if self.retry_delay else None,
            retry_hint_seconds=self.retry_hint.total_seconds() if self.retry_hint else None,
            lookups=self.lookups,
            seen_after_presumed_absent=self.seen_after_presumed_absent,
        )


@workflow.defn(name=WORKFLOW_TYPE)
class NotificationWorkflow:
    @workflow.init
    def __init__(self, input: NotificationInput) -> None:
        # Signals and updates delivered with the first task run before run(): all state lives here.
        self._intent = input.intent
        self._policy = input.policy
        self._workflow_id = input.intent.workflow_id
        self._state = IntentState.PENDING
        self._closed_by: str | None = None
        self._attempts: list[_Attempt] = []
        self._reports: deque[DeliveryReport] = deque()
        self._seen_inbox_ids: set[int] = set()
        self._cancel: CancelRequest | None = None
        self._transitions: list[TransitionStatus] = []
        self._next_transition_seq = 1
        self._next_observation_seq = 1
        self._observations_recorded = 0
        self._batch_attempts: list[AttemptRow] = []
        self._batch_transitions: list[TransitionRow] = []
        self._batch_observations: list[ObservationRow] = []
        self._batch_outcomes: list[ReceiptOutcomeRow] = []
        # The intent row is written with the first ledger write of the first run (normally the
        # first submit); a run created by continue-as-new inherits it.
        self._intent_recorded = False
        # What the Web UI's search attributes say now: set by the client's start request.
        self._published: tuple[IntentState, int] = (IntentState.PENDING, 0)
        # The one durable timer the workflow is waiting on, kept across wake-ups by reports so a
        # report that changes nothing does not cost a new timer.
        self._clock: asyncio.Task[None] | None = None
        self._clock_at: datetime | None = None
        if input.carried is not None:
            self._restore(input.carried)

    def _restore(self, carried: CarriedState) -> None:
        self._state = carried.state
        self._closed_by = carried.closed_by
        self._attempts = [_Attempt.from_status(status) for status in carried.attempts]
        self._seen_inbox_ids = set(carried.seen_inbox_ids)
        self._cancel = carried.cancel
        self._transitions = list(carried.transitions)
        self._next_transition_seq = carried.next_transition_seq
        self._next_observation_seq = carried.next_observation_seq
        self._observations_recorded = carried.observations_recorded
        self._intent_recorded = carried.intent_recorded
        # The run checkpointed before continuing as new, and search attributes carry over.
        self._published = (carried.state, len(carried.attempts))

    def _carry(self) -> CarriedState:
        return CarriedState(
            state=self._state,
            closed_by=self._closed_by,
            attempts=[attempt.status() for attempt in self._attempts],
            seen_inbox_ids=sorted(self._seen_inbox_ids),
            cancel=self._cancel,
            transitions=self._transitions,
            next_transition_seq=self._next_transition_seq,
            next_observation_seq=self._next_observation_seq,
            observations_recorded=self._observations_recorded,
            intent_recorded=self._intent_recorded,
        )

    async def _continue_as_new_if_suggested(self) -> None:
        """Keep a days-long poll's history bounded: hand the state to a fresh run when Temporal asks."""
        if not workflow.info().is_continue_as_new_suggested():
            return
        self._drain_reports()
        await self._checkpoint()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._drain_reports()
        await self._checkpoint()
        self._disarm_clock()
        workflow.continue_as_new(NotificationInput(intent=self._intent, policy=self._policy, carried=self._carry()))

    # ---- the run -------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        while not self._state.is_terminal:
            if self._state is IntentState.PENDING:
                await self._dispatch()
            elif self._state in _OPEN_STATES:
                await self._resolve_open_attempts()
            elif self._state is IntentState.RETRYABLE_FAILURE:
                await self._wait_for_retry()
        await self._follow_open_attempt()
        self._drain_reports()
        await self._checkpoint()
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._drain_reports()
        await self._checkpoint()
        self._disarm_clock()
        return self.status()

    def _suppress(self, recorded: IntentRecorded) -> None:
        """The ledger holds this key from an earlier workflow run that Temporal no longer knows
        (retention): nothing of this run was written or sent, so it closes as suppressed."""
        self._attempts = []
        self._transitions = []
        self._batch_attempts, self._batch_transitions, self._batch_observations = [], [], []
        self._state = IntentState.PENDING
        self._closed_by = None
        self._intent_recorded = True
        self._next_transition_seq = recorded.next_transition_seq
        self._next_observation_seq = recorded.next_observation_seq
        reason = (
            f"already recorded by run {recorded.first_run_id} (last state {recorded.last_state.value if recorded.last_state else 'none'})"
            if recorded.same_payload
            else "key reused with a different payload"
        )
        self._transition(IntentState.SUPPRESSED, reason, Source.LEDGER, closes=True)

    # ---- pending -> submitting -----------------------------------------------------------

    async def _dispatch(self) -> None:
        closing = self._closing_clock()
        if closing is not None:
            self._close(*closing)
            return
        if not await self._recipient_cooldown_passed() or self._state is not IntentState.PENDING:
            return  # closed by a clock, or settled by late evidence about an earlier attempt
        if not may_dispatch([attempt.view() for attempt in self._attempts]) and self._new_rules():
            # Unreachable while every path settles first; if it were reached, settling beats sending.
            self._settle("an earlier attempt is accepted or unresolved: no new attempt", Source.CLOCK)
            return
        number = len(self._attempts) + 1
        attempt = _Attempt(number, attempt_ref(self._workflow_id, number), workflow.now())
        self._attempts.append(attempt)
        self._batch_attempts.append(
            AttemptRow(attempt_ref=attempt.ref, workflow_id=self._workflow_id, number=number, prepared_at=attempt.started_at)
        )
        self._transition(IntentState.SUBMITTING, f"attempt {number} prepared", Source.SUBMIT, attempt=number)
        # The submit activity commits these rows (the attempt row among them) before it calls
        # the provider; if it cannot, it does not call, and the same attempt is prepared again.
        rows = self._take_batch()
        not_sent_waits = 0
        while True:
            step = await self._submit(attempt, rows)
            if step.not_sent is None:
                break
            # Nothing reached the provider: wait (without writing: the ledger is the problem), then
            # prepare the same attempt again with whatever the workflow learned meanwhile, unless a
            # cancel or a closing clock came first.
            not_sent_waits += 1
            due = workflow.now() + min(self._policy.backoff_initial * not_sent_waits, self._policy.backoff_max)
            while workflow.now() < due and self._state is IntentState.SUBMITTING and self._closing_clock() is None:
                await self._wait_until(due, None, lazy=True)
            rows = rows.merged_with(self._take_batch())
            closing = self._closing_clock() if self._state is IntentState.SUBMITTING else None
            if self._state is not IntentState.SUBMITTING or closing is not None:
                self._requeue(rows)
                attempt.submit_result = SubmitResult.NOT_SENT
                self._observe_fact(attempt, Source.SUBMIT, ObservationKind.NOT_SENT, True, step.not_sent)
                if closing is not None:
                    self._close(*closing)
                return
        if step.recorded is not None and step.outcome is None:
            self._suppress(step.recorded)
            return
        assert step.outcome is not None
        self._apply_submit(attempt, step.outcome)
        self._drain_reports()

    async def _submit(self, attempt: _Attempt, rows: LedgerBatch) -> SubmitStep:
        try:
            step = await workflow.execute_activity_method(
                ProviderActivities.submit,
                SubmitInput(
                    attempt_ref=attempt.ref,
                    to=self._intent.recipient,
                    body=self._intent.body,
                    ledger=rows,
                    validity_seconds=int(self._policy.provider_queue_validity.total_seconds()),
                ),
                task_queue=submit_task_queue(workflow.info().task_queue),
                start_to_close_timeout=self._policy.submit_timeout,
                retry_policy=_SUBMIT_RETRY,
            )
            if step.not_sent is None and rows.record is not None:
                self._intent_recorded = True
            return step
        except ActivityError as error:
            # The worker died or the activity timed out: the rows may or may not be committed (they
            # are written again, idempotently, at the next checkpoint) and the request may have
            # reached the provider (it is looked up, never resent).
            self._requeue(rows)
            return SubmitStep(outcome=SubmitOutcome(result=Unknown(reason=f"submit activity did not finish: {_cause(error)}")))

    async def _recipient_cooldown_passed(self) -> bool:
        """Defer (never drop) while another intent's attempt to this recipient is too recent.

        Returns False when a closing clock closed the intent during the wait.
        """
        cooldown = self._policy.recipient_cooldown
        if cooldown <= timedelta(0):
            return True
        while True:
            last = await workflow.execute_local_activity_method(
                LedgerActivities.last_attempt_to_recipient,
                RecipientCooldownQuery(workflow_id=self._workflow_id, recipient=self._intent.recipient),
                start_to_close_timeout=_LEDGER_TIMEOUT,
                retry_policy=_LEDGER_RETRY,
            )
            if last is None or workflow.now() >= last + cooldown:
                return True
            not_before = last + cooldown
            self._record_observation(
                None,
                Source.CLOCK,
                ObservationKind.DEFERRED,
                True,
                f"recipient cooldown: next attempt not before {not_before.isoformat()}",
            )
            while workflow.now() < not_before:
                await self._wait_until(not_before, None)
                if self._state is not IntentState.PENDING:
                    return False
                closing = self._closing_clock()
                if closing is not None:
                    self._close(*closing)
                    return False

    def _apply_submit(self, attempt: _Attempt, outcome: SubmitOutcome) -> None:
        result = outcome.result
        attempt.submit_result = SubmitResult(result.kind)
        if isinstance(result, Accepted):
            fact = _fact(attempt, result.provider_id, result.status, result.error_code, Source.SUBMIT, workflow.now())
            self._apply_observation(attempt, fact, kind=ObservationKind.ACCEPTED)
            return
        if isinstance(result, Unknown):
            self._observe_fact(
                attempt, Source.SUBMIT, ObservationKind.UNKNOWN, True, f"outcome unknown, will look up: {result.reason}"
            )
            return
        attempt.error_code = result.error_code
        self._observe_fact(attempt, Source.SUBMIT, ObservationKind(result.kind), True, result.reason, error_code=result.error_code)
        if isinstance(result, Retryable):
            attempt.retry_hint = timedelta(seconds=result.delay_seconds) if result.delay_seconds is not None else None
        # Earlier rules: a refusal moved only a submitting intent (a cancel or report may have moved it first).
        earlier = self._state
        if self._state is IntentState.SUBMITTING:
            earlier = IntentState.RETRYABLE_FAILURE if isinstance(result, Retryable) else IntentState.PERMANENT_FAILURE
        self._settle(result.reason, Source.SUBMIT, attempt=attempt.number, earlier_rules=earlier)

    def _settle(
        self, reason: str, source: Source, *, attempt: int | None = None, earlier_rules: IntentState | None = None
    ) -> None:
        """Move an open intent to where the evidence of all its attempts puts it, if that moved.

        ``earlier_rules`` is where the rules before EVIDENCE_RULES_PATCH would have put it; where
        the two differ, the run's patch marker decides.
        """
        target = next_state(self._state, [each.view() for each in self._attempts])
        if earlier_rules is not None and earlier_rules is not target and not self._new_rules():
            target = earlier_rules
        if target is not self._state:
            self._transition(target, reason, source, attempt=attempt, closes=target.is_terminal)

    def _new_rules(self) -> bool:
        """Whether this run follows the rules of EVIDENCE_RULES_PATCH; asked only where the earlier
        rules would decide otherwise, so runs that never reach such a point record no marker."""
        return workflow.patched(EVIDENCE_RULES_PATCH)

    # ---- submitting / accepted: open attempts are looked up or polled, never resent ------
    #
    # An attempt without a provider id (its submit's outcome is unknown) is looked up by our
    # reference on the lookup schedule; one with an id is polled on the slower poll schedule while
    # reports are awaited. Normally one attempt is open; two are open only when evidence showed
    # the provider had an attempt Herald had concluded it never took.

    async def _resolve_open_attempts(self) -> None:
        due: dict[int, tuple[bool, datetime]] = {}  # attempt number -> (polled by id, when)
        while self._state in _OPEN_STATES:
            await self._continue_as_new_if_suggested()
            open_attempts = self._open_attempts()
            for attempt in open_attempts:
                by_id = attempt.provider_id is not None
                if due.get(attempt.number, (None,))[0] is not by_id:
                    due[attempt.number] = (by_id, workflow.now() + self._look_delay(attempt))
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
            lazy = all(attempt.provider_id is not None and attempt.lookups == 0 for attempt in open_attempts)
            waited_in = self._state
            timer_fired = await self._wait_until(until, governing, lazy=lazy)
            if self._state not in _OPEN_STATES:
                return
            if self._state is not waited_in:
                continue  # submitting <-> accepted: the schedules change before anything else is judged
            closing = self._closing_clock(governing)
            if closing is not None:
                if closing[0] is IntentState.UNKNOWN and self._new_rules():
                    await self._close_at_horizon(closing[1])
                else:
                    self._close(*closing)
                return
            if not timer_fired:
                continue
            for attempt in open_attempts:
                if due[attempt.number][1] <= workflow.now() and attempt.open:
                    del due[attempt.number]
                    await self._look(attempt)

    def _open_attempts(self) -> list[_Attempt]:
        latest = self._attempts[-1]
        earlier = [attempt for attempt in self._attempts[:-1] if attempt.open]
        if earlier and self._new_rules():
            return [*earlier, latest] if latest.open else earlier
        return [latest]  # the earlier rules followed the latest attempt only

    def _look_delay(self, attempt: _Attempt) -> timedelta:
        if attempt.provider_id is not None:
            return poll_delay(self._policy, attempt.lookups, workflow.random().random())
        if attempt.lookups == 0:
            return self._policy.lookup_first_delay
        return lookup_delay(self._policy, attempt.lookups, workflow.random().random())

    async def _look(self, attempt: _Attempt) -> None:
        """Ask the provider about one open attempt: poll it by id, or look it up by our reference."""
        if attempt.provider_id is not None:
            await self._poll(attempt)
            return
        lookup = await self._lookup(attempt)
        result = lookup.result
        if isinstance(result, Found):
            self._apply_observation(attempt, _found_observation(attempt, result), kind=ObservationKind.FOUND)
        elif isinstance(result, NotFound):
            proven = absence_proven(self._policy, attempt.started_at, result)
            if proven is not legacy_absence_proven(self._policy, attempt.started_at, workflow.now()):
                proven = proven if self._new_rules() else not proven
            self._observe_fact(
                attempt,
                Source.POLL,
                ObservationKind.NOT_FOUND,
                proven,
                "provider has no such message"
                + (" past the proof window: not accepted" if proven else "; within the proof window, looking again"),
            )
            if proven:
                attempt.submit_result = SubmitResult.NOT_ACCEPTED
                reason = f"lookup proved attempt {attempt.number} was not accepted"
                self._settle(reason, Source.POLL, attempt=attempt.number, earlier_rules=IntentState.RETRYABLE_FAILURE)
        else:
            self._observe_fact(attempt, Source.POLL, ObservationKind.UNAVAILABLE, False, result.reason)

    async def _close_at_horizon(self, reason: str) -> None:
        """The resolution horizon passed: look at every open attempt once more, and close as
        `unknown` only if that last look found nothing conclusive. A worker running late delays
        this verdict; it cannot manufacture it, since the look runs after the horizon."""
        looked_at = workflow.now()
        for attempt in self._open_attempts():
            if attempt.open:
                await self._look(attempt)
        if self._state in _OPEN_STATES:
            found = ", ".join(
                f"attempt {a.number} {a.provider_status.value if a.provider_status else 'not found conclusively'}"
                for a in self._open_attempts()
            )
            self._close(
                IntentState.UNKNOWN,
                f"{reason}; last lookup at {looked_at.isoformat()}: {found}",
                Source.CLOCK,
            )

    async def _follow_open_attempt(self) -> None:
        """After a cancel or expiry closed the intent, keep recording what its attempt does.

        Cancellation cannot recall an accepted message; the attempt is tracked to its own
        outcome (by reports, and by polls unless expiry closed polling) or to the horizon.
        """
        if not self._attempts:
            return
        attempt = self._attempts[-1]
        polls_allowed = self._closed_by != "clock:expiry"
        if self._state is IntentState.CANCELLED and attempt.provider_id is not None and not attempt.resolved:
            await self._ask_provider_to_cancel(attempt)
        due: datetime | None = None
        while not attempt.resolved and self._within_horizon(attempt):
            await self._continue_as_new_if_suggested()
            if attempt.submit_result is None:
                return  # never reached the provider
            if due is None:
                # An attempt still without a provider id is looked up on the lookup schedule, a known one polled.
                schedule = lookup_delay if attempt.provider_id is None else poll_delay
                due = workflow.now() + schedule(self._policy, attempt.lookups, workflow.random().random())
            timer_fired = await self._wait_until(due, attempt, closing_clocks=False)
            if timer_fired:
                due = None
                if polls_allowed and not attempt.resolved and self._within_horizon(attempt):
                    await self._poll(attempt)

    async def _ask_provider_to_cancel(self, attempt: _Attempt) -> None:
        """Ask once; most providers refuse for a message already accepted, and the refusal is recorded."""
        try:
            answer = await workflow.execute_activity_method(
                ProviderActivities.cancel,
                ProviderCancelInput(provider_id=attempt.provider_id),
                start_to_close_timeout=_READ_TIMEOUT,
                retry_policy=_READ_RETRY,
            )
            canceled, reason = answer.canceled, answer.reason
        except ActivityError as error:
            canceled, reason = False, f"cancel activity failed: {_cause(error)}"
        self._observe_fact(attempt, Source.OPERATOR, ObservationKind.PROVIDER_CANCEL, canceled, reason)

    async def _poll(self, attempt: _Attempt) -> None:
        lookup = await self._lookup(attempt)
        result = lookup.result
        if isinstance(result, Found):
            self._apply_observation(attempt, _found_observation(attempt, result), kind=ObservationKind.FOUND)
        elif isinstance(result, NotFound):
            self._observe_fact(attempt, Source.POLL, ObservationKind.NOT_FOUND, False, "provider has no such message")
        else:
            self._observe_fact(attempt, Source.POLL, ObservationKind.UNAVAILABLE, False, result.reason)

    async def _lookup(self, attempt: _Attempt) -> LookupOutcome:
        attempt.lookups += 1
        try:
            return await workflow.execute_activity_method(
                ProviderActivities.lookup,
                LookupInput(
                    attempt_ref=attempt.ref,
                    provider_id=attempt.provider_id,
                    to=self._intent.recipient,
                    content_sha256=self._intent.content_sha256,
                    since=attempt.started_at,
                ),
                start_to_close_timeout=_READ_TIMEOUT,
                retry_policy=_READ_RETRY,
            )
        except ActivityError as error:
            return LookupOutcome(result=Unavailable(reason=f"lookup activity failed: {_cause(error)}"))

    # ---- retryable_failure: the next attempt, on a durable timer ------------------------

    async def _wait_for_retry(self) -> None:
        attempt = self._attempts[-1]
        if not may_retry(self._policy, len(self._attempts)):
            self._transition(
                IntentState.PERMANENT_FAILURE,
                f"retry budget exhausted after {len(self._attempts)} attempts",
                Source.CLOCK,
                attempt=attempt.number,
                closes=True,
            )
            return
        delay = retry_delay(self._policy, len(self._attempts), attempt.retry_hint, workflow.random().random())
        attempt.retry_delay = delay
        due = workflow.now() + delay
        while self._state is IntentState.RETRYABLE_FAILURE:
            await self._continue_as_new_if_suggested()
            closing = self._closing_clock()
            if closing is not None:
                self._close(*closing)
                return
            if workflow.now() >= due:
                break
            # Reports for earlier attempts may wake this wait; they never shorten the backoff.
            await self._wait_until(due, None)
        if self._state is not IntentState.RETRYABLE_FAILURE:
            return  # late evidence showed the attempt was accepted after all: no new send
        self._transition(IntentState.PENDING, f"retry backoff of {delay.total_seconds():.1f}s elapsed", Source.CLOCK)

    # ---- clocks ------------------------------------------------------------------------

    async def _wait_until(
        self, until: datetime, attempt: _Attempt | None, *, closing_clocks: bool = True, lazy: bool = False
    ) -> bool:
        """Sleep until `until`, a report arrives, or (with closing_clocks) a cancel or closing
        clock is due: the earliest wins. Unless `lazy`, the ledger and the search attributes
        are brought up to date first, since the wait may be long.

        Returns True when `until` has passed (the caller's own clock fired).
        """
        if not lazy:
            await self._checkpoint()
        limit = until
        if closing_clocks:
            limit = min(limit, self._intent.expires_at)
        if attempt is not None:
            limit = min(limit, attempt.started_at + self._policy.resolution_horizon)
        if limit > workflow.now():
            clock = self._arm_clock(limit)
            await workflow.wait_condition(
                lambda: bool(self._reports) or (closing_clocks and self._cancel is not None) or clock.done()
            )
        self._drain_reports()
        return workflow.now() >= until

    def _arm_clock(self, fire_at: datetime) -> asyncio.Task[None]:
        """One durable timer per distinct deadline: a wait woken early by a report and resumed
        toward the same deadline keeps its timer (each timer started is a billed action)."""
        if self._clock is not None and self._clock_at == fire_at and not self._clock.done():
            return self._clock
        self._disarm_clock()
        self._clock_at = fire_at
        self._clock = asyncio.create_task(workflow.sleep(fire_at - workflow.now()))
        return self._clock

    def _disarm_clock(self) -> None:
        if self._clock is not None and not self._clock.done():
            self._clock.cancel()
        self._clock, self._clock_at = None, None

    def _within_horizon(self, attempt: _Attempt) -> bool:
        return workflow.now() < attempt.started_at + self._policy.resolution_horizon

    def _closing_clock(self, attempt: _Attempt | None = None) -> tuple[IntentState, str, Source] | None:
        """Which closing clock, if any, has closed: the earliest wins, and the reason names it."""
        # Cancellation is not a clock: the cancel update closes the intent the moment it is accepted.
        now = workflow.now()
        horizon = attempt.started_at + self._policy.resolution_horizon if attempt else None
        if horizon is not None and horizon <= now and horizon <= self._intent.expires_at:
            return IntentState.UNKNOWN, "resolution horizon passed without proof either way", Source.CLOCK
        if self._intent.expires_at <= now:
            return IntentState.EXPIRED, f"intent expired at {self._intent.expires_at.isoformat()}", Source.CLOCK
        return None

    def _close(self, state: IntentState, reason: str, source: Source) -> None:
        attempt = self._attempts[-1].number if self._attempts else None
        if state is IntentState.CANCELLED and self._attempts and not self._attempts[-1].resolved:
            reason += "; an attempt already went to the provider and is tracked to its own outcome"
        self._transition(state, reason, source, attempt=attempt, closes=True)

    # ---- observations and transitions -------------------------------------------------

    def _drain_reports(self) -> None:
        while self._reports:
            report = self._reports.popleft()
            number = attempt_number_of(report.attempt_ref)
            attempt = self._attempts[number - 1] if number and number <= len(self._attempts) else None
            if attempt is None or attempt.ref != report.attempt_ref:
                self._observe_report_ignored(report, "names an attempt this intent never made")
                continue
            fact = _fact(attempt, report.provider_id, report.status, report.error_code, Source.REPORT, report.received_at)
            self._apply_observation(attempt, fact, kind=ObservationKind.STATUS, inbox_id=report.inbox_id)

    def _apply_observation(
        self, attempt: _Attempt, observation: Observation, *, kind: ObservationKind, inbox_id: int | None = None
    ) -> None:
        retryable_code = is_retryable(observation.error_code)
        verdict = observe_across(self._state, [each.view() for each in self._attempts], observation, retryable_code)
        earlier = observe(self._state, attempt.view(), self._attempts[-1].number, observation, retryable_code)
        if earlier.intent_state is not verdict.intent_state and not self._new_rules():
            verdict = earlier
        if verdict.applied:
            attempt.provider_id = observation.provider_id
            attempt.provider_status = verdict.attempt_status
            if observation.error_code is not None:
                attempt.error_code = observation.error_code
            if observation.status.is_final:
                attempt.failure_retryable = retryable_code and observation.status is not ProviderStatus.DELIVERED
        self._record_observation(
            attempt.number,
            observation.source,
            kind,
            verdict.applied,
            verdict.reason,
            provider_id=observation.provider_id,
            provider_status=observation.status.value,
            error_code=observation.error_code,
            inbox_id=inbox_id,
            observed_at=observation.observed_at,
        )
        if verdict.applied:
            self._record_if_presumed_absent(attempt, observation)
        if verdict.applied and verdict.intent_state is not self._state:
            self._transition(
                verdict.intent_state,
                verdict.reason,
                observation.source,
                attempt=attempt.number,
                closes=verdict.intent_state.is_terminal,
            )

    def _record_if_presumed_absent(self, attempt: _Attempt, observation: Observation) -> None:
        """The provider had an attempt Herald had concluded it never took: record the contradiction
        once per attempt, so the ledger's report counts the duplicate this may have caused."""
        cause = attempt.submit_result.presumption if attempt.submit_result is not None else None
        if cause is None or attempt.seen_after_presumed_absent or not self._new_rules():
            return  # (runs under the earlier rules numbered their observations without this row)
        attempt.seen_after_presumed_absent = True
        later = [each.number for each in self._attempts[attempt.number :] if each.submit_result not in (None, SubmitResult.NOT_SENT)]
        self._record_observation(
            attempt.number,
            observation.source,
            ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN,
            True,
            f"attempt {attempt.number} was presumed not accepted ({cause}) and is {observation.status.value} "
            f"({observation.source.value}); "
            + (f"later attempt(s) {later} went to the provider too" if later else "no later attempt went out"),
            provider_id=observation.provider_id,
            provider_status=observation.status.value,
            observed_at=observation.observed_at,
        )

    def _observe_fact(
        self,
        attempt: _Attempt,
        source: Source,
        kind: ObservationKind,
        applied: bool,
        reason: str,
        error_code: int | None = None,
    ) -> None:
        self._record_observation(
            attempt.number, source, kind, applied, reason, error_code=error_code, provider_id=attempt.provider_id
        )

    def _observe_report_ignored(self, report: DeliveryReport, reason: str) -> None:
        self._record_observation(
            None,
            Source.REPORT,
            ObservationKind.STATUS,
            False,
            reason,
            provider_id=report.provider_id,
            provider_status=report.status.value,
            error_code=report.error_code,
            inbox_id=report.inbox_id,
            observed_at=report.received_at,
        )

    def _record_observation(
        self,
        attempt_number: int | None,
        source: Source,
        kind: ObservationKind,
        applied: bool,
        reason: str,
        *,
        provider_id: str | None = None,
        provider_status: str | None = None,
        error_code: int | None = None,
        inbox_id: int | None = None,
        observed_at: datetime | None = None,
    ) -> None:
        self._batch_observations.append(
            ObservationRow(
                workflow_id=self._workflow_id,
                seq=self._next_observation_seq,
                attempt_number=attempt_number,
                source=source,
                kind=kind,
                provider_id=provider_id,
                provider_status=provider_status,
                error_code=error_code,
                applied=applied,
                reason=reason,
                inbox_id=inbox_id,
                observed_at=observed_at or workflow.now(),
            )
        )
        self._next_observation_seq += 1
        self._observations_recorded += 1
        if inbox_id is not None:
            self._batch_outcomes.append(
                ReceiptOutcomeRow(
                    inbox_id=inbox_id,
                    outcome="applied" if applied else "ignored",
                    reason=reason,
                    workflow_id=self._workflow_id,
                )
            )

    def _transition(
        self, target: IntentState, reason: str, source: Source, *, attempt: int | None = None, closes: bool = False
    ) -> None:
        check_transition(self._state, target)
        now = workflow.now()
        self._batch_transitions.append(
            TransitionRow(
                workflow_id=self._workflow_id,
                seq=self._next_transition_seq,
                at=now,
                from_state=self._state,
                to_state=target,
                reason=reason,
                source=source,
                attempt_number=attempt,
            )
        )
        self._next_transition_seq += 1
        self._transitions.append(
            TransitionStatus(at=now, from_state=self._state, to_state=target, reason=reason, source=source)
        )
        self._state = target
        if closes:
            self._closed_by = f"{source.value}:{_closing_rule(target)}"

    # ---- checkpoints: the ledger and the Web UI catch up ---------------------------------
    #
    # Rows are buffered and written at checkpoints: with each submit (the activity writes them
    # before it calls the provider), before every wait that may be long, before continue-as-new
    # and at the close. Transitions carry the workflow time of the decision, not of the write.

    def _take_batch(self) -> LedgerBatch:
        record = None
        if not self._intent_recorded:
            record = RecordIntentInput(intent=self._intent, run_id=workflow.info().first_execution_run_id)
        batch = LedgerBatch(
            record=record,
            attempts=self._batch_attempts,
            transitions=self._batch_transitions,
            observations=self._batch_observations,
            receipt_outcomes=self._batch_outcomes,
        )
        self._batch_attempts, self._batch_transitions, self._batch_observations, self._batch_outcomes = [], [], [], []
        return batch

    def _requeue(self, batch: LedgerBatch) -> None:
        """Put back rows whose write is not known to have committed, ahead of newer ones."""
        self._batch_attempts = [*batch.attempts, *self._batch_attempts]
        self._batch_transitions = [*batch.transitions, *self._batch_transitions]
        self._batch_observations = [*batch.observations, *self._batch_observations]
        self._batch_outcomes = [*batch.receipt_outcomes, *self._batch_outcomes]

    async def _flush(self) -> None:
        batch = self._take_batch()
        if not (batch.attempts or batch.transitions or batch.observations or batch.receipt_outcomes):
            # Only the intent row is pending: it is written with the first real rows.
            return
        recorded = await workflow.execute_local_activity_method(
            LedgerActivities.append_ledger, batch, start_to_close_timeout=_LEDGER_TIMEOUT, retry_policy=_LEDGER_RETRY
        )
        if batch.record is None:
            return
        self._intent_recorded = True
        if recorded is not None and recorded.first_run_id != batch.record.run_id:
            self._suppress(recorded)
            await self._flush()

    async def _checkpoint(self) -> None:
        """Write the buffered rows, then tell the Web UI the state if it changed (one upsert)."""
        await self._flush()
        published = (self._state, len(self._attempts))
        if published != self._published:
            workflow.upsert_search_attributes(
                [STATE_KEY.value_set(self._state.value), ATTEMPTS_KEY.value_set(len(self._attempts))]
            )
            self._published = published

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
        self._record_observation(
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
        if self._state.is_terminal:
            return CancelAnswer(
                cancelled=False, state=self._state, message=f"intent is already {self._state.value}; nothing to cancel"
            )
        if self._cancel is not None:
            return CancelAnswer(cancelled=True, state=self._state, message="cancellation already requested")
        self._cancel = request
        # Close now, so the answer and the state agree even while a submit is in flight; the
        # attempt the provider may already have is then tracked to its own outcome, not recalled.
        in_flight = bool(self._attempts) and not self._attempts[-1].resolved
        self._close(IntentState.CANCELLED, f"cancelled by {request.operator}: {request.reason}", Source.OPERATOR)
        message = (
            "cancelled; an attempt already went to the provider: it cannot be recalled and is tracked to its outcome"
            if in_flight
            else "cancelled before any message reached the provider"
        )
        return CancelAnswer(cancelled=True, state=self._state, message=message)

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> IntentStatus:
        return IntentStatus(
            workflow_id=self._workflow_id,
            business_key=self._intent.business_key,
            channel=self._intent.channel.value,
            template_id=self._intent.template_id,
            template_version=self._intent.template_version,
            content_sha256=self._intent.content_sha256,
            state=self._state,
            closed_by=self._closed_by,
            attempts=[attempt.status() for attempt in self._attempts],
            transitions=list(self._transitions),
            observations_recorded=self._observations_recorded,
        )


def _fact(
    attempt: _Attempt,
    provider_id: str,
    status: ProviderStatus,
    error_code: int | None,
    source: Source,
    observed_at: datetime,
) -> Observation:
    """One provider fact about `attempt`, whichever path (submit answer, poll, report) brought it."""
    return Observation(
        attempt_number=attempt.number,
        provider_id=provider_id,
        status=status,
        error_code=error_code,
        source=source,
        observed_at=observed_at,
    )


def _found_observation(attempt: _Attempt, found: Found) -> Observation:
    return _fact(attempt, found.provider_id, found.status, found.error_code, Source.POLL, workflow.now())


def _closing_rule(state: IntentState) -> str:
    return {
        IntentState.EXPIRED: "expiry",
        IntentState.CANCELLED: "cancel",
        IntentState.UNKNOWN: "resolution_horizon",
        IntentState.SUPPRESSED: "ledger",
    }.get(state, state.value)


def _cause(error: ActivityError) -> str:
    cause = error.cause
    return type(cause).__name__ if cause is not None else "ActivityError"
