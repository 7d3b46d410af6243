"""The intent's record: its state, attempts, transitions and unwritten ledger rows.

The primitives the machine (``herald.core.machine.machine``) changes state with, judged by the pure
functions of ``herald.core.lifecycle`` and ``herald.core.evidence``: an observation (submit answer, poll,
lookup, report), a submit's refusal, a proof of absence, a clock or an operator closing the intent.
Nothing here waits, calls anything or reads a clock of its own: the machine passes the time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from herald.core.closing_clocks import closing_rule
from herald.core.contracts import (
    CancelAnswer,
    CancelRequest,
    CarriedState,
    DeliveryReport,
    IntentStatus,
    TransitionStatus,
    attempt_number_of,
    attempt_ref,
)
from herald.core.evidence import next_state, observe_across
from herald.core.intent import Intent, destination_fingerprint
from herald.core.lifecycle import IntentState, Observation, ObservationKind, Source, SubmitResult, check_transition
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.clock import Clock
from herald.core.machine.ledger_buffer import LedgerBuffer
from herald.core.machine.presumptions import Sighting, Standing, seen_after_presumed_absent
from herald.core.outcomes import Accepted, ProviderStatus, Retryable, SubmitOutcome, Unknown, Unreachable
from herald.core.rows import IntentRecorded, LedgerBatch
from herald.core.send_policy import Decision, DispatchOrder, PolicyDecision


class IntentRecord:
    def __init__(self, intent: Intent, clock: Clock, run_id: str) -> None:
        self.intent = intent
        self._clock = clock
        self.state = IntentState.PENDING
        self.closed_by: str | None = None
        self.attempts: list[AttemptRecord] = []
        self.transitions: list[TransitionStatus] = []
        self.ledger = LedgerBuffer(intent, run_id)

    # ---- continue-as-new and the status view -------------------------------------------

    def restore(self, carried: CarriedState) -> None:
        self.state = carried.state
        self.closed_by = carried.closed_by
        self.attempts = [AttemptRecord.from_status(status) for status in carried.attempts]
        self.transitions = list(carried.transitions)
        self.ledger.next_transition_seq = carried.next_transition_seq
        self.ledger.next_observation_seq = carried.next_observation_seq
        self.ledger.observations_recorded = carried.observations_recorded
        self.ledger.intent_recorded = carried.intent_recorded

    def carry(self, *, seen_inbox_ids: set[int], cancel: CancelRequest | None) -> CarriedState:
        return CarriedState(
            state=self.state,
            closed_by=self.closed_by,
            attempts=[attempt.status() for attempt in self.attempts],
            seen_inbox_ids=sorted(seen_inbox_ids),
            cancel=cancel,
            transitions=self.transitions,
            next_transition_seq=self.ledger.next_transition_seq,
            next_observation_seq=self.ledger.next_observation_seq,
            observations_recorded=self.ledger.observations_recorded,
            intent_recorded=self.ledger.intent_recorded,
        )

    def status(self) -> IntentStatus:
        return IntentStatus(
            workflow_id=self.intent.workflow_id,
            business_key=self.intent.business_key,
            channel=self.intent.message.channel.value,
            template_id=self.intent.template_id,
            template_version=self.intent.template_version,
            content_sha256=self.intent.content_sha256,
            state=self.state,
            closed_by=self.closed_by,
            tenant=self.intent.tenant,
            attempts=[attempt.status() for attempt in self.attempts],
            transitions=list(self.transitions),
            observations_recorded=self.ledger.observations_recorded,
            destination_fingerprint=destination_fingerprint(self.intent),
        )

    # ---- attempts ----------------------------------------------------------------------

    def prepare_attempt(self, order: DispatchOrder) -> AttemptRecord:
        """A new attempt, its row and the move into submitting (the submit activity writes them first)."""
        number = len(self.attempts) + 1
        attempt = AttemptRecord(number, attempt_ref(self.intent.workflow_id, number), self._clock.now())
        attempt.priority, attempt.fairness_weight = order.priority_key, order.fairness_weight
        self.attempts.append(attempt)
        self.ledger.add_attempt(number, attempt.ref, attempt.started_at, order.priority_key, order.fairness_weight)
        reason = f"attempt {number} prepared: {order.reason}"
        self.transition(IntentState.SUBMITTING, reason, Source.SUBMIT, attempt=number)
        return attempt

    def withdraw_attempt(self, attempt: AttemptRecord, rows: LedgerBatch) -> bool:
        """The send policy held a prepared attempt before anything was written or sent: undo its
        preparation (the intent is pending again, the number is free). False, and nothing undone,
        when something moved the intent meanwhile (a late report), so the seq cannot be given back."""
        prepared = rows.transitions[-1] if rows.transitions else None
        if (
            self.attempts[-1] is not attempt
            or self.state is not IntentState.SUBMITTING
            or prepared is None
            or prepared.to_state is not IntentState.SUBMITTING
            or self.ledger.next_transition_seq != prepared.seq + 1
        ):
            return False
        self.attempts.pop()
        self.transitions.pop()
        self.state = prepared.from_state
        self.ledger.withdraw(rows, attempt.ref, prepared.seq)
        return True

    def held_by_policy(self, attempt: AttemptRecord, rows: LedgerBatch, decision: PolicyDecision) -> datetime | None:
        """Record what the send policy decided for a prepared attempt it held (nothing of it was
        written or sent). Returns when to evaluate again after a deferral; None when there is
        nothing to wait for (suppressed, or a late report moved the intent meanwhile)."""
        if not self.withdraw_attempt(attempt, rows):
            # A late report moved the intent while the submit ran: keep the attempt, never sent.
            self.ledger.requeue(rows)
            attempt.submit_result = SubmitResult.NOT_SENT
            self.observe_fact(attempt, Source.POLICY, ObservationKind.DEFERRED, True, decision.reason)
            self.settle(decision.reason, Source.POLICY, attempt=attempt.number)
            return None
        if decision.decision is Decision.SUPPRESS:
            self.note(Source.POLICY, ObservationKind.POLICY_SUPPRESSED, True, decision.reason)
            self.transition(IntentState.SUPPRESSED, f"{decision.rule}: {decision.reason}", Source.POLICY, closes=True)
            self.closed_by = f"policy:{decision.rule}"
            return None
        self.note(
            Source.POLICY,
            ObservationKind.DEFERRED,
            True,
            f"{decision.rule} (policy v{decision.version}): {decision.reason}",
        )
        return decision.not_before or self._clock.now() + timedelta(minutes=1)

    def message_id_to_reuse(self) -> str | None:
        """E-mail: the Message-ID a new attempt must carry. After the evidence-window rule presumed
        the previous attempt absent, the new copy carries that attempt's Message-ID (and it carried
        its predecessor's), so if both copies arrive the recipient's client shows one message."""
        earlier = self.attempts[:-1]
        if not earlier or earlier[-1].submit_result is not SubmitResult.NO_EVIDENCE:
            return None
        return earlier[-1].message_id_of or earlier[-1].ref

    def open_attempts(self) -> list[AttemptRecord]:
        """The attempts to look up or poll: the latest, and any earlier one still open."""
        latest = self.attempts[-1]
        earlier = [attempt for attempt in self.attempts[:-1] if attempt.open]
        if earlier:
            return [*earlier, latest] if latest.open else earlier
        return [latest]

    # ---- state -------------------------------------------------------------------------

    def transition(
        self, target: IntentState, reason: str, source: Source, *, attempt: int | None = None, closes: bool = False
    ) -> None:
        check_transition(self.state, target)
        now = self._clock.now()
        self.ledger.add_transition(now, self.state, target, reason, source, attempt)
        self.transitions.append(
            TransitionStatus(at=now, from_state=self.state, to_state=target, reason=reason, source=source)
        )
        self.state = target
        if closes:
            self.closed_by = f"{source.value}:{closing_rule(target)}"

    def close(self, state: IntentState, reason: str, source: Source) -> None:
        attempt = self.attempts[-1].number if self.attempts else None
        if state is IntentState.CANCELLED and self.attempts and not self.attempts[-1].resolved:
            reason += "; an attempt already went to the provider and is tracked to its own outcome"
        self.transition(state, reason, source, attempt=attempt, closes=True)

    def cancel_refused(self) -> CancelAnswer:
        """The answer to a cancel that changes nothing: the intent is closed, or already cancelling."""
        if self.state.is_terminal:
            return CancelAnswer(
                cancelled=False, state=self.state, message=f"intent is already {self.state.value}; nothing to cancel"
            )
        return CancelAnswer(cancelled=True, state=self.state, message="cancellation already requested")

    def cancel(self, request: CancelRequest) -> CancelAnswer:
        """Close now, so the answer and the state agree even while a submit is in flight; the
        attempt the provider may already have is then tracked to its own outcome, not recalled."""
        in_flight = bool(self.attempts) and not self.attempts[-1].resolved
        self.close(IntentState.CANCELLED, f"cancelled by {request.operator}: {request.reason}", Source.OPERATOR)
        message = (
            "cancelled; an attempt already went to the provider: it cannot be recalled and is tracked to its outcome"
            if in_flight
            else "cancelled before any message reached the provider"
        )
        return CancelAnswer(cancelled=True, state=self.state, message=message)

    def settle(self, reason: str, source: Source, *, attempt: int | None = None) -> None:
        """Move an open intent to where the evidence of all its attempts puts it, if that moved."""
        target = next_state(self.state, [each.view() for each in self.attempts])
        if target is not self.state:
            self.transition(target, reason, source, attempt=attempt, closes=target.is_terminal)

    def suppress(self, recorded: IntentRecorded) -> None:
        """The ledger holds this key from an earlier workflow run that Temporal no longer knows
        (retention): nothing of this run was written or sent, so it closes as suppressed."""
        self.attempts = []
        self.transitions = []
        self.ledger.continue_after(recorded)
        self.state = IntentState.PENDING
        self.closed_by = None
        reason = (
            f"already recorded by run {recorded.first_run_id} (last state {recorded.last_state.value if recorded.last_state else 'none'})"
            if recorded.same_payload
            else "key reused with a different payload"
        )
        self.transition(IntentState.SUPPRESSED, reason, Source.LEDGER, closes=True)

    # ---- what the provider said -----------------------------------------------------------

    def apply_submit(self, attempt: AttemptRecord, outcome: SubmitOutcome) -> None:
        result = outcome.result
        attempt.submit_result = SubmitResult(result.kind)
        if isinstance(result, Accepted):
            fact = attempt.fact(
                result.provider_id,
                result.status,
                result.error_code,
                Source.SUBMIT,
                self._clock.now(),
                result.failure_retryable,
            )
            self.apply_observation(attempt, fact, kind=ObservationKind.ACCEPTED)
            return
        if isinstance(result, Unknown):
            self.observe_fact(
                attempt, Source.SUBMIT, ObservationKind.UNKNOWN, True, f"outcome unknown, will look up: {result.reason}"
            )
            return
        attempt.error_code = result.error_code
        attempt.submit_reason = result.reason
        self.observe_fact(
            attempt, Source.SUBMIT, ObservationKind(result.kind), True, result.reason, error_code=result.error_code
        )
        if isinstance(result, (Retryable, Unreachable)):
            attempt.retry_hint = timedelta(seconds=result.delay_seconds) if result.delay_seconds is not None else None
        self.settle(result.reason, Source.SUBMIT, attempt=attempt.number)

    def observe_report(self, report: DeliveryReport) -> None:
        number = attempt_number_of(report.attempt_ref)
        attempt = self.attempts[number - 1] if number and number <= len(self.attempts) else None
        if attempt is None or attempt.ref != report.attempt_ref:
            self.ledger.add_observation(
                None,
                Source.REPORT,
                ObservationKind.STATUS,
                False,
                "names an attempt this intent never made",
                report.received_at,
                provider_id=report.provider_id,
                provider_status=report.status.value,
                error_code=report.error_code,
                inbox_id=report.inbox_id,
            )
            return
        fact = attempt.fact(
            report.provider_id,
            report.status,
            report.error_code,
            Source.REPORT,
            report.received_at,
            report.failure_retryable,
        )
        self.apply_observation(attempt, fact, kind=ObservationKind.STATUS, inbox_id=report.inbox_id)

    def apply_observation(
        self, attempt: AttemptRecord, observation: Observation, *, kind: ObservationKind, inbox_id: int | None = None
    ) -> None:
        retryable_code = observation.failure_retryable
        verdict = observe_across(self.state, [each.view() for each in self.attempts], observation, retryable_code)
        if verdict.applied:
            attempt.provider_id = observation.provider_id
            attempt.provider_status = verdict.attempt_status
            if observation.error_code is not None:
                attempt.error_code = observation.error_code
            if observation.status.is_final:
                attempt.failure_retryable = retryable_code and observation.status is not ProviderStatus.DELIVERED
        self.ledger.add_observation(
            attempt.number,
            observation.source,
            kind,
            verdict.applied,
            verdict.reason,
            observation.observed_at,
            provider_id=observation.provider_id,
            provider_status=observation.status.value,
            error_code=observation.error_code,
            inbox_id=inbox_id,
        )
        # Whatever the evidence rules said of it, the fact shows the provider has the attempt.
        self._record_if_presumed_absent(attempt, observation)
        if verdict.applied and verdict.intent_state is not self.state:
            self.transition(
                verdict.intent_state,
                verdict.reason,
                observation.source,
                attempt=attempt.number,
                closes=verdict.intent_state.is_terminal,
            )

    def observe_fact(
        self,
        attempt: AttemptRecord,
        source: Source,
        kind: ObservationKind,
        applied: bool,
        reason: str,
        error_code: int | None = None,
    ) -> None:
        """A fact about an attempt that carries no provider status (an answer, a refusal, a not-found)."""
        self.ledger.add_observation(
            attempt.number,
            source,
            kind,
            applied,
            reason,
            self._clock.now(),
            error_code=error_code,
            provider_id=attempt.provider_id,
        )

    def note(
        self, source: Source, kind: ObservationKind, applied: bool, reason: str, observed_at: datetime | None = None
    ) -> None:
        """A fact about the intent rather than one attempt (a policy decision, a refused key reuse)."""
        self.ledger.add_observation(None, source, kind, applied, reason, observed_at or self._clock.now())

    def _record_if_presumed_absent(self, attempt: AttemptRecord, observation: Observation) -> None:
        """The provider had an attempt Herald had concluded it never took: the contradiction is
        recorded once per attempt (``herald.core.machine.presumptions``, the rule a report after the
        close is judged by too), so the ledger's report counts the duplicate this may have caused."""
        later = tuple(
            each.number for each in self.attempts[attempt.number :] if each.submit_result not in (None, SubmitResult.NOT_SENT)
        )
        presumption = attempt.submit_result.presumption if attempt.submit_result is not None else None
        standing = Standing(
            attempt_number=attempt.number,
            presumption=presumption,
            seen=attempt.seen_after_presumed_absent,
            later_sent=later,
        )
        sighting = Sighting(
            provider_id=observation.provider_id,
            status=observation.status,
            source=observation.source,
            observed_at=observation.observed_at,
        )
        finding = seen_after_presumed_absent(standing, sighting, closed=False)
        if finding is not None:
            attempt.seen_after_presumed_absent = True
            self.ledger.add_finding(finding)
