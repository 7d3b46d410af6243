"""IntentRules: what each answer changes in an intent's record, and what its clocks and its
provider's capabilities decide next. The course (``herald.core.machine.course``) asks; nothing else does.

The central rule: a submit whose outcome is unknown is resolved by looking the same attempt up,
never by a second submit. Only an observation that proves the attempt was not accepted (a definite
retryable answer, or a lookup that still finds nothing once the provider can no longer hold the
message unlisted) opens another attempt, and only while no attempt of the intent is accepted or
unresolved. No intent is called ``unknown`` before a last lookup at the resolution horizon has
found nothing conclusive.

How an open attempt is resolved is chosen by what its provider can do (``Capabilities``):

    provider id known ─┬─ status lookup ........ poll by id on the poll schedule, reports meanwhile
                       └─ none (SMTP) .......... wait for events; nothing to ask until the horizon
    outcome unknown ───┬─ lookup by reference .. look up (the lookup schedule where the provider
                       │   (Twilio, an ESP's     bounds its queue, the poll schedule for an ESP's
                       │   activity feed)        rate-limited feed); "not found" proves absence
                       │                         only past the proof window or the feed's lag
                       └─ none (SMTP) .......... wait for an event carrying our reference; once the
                                                 evidence window has passed, read the ESP's event
                                                 stream from the ledger: its silence counts as
                                                 "not accepted" only while the stream is flowing
                                                 past the attempt (``herald.core.silence``); otherwise
                                                 look again on the poll schedule, to the horizon

Where the provider refuses a repeated message id within a grace period (``resubmit_dedupe_seconds``),
an unknown submit is first sent again under the same id, within the grace (``Resubmits``); after
that, or when it cannot be, it is looked up as above, its proof window counted from its latest call.

Every method either answers a question (what closes the intent now, when to look next, how) or
takes one answer and changes the record.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta
from enum import Enum

from herald.core.capabilities import Capabilities
from herald.core.channels import assumed_capabilities
from herald.core.closing_clocks import Closing, closing_clock
from herald.core.contracts import (
    AlreadyRecorded,
    Called,
    CancelAnswer,
    CancelRequest,
    CarriedState,
    DeliveryReport,
    DispatchQuery,
    Held,
    IntentStatus,
    KeyConflict,
    NotificationInput,
    NotSent,
    Refused,
    ReportBatch,
    SubmitStep,
)
from herald.core.delivery_policy import (
    absence_proven,
    budget_spent,
    lookup_delay,
    next_attempt_delay,
    not_sent_delay,
    outage_length,
    poll_delay,
)
from herald.core.evidence import may_dispatch
from herald.core.lifecycle import EXPIRED_IN_QUEUE_MARK, OPEN_STATES, IntentState, ObservationKind, Source, SubmitResult
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.clock import Clock
from herald.core.machine.record import IntentRecord
from herald.core.machine.resubmits import Resubmits
from herald.core.outcomes import Found, LookupOutcome, NotFound, Rejected, SubmitOutcome, Unknown
from herald.core.routes import IntentRoute, intent_route
from herald.core.rows import IntentRecorded, LedgerBatch
from herald.core.send_policy import DispatchOrder
from herald.core.silence import EventStream, EventStreamQuery, silence_verdict, stream_query

# How long the starting client's reading of the send policy stands for the first attempt.
FIRST_ORDER_FRESH = timedelta(seconds=30)
EXPIRED_IN_QUEUE = f"{EXPIRED_IN_QUEUE_MARK}: the submit was still queued at the intent's expiry; nothing was sent"


class Way(Enum):
    """How an open attempt is asked about now, by what its provider can do."""

    POLL = "poll"  # by its provider id
    LOOKUP = "lookup"  # by our reference: "not found" proves absence once past the proof window
    STREAM = "stream"  # no one to ask: read the ESP's event stream from the ledger
    NOTHING = "nothing"  # nothing to ask yet (reports only, or the evidence window is open)
    RESUBMIT = "resubmit"  # send it again under its own id: its provider's dedupe makes that safe


class IntentRules:
    """One intent's record, and the rules that change it."""

    def __init__(self, input: NotificationInput, clock: Clock, run_id: str) -> None:
        self.intent = input.intent
        self.policy = input.policy
        self._clock = clock
        self._record = IntentRecord(input.intent, clock, run_id)
        self._reports: deque[DeliveryReport] = deque()
        self._seen_inbox_ids: set[int] = set()
        self.cancel_request: CancelRequest | None = None
        # The rows handed to the submit in flight: written by it, or put back when that is unknown.
        self._in_flight: LedgerBatch | None = None
        self._not_sent_waits = 0
        self._first_order = (input.first_order, input.first_order_at) if input.carried is None else None
        self.resubmits = Resubmits(self._record, clock, self.capabilities)
        if input.carried is not None:
            self._record.restore(input.carried)
            self._seen_inbox_ids = set(input.carried.seen_inbox_ids)
            self.cancel_request = input.carried.cancel

    # ---- what the machine knows --------------------------------------------------------

    @property
    def state(self) -> IntentState:
        return self._record.state

    @property
    def attempts(self) -> list[AttemptRecord]:
        return self._record.attempts

    @property
    def closed_by(self) -> str | None:
        return self._record.closed_by

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def has_reports(self) -> bool:
        return bool(self._reports)

    def status(self) -> IntentStatus:
        return self._record.status()

    def carry(self) -> CarriedState:
        """Everything the next run needs when this one continues as new."""
        return self._record.carry(seen_inbox_ids=self._seen_inbox_ids, cancel=self.cancel_request)

    def open_attempts(self) -> list[AttemptRecord]:
        return self._record.open_attempts()

    # ---- clocks ------------------------------------------------------------------------

    def deadline(self) -> datetime:
        """The intent's expiry, or earlier while the provider is unreachable and the category's policy
        gives up on an outage sooner (``unreachable_give_up_seconds``, counted from creation)."""
        attempt = self.attempts[-1] if self.attempts else None
        if attempt is None or attempt.give_up_after is None or outage_length([attempt.submit_result]) == 0:
            return self.intent.expires_at
        return min(self.intent.expires_at, self.intent.created_at + attempt.give_up_after)

    def horizon(self, attempt: AttemptRecord) -> datetime:
        return attempt.started_at + self.policy.resolution_horizon

    def within_horizon(self, attempt: AttemptRecord) -> bool:
        return self._clock.now() < self.horizon(attempt)

    def closing(self, attempt: AttemptRecord | None = None) -> Closing | None:
        """The clock that has closed the intent now (expiry, or `attempt`'s horizon), if any."""
        return closing_clock(self._clock.now(), self.deadline(), self.horizon(attempt) if attempt else None)

    def close_if(self, closing: Closing | None) -> bool:
        """Close the intent when a closing clock has closed; whether it did."""
        if closing is None:
            return False
        reason = closing.reason
        outage = self._outage() if closing.state is IntentState.EXPIRED else None
        if outage is not None:
            # Never "permanent_failure" for an outage: the deadline passed while nothing could be sent.
            deadline = self.deadline()
            if deadline < self.intent.expires_at:
                give_up = self.attempts[-1].give_up_after or timedelta(0)
                reason = (
                    f"gave up at {deadline.isoformat()}: the send policy gives up on an unreachable provider "
                    f"{give_up.total_seconds():g}s after the intent was created"
                )
            reason = f"{reason}; {outage}"
        self._record.close(closing.state, reason, closing.source)
        return True

    def _outage(self) -> str | None:
        """While the latest attempts found the provider unreachable: since when, how often, why."""
        count = outage_length([each.submit_result for each in self.attempts])
        if not count:
            return None
        first, last = self.attempts[-count], self.attempts[-1]
        names = list(dict.fromkeys(each.provider or "unnamed" for each in self.attempts[-count:]))
        return (
            f"provider unreachable since {first.started_at.isoformat()} "
            f"({count} attempt{'s' if count > 1 else ''} at {', '.join(names)}, nothing sent; "
            f"last: {last.submit_reason or 'no answer'})"
        )

    # ---- events from outside: reports, a refused key reuse, a cancel ---------------------

    def receive_reports(self, batch: ReportBatch) -> None:
        """Stored reports of one attempt, queued until the run applies them; the inbox id makes a
        re-signalled report a no-op."""
        for report in batch.reports:
            if report.inbox_id in self._seen_inbox_ids:
                continue
            self._seen_inbox_ids.add(report.inbox_id)
            self._reports.append(report)

    def apply_reports(self) -> None:
        while self._reports:
            self._record.observe_report(self._reports.popleft())

    def on_key_conflict(self, conflict: KeyConflict) -> None:
        """Record a refused reuse of this key with another payload; nothing about the intent changes."""
        reason = f"key reused with another payload (fingerprint {conflict.intent_fingerprint[:16]}...); refused"
        self._record.note(Source.CLIENT, ObservationKind.KEY_CONFLICT, False, reason, conflict.observed_at)

    def on_cancel(self, request: CancelRequest) -> CancelAnswer:
        """Close future work; an attempt the provider already has is tracked, not recalled."""
        if self.state.is_terminal or self.cancel_request is not None:
            return self._record.cancel_refused()
        self.cancel_request = request
        return self._record.cancel(request)

    # ---- pending -> submitting ---------------------------------------------------------

    def dispatch_query(self) -> DispatchQuery:
        """What the send policy is asked for the next attempt's place in its route's queue."""
        intent = self.intent
        return DispatchQuery(category=intent.message.category, tenant=intent.tenant, requested=intent.priority, at=self._clock.now())

    def known_order(self) -> DispatchOrder | None:
        """The order the starting client read for the first attempt, while it is fresh (read within
        FIRST_ORDER_FRESH of now, so only a version published inside that moment could differ); None:
        ask the send policy (a later attempt, a deferred first one, a client without the ledger)."""
        if self.attempts or self._first_order is None:
            return None
        order, read_at = self._first_order
        if order is None or read_at is None or abs(self._clock.now() - read_at) > FIRST_ORDER_FRESH:
            return None
        return order

    def begin_attempt(self, order: DispatchOrder) -> AttemptRecord | None:
        """A new attempt in submitting, dispatched as `order` says; None when the intent is no longer
        pending (a cancel came while the order was asked for) or a closing clock closed it instead."""
        if self.state is not IntentState.PENDING or self.close_if(self.closing()):
            return None
        if not may_dispatch([attempt.view() for attempt in self.attempts]):
            # Unreachable while every path settles first; if it were reached, settling beats sending.
            self._record.settle("an earlier attempt is accepted or unresolved: no new attempt", Source.CLOCK)
            return None
        attempt = self._record.prepare_attempt(order)
        attempt.message_id_of = self._record.message_id_to_reuse()
        attempt.validity = self._validity(order)
        self._not_sent_waits = 0
        return attempt

    def _validity(self, order: DispatchOrder) -> timedelta:
        """How long the provider may hold the attempt in its queue: the category's validity (else the
        delivery policy's), never past the intent's expiry, in whole seconds from 1."""
        wanted = timedelta(seconds=order.validity_seconds) if order.validity_seconds else self.policy.provider_queue_validity
        left = self.intent.expires_at - self._clock.now()
        return timedelta(seconds=max(1, min(int(wanted.total_seconds()), int(left.total_seconds()))))

    def route_for(self, attempt: AttemptRecord) -> IntentRoute:
        """What the route rule needs to know about the intent for `attempt`: from the attempts before it."""
        return intent_route([each.past() for each in self.attempts if each.number < attempt.number])

    def rows_for_submit(self) -> LedgerBatch:
        """The rows the submit activity commits (the attempt row among them) before it calls the
        provider; if it cannot, it does not call, and these rows go with the next try."""
        rows = self._record.ledger.take()
        if self._in_flight is not None:
            rows = self._in_flight.merged_with(rows)
        self._in_flight = rows
        return rows

    def submit_did_not_finish(self, attempt: AttemptRecord, failure: str) -> None:
        """The worker died or the activity timed out: the rows may or may not be committed (they are
        written again, idempotently, at the next checkpoint) and the request may have reached the
        provider: the outcome is unknown (it is looked up, never resent)."""
        self._put_back_in_flight()
        self._called(attempt, SubmitOutcome(result=Unknown(reason=f"submit activity did not finish: {failure}")))

    def expired_in_queue(self) -> NotSent:
        """The submit was still in the route's queue at the intent's expiry and was never started
        (Temporal refuses a timed-out task to every worker): nothing was written or sent."""
        return NotSent(reason=EXPIRED_IN_QUEUE)

    def not_sent(self) -> datetime:
        """Nothing reached the provider (the ledger could not take the rows): when to try the same
        attempt again, with whatever was learned meanwhile."""
        self._not_sent_waits += 1
        return self._clock.now() + not_sent_delay(self.policy, self._not_sent_waits)

    def waits_to_resubmit(self, due: datetime) -> bool:
        return self._clock.now() < due and self.state is IntentState.SUBMITTING and self.closing() is None

    def abandon_not_sent(self, attempt: AttemptRecord, step: NotSent) -> bool:
        """After the wait: False to submit the same attempt again; True when a cancel, a closing
        clock or late evidence came first (the attempt is recorded as never sent)."""
        closing = self.closing() if self.state is IntentState.SUBMITTING else None
        if self.state is IntentState.SUBMITTING and closing is None:
            return False
        self._put_back_in_flight()
        attempt.submit_result = SubmitResult.NOT_SENT
        self._record.observe_fact(attempt, Source.SUBMIT, ObservationKind.NOT_SENT, True, step.reason)
        if closing is not None and closing.state is IntentState.EXPIRED and step.reason == EXPIRED_IN_QUEUE:
            closing = closing.model_copy(update={"reason": f"{closing.reason}; {EXPIRED_IN_QUEUE}"})
        self.close_if(closing)
        return True

    def on_submit(self, attempt: AttemptRecord, step: Called | Refused | Held | AlreadyRecorded) -> datetime | None:
        """The submit's answer. Returns when to ask the send policy again after it deferred the
        attempt; None when there is nothing to wait for."""
        rows, self._in_flight = self._in_flight, None
        if isinstance(step, Held):
            assert rows is not None  # a hold is an answer: the activity ran, nothing was written
            return self._record.held_by_policy(attempt, rows, step.decision)
        if rows is not None and rows.record is not None:
            self._record.ledger.intent_recorded = True
        if isinstance(step, AlreadyRecorded):
            self._record.suppress(step.recorded)
        elif isinstance(step, Refused):
            # Refused before any call: a definite refusal of this attempt, the rule named (permanent).
            attempt.provider = step.provider
            self._called(attempt, SubmitOutcome(result=Rejected(reason=step.reason)))
        else:
            attempt.provider, attempt.capabilities = step.provider, step.capabilities
            attempt.next_provider = step.next_provider
            if step.give_up_after_seconds is not None:
                attempt.give_up_after = timedelta(seconds=step.give_up_after_seconds)
            self._called(attempt, step.outcome)
            if isinstance(step.outcome.result, Unknown):
                self.resubmits.plan(attempt)
        return None

    def on_resubmit(self, attempt: AttemptRecord, number: int, step: SubmitStep | None, failure: str = "") -> str:
        """A resubmission's answer (None: it did not finish); said back in a few words."""
        rows, self._in_flight = self._in_flight, None
        if rows is not None and not isinstance(step, Called):
            self._record.ledger.requeue(rows)  # not known to be written: written again, idempotently
        accepted = self.resubmits.answered(attempt, number, step, failure)
        if accepted is None:
            return f"resubmission {number}: still unknown"
        self._called(attempt, accepted)
        return f"accepted on resubmission {number}"

    def _called(self, attempt: AttemptRecord, outcome: SubmitOutcome) -> None:
        """What came of the attempt's submit, applied with every report that waited for it."""
        self._record.apply_submit(attempt, outcome)
        self.apply_reports()
        if self.state is IntentState.ACCEPTED and self.nothing_more_to_learn(attempt):
            self._record.transition(
                IntentState.RELAYED,
                f"handed to the relay ({attempt.provider}), which reports nothing back: nothing more can be known",
                Source.SUBMIT,
                attempt=attempt.number,
                closes=True,
            )

    def deferred(self, not_before: datetime) -> bool:
        """Still held by the send policy: pending, before the time it named."""
        return self._clock.now() < not_before and self.state is IntentState.PENDING

    def deferral_woken(self, held: Held) -> None:
        """A closing clock that came during a deferral closes the intent with both reasons."""
        closing = self.closing() if self.state is IntentState.PENDING else None
        if closing is not None:
            decision = held.decision
            both = f"{closing.reason}; held by policy v{decision.version} ({decision.rule}): {decision.reason}"
            self._record.close(closing.state, both, closing.source)

    def _put_back_in_flight(self) -> None:
        if self._in_flight is not None:
            self._record.ledger.requeue(self._in_flight)
            self._in_flight = None

    # ---- retryable_failure: the next attempt, on a durable timer -----------------------

    def retry_due(self) -> datetime | None:
        """When the next attempt may be prepared; None when the retry budget is spent (closed)."""
        attempt = self.attempts[-1]
        results = [each.submit_result for each in self.attempts]
        delay = next_attempt_delay(self.policy, results, attempt.retry_hint, self._clock.random())
        if delay is not None and attempt.submit_result is SubmitResult.UNREACHABLE and attempt.next_provider:
            # Nothing was sent and another provider takes the next attempt: nothing to back off from
            # (the backoff, and a 429's Retry-After, spare the provider that could not be reached).
            delay = timedelta(0)
        if delay is None:
            self._record.transition(
                IntentState.PERMANENT_FAILURE,
                f"retry budget exhausted after {budget_spent(results)} attempts",
                Source.CLOCK,
                attempt=attempt.number,
                closes=True,
            )
            return None
        attempt.retry_delay = delay
        return self._clock.now() + delay

    def retry_elapsed(self) -> None:
        delay = self.attempts[-1].retry_delay or timedelta(0)
        self._record.transition(
            IntentState.PENDING, f"retry backoff of {delay.total_seconds():.1f}s elapsed", Source.CLOCK
        )

    # ---- open attempts: what the provider can be asked ---------------------------------

    def capabilities(self, attempt: AttemptRecord) -> Capabilities:
        """What the attempt's provider declared; the channel's assumption when its submit never answered."""
        return attempt.capabilities or assumed_capabilities(self.intent.message.channel)

    def can_poll(self, attempt: AttemptRecord) -> bool:
        return self.capabilities(attempt).status_lookup

    def can_ask(self, attempt: AttemptRecord) -> bool:
        """Whether the provider can be asked about this attempt as it stands (by id, or by reference)."""
        capabilities = self.capabilities(attempt)
        return capabilities.status_lookup if attempt.provider_id is not None else capabilities.lookup_by_reference

    def nothing_more_to_learn(self, attempt: AttemptRecord) -> bool:
        """Accepted by a provider that neither reports nor answers lookups: acceptance is final."""
        capabilities = self.capabilities(attempt)
        return attempt.provider_id is not None and not (capabilities.delivery_reports or capabilities.status_lookup)

    def awaits_first_event(self, attempts: list[AttemptRecord]) -> bool:
        """Every attempt is accepted by a provider that only reports (no lookups)."""
        return all(
            attempt.provider_id is not None
            and not self.can_poll(attempt)
            and self.capabilities(attempt).delivery_reports
            for attempt in attempts
        )

    def look_delay(self, attempt: AttemptRecord) -> timedelta:
        """How long until the attempt is next asked about (or its evidence window closes)."""
        capabilities, now, jitter = self.capabilities(attempt), self._clock.now(), self._clock.random
        if self.resubmits.waiting(attempt):
            return self.resubmits.delay(attempt)
        if attempt.provider_id is not None:
            if not capabilities.status_lookup:
                # Nothing to ask: reports arrive or the resolution horizon closes the wait.
                return self.policy.resolution_horizon
            return poll_delay(self.policy, attempt.lookups, jitter())
        if not capabilities.lookup_by_reference:
            if attempt.lookups == 0:
                return max(attempt.started_at + self.policy.event_evidence_window - now, timedelta(0))
            # The stream was read and was not flowing past the attempt: read it again, less and less often.
            return poll_delay(self.policy, attempt.lookups, jitter())
        if not capabilities.bounded_queue:
            # An ESP's activity feed: "not found" proves nothing before its lag has passed, the event
            # stream brings acceptance sooner, and the feed is rate limited: look on the poll schedule.
            return poll_delay(self.policy, attempt.lookups, jitter())
        if attempt.lookups == 0:
            return self.policy.lookup_first_delay
        return lookup_delay(self.policy, attempt.lookups, jitter())

    def way_to_look(self, attempt: AttemptRecord) -> Way:
        capabilities = self.capabilities(attempt)
        if self.resubmits.due(attempt):
            return Way.RESUBMIT
        if attempt.provider_id is not None:
            return Way.POLL if capabilities.status_lookup else Way.NOTHING
        if capabilities.lookup_by_reference:
            return Way.LOOKUP
        if self._clock.now() < attempt.started_at + self.policy.event_evidence_window:
            return Way.NOTHING
        return Way.STREAM

    def why_nothing_to_ask(self, attempt: AttemptRecord) -> str:
        return (
            "no lookup possible; waiting for events"
            if attempt.provider_id is not None
            else "evidence window still open"
        )

    def stream_query(self, attempt: AttemptRecord) -> EventStreamQuery:
        return stream_query(self.policy, attempt.ref, attempt.started_at)

    def on_lookup(self, attempt: AttemptRecord, outcome: LookupOutcome, *, by_reference: bool) -> str | None:
        """What the provider answered about an attempt: applied, and said back in a few words; None
        when it could not answer (Unavailable says nothing about the attempt). Asked by reference,
        "not found" proves the attempt absent once the proof window has passed; asked by id (or
        while following a closed intent) it proves nothing."""
        attempt.lookups += 1
        result = outcome.result
        if isinstance(result, Found):
            observation = attempt.found(result, self._clock.now())
            self._record.apply_observation(attempt, observation, kind=ObservationKind.FOUND)
            return f"found {result.status.value}"
        if isinstance(result, NotFound):
            called_at = self.resubmits.latest_call(attempt)
            proven = by_reference and absence_proven(self.policy, called_at, result, attempt.validity)
            reason = "provider has no such message"
            if by_reference:
                reason += (
                    " past the proof window: not accepted" if proven else "; within the proof window, looking again"
                )
            self._record.observe_fact(attempt, Source.POLL, ObservationKind.NOT_FOUND, proven, reason)
            if proven:
                attempt.submit_result = SubmitResult.NOT_ACCEPTED
                self._record.settle(
                    f"lookup proved attempt {attempt.number} was not accepted", Source.POLL, attempt=attempt.number
                )
            return "not found"
        self._record.observe_fact(attempt, Source.POLL, ObservationKind.UNAVAILABLE, False, result.reason)
        return None

    def on_event_stream(self, attempt: AttemptRecord, stream: EventStream) -> str:
        """An unknown submit to a provider without lookups, past the evidence window: presumed (never
        proven) not accepted only while the ESP's event stream flows past the attempt, recorded with
        the rule's inputs, so a later event contradicting it is counted as a possible duplicate;
        otherwise the attempt keeps waiting and says why (each change of reason is recorded once)."""
        attempt.lookups += 1
        verdict = silence_verdict(self.policy, attempt.started_at, self._clock.now(), stream)
        if not verdict.counts:
            if verdict.rule.value != attempt.waiting_rule:
                self._record.observe_fact(attempt, Source.CLOCK, ObservationKind.STREAM_SILENT, False, verdict.reason)
            attempt.waiting, attempt.waiting_rule = verdict.reason, verdict.rule.value
            return verdict.reason
        attempt.waiting, attempt.waiting_rule = None, verdict.rule.value
        self._record.observe_fact(attempt, Source.CLOCK, ObservationKind.NO_EVIDENCE, True, verdict.reason)
        attempt.submit_result = SubmitResult.NO_EVIDENCE
        self._record.settle(verdict.reason, Source.CLOCK, attempt=attempt.number)
        return "no event while the event stream flowed past it: presumed not accepted"

    def close_unknown(self, reason: str, looked_at: datetime, answers: list[str]) -> None:
        """The horizon passed and the last look found nothing conclusive: unknown, with what each
        attempt answered. A worker running late delays this verdict; it cannot manufacture it."""
        if self.state in OPEN_STATES:
            summary = ", ".join(answers)
            self._record.close(
                IntentState.UNKNOWN, f"{reason}; last lookup at {looked_at.isoformat()}: {summary}", Source.CLOCK
            )

    # ---- after a cancel or expiry: the attempt the provider has, to its own outcome ----

    def attempt_to_follow(self) -> AttemptRecord | None:
        """Cancellation cannot recall an accepted message: the last attempt is tracked to its own
        outcome (by reports, and by polls unless expiry closed polling) or to the horizon."""
        if not self.attempts or self.nothing_more_to_learn(self.attempts[-1]):
            return None
        return self.attempts[-1]

    def asks_provider_to_cancel(self, attempt: AttemptRecord) -> bool:
        return (
            self.state is IntentState.CANCELLED
            and attempt.provider_id is not None
            and not attempt.resolved
            and self.capabilities(attempt).cancel_accepted
        )

    def on_provider_cancel(self, attempt: AttemptRecord, canceled: bool, reason: str) -> None:
        self._record.observe_fact(attempt, Source.OPERATOR, ObservationKind.PROVIDER_CANCEL, canceled, reason)

    def following(self, attempt: AttemptRecord) -> bool:
        """Still something to learn about a closed intent's attempt (it reached the provider)."""
        return not attempt.resolved and self.within_horizon(attempt) and attempt.submit_result is not None

    def follow_due(self, attempt: AttemptRecord) -> datetime:
        """When to next ask about a closed intent's attempt (its horizon, when no one can be asked)."""
        if not self.can_ask(attempt):
            return self.horizon(attempt)
        # An attempt still without a provider id is looked up on the lookup schedule, a known one polled.
        schedule = lookup_delay if attempt.provider_id is None else poll_delay
        return self._clock.now() + schedule(self.policy, attempt.lookups, self._clock.random())

    def follow_asks(self, attempt: AttemptRecord) -> bool:
        polls_allowed = self.closed_by != "clock:expiry"
        return polls_allowed and self.can_ask(attempt) and not attempt.resolved and self.within_horizon(attempt)

    # ---- checkpoints -------------------------------------------------------------------

    def rows_to_write(self) -> LedgerBatch | None:
        """The buffered rows, taken for one write; None when only the intent row waits (it is written
        with the first real rows)."""
        batch = self._record.ledger.take()
        if not (batch.attempts or batch.transitions or batch.observations or batch.receipt_outcomes):
            return None
        return batch

    def rows_written(self, batch: LedgerBatch, recorded: IntentRecorded | None) -> bool:
        """The write committed. True when the ledger already held this key from a run Temporal no
        longer knows (retention): the intent closed as suppressed and its rows are to be written."""
        if batch.record is None:
            return False
        self._record.ledger.intent_recorded = True
        if recorded is not None and recorded.first_run_id != batch.record.run_id:
            self._record.suppress(recorded)
            return True
        return False
