"""The course one intent runs, from pending to closed, written as one generator.

Each ``yield`` hands the runner a command (``herald.core.machine.commands``) and is resumed with the
event that answers it, or with None after a command that is not answered; ``IntentMachine.step``
does the resuming. What each answer changes, and what the clocks decide, is asked of the rules
(``herald.core.machine.rules``); the course decides only what happens next.

    pending ............ the dispatch order (the starting client's, while fresh, else read), a new
                         attempt and its submit; the same attempt again after the ledger could not
                         take its rows (a wait that writes nothing); the send policy's deferral
    submitting/accepted  each open attempt asked about when its time comes (``LookPlan``), or, its
                         answer lost at a provider that refuses a repeated id within a grace, sent
                         again under its own id, to its own provider (``Resubmits``); at the
                         horizon a last look at every open attempt before `unknown` may be said
    retryable_failure .. the backoff before the next attempt
    closed ............. the attempt the provider has, followed to its own outcome or horizon;
                         then every row written and every running handler finished

The ledger and the Web UI catch up (``_checkpoint``) before every wait that may be long, before
continuing as new and at the close. Every wait ends at its time or on news (reports; a cancel,
where the intent's closing clocks are watched); the runner keeps one timer across wake-ups.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime, timedelta
from typing import TypeVar

from herald.core.contracts import (
    DispatchQuery,
    Held,
    LookupInput,
    NotificationInput,
    NotSent,
    ProviderCancelInput,
    Resubmission,
    SubmitInput,
    SubmitStep,
)
from herald.core.lifecycle import OPEN_STATES, IntentState
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.commands import (
    AskToCancel,
    AwaitHandlers,
    CheckHistory,
    Command,
    ContinueAsNew,
    Finish,
    Look,
    Pause,
    Publish,
    ReadOrder,
    ReadStream,
    Submit,
    WaitUntil,
    WriteRows,
)
from herald.core.machine.events import (
    Answer,
    HistoryChecked,
    LookAnswered,
    OrderRead,
    ProviderCancelAnswered,
    RowsWritten,
    Shown,
    StreamRead,
    SubmitAnswered,
    SubmitFailed,
)
from herald.core.machine.looks import LookPlan
from herald.core.message import MessageReference
from herald.core.machine.rules import IntentRules, Way
from herald.core.rows import LedgerBatch
from herald.core.send_policy import DispatchOrder, built_in_order

# The last look at the horizon asks a provider that cannot answer again, 2 s and 4 s later: a
# passing outage must not turn into `unknown`, and a lasting one must not hold the verdict forever.
LAST_LOOK_TRIES = 3
LAST_LOOK_BACKOFF = timedelta(seconds=2)

T = TypeVar("T")
# A part of the course: yields commands, is sent their answers, returns what it found.
Steps = Generator[Command, Answer | None, T]


class Course:
    def __init__(self, rules: IntentRules) -> None:
        self._rules = rules
        # What the Web UI's search attributes say now (None: nothing), as the run started with them.
        self._published: tuple[IntentState, int] | None = None

    def run(self, shown: Shown | None) -> Steps[None]:
        rules = self._rules
        self._published = (shown.state, shown.attempts) if shown is not None else None
        while not rules.state.is_terminal:
            if rules.state is IntentState.PENDING:
                yield from self._dispatch()
            elif rules.state in OPEN_STATES:
                yield from self._resolve_open_attempts()
            elif rules.state is IntentState.RETRYABLE_FAILURE:
                yield from self._wait_for_retry()
        yield from self._follow_open_attempt()
        yield from self._settle_handlers()
        yield Finish(status=rules.status())

    def _settle_handlers(self) -> Steps[None]:
        """Apply and write everything, let running handlers finish, apply and write what they did."""
        self._rules.apply_reports()
        yield from self._checkpoint()
        yield AwaitHandlers()
        self._rules.apply_reports()
        yield from self._checkpoint()

    def _continue_as_new_if_suggested(self) -> Steps[None]:
        """Keep a days-long poll's history bounded: hand the state to a fresh run when Temporal asks."""
        checked = yield CheckHistory()
        assert isinstance(checked, HistoryChecked)
        if checked.long:
            yield from self._settle_handlers()
            rules = self._rules
            carried = NotificationInput(intent=rules.intent, policy=rules.policy, carried=rules.carry())
            yield ContinueAsNew(input=carried)

    # ---- pending -> submitting -> an answer --------------------------------------------

    def _dispatch(self) -> Steps[None]:
        rules = self._rules
        order = rules.known_order()
        if order is None:
            query = rules.dispatch_query()
            read = yield ReadOrder(query=query)
            assert isinstance(read, OrderRead)
            order = read.order or _built_in_order(query, read.failure)
        attempt = rules.begin_attempt(order)
        if attempt is None:
            return
        step = yield from self._submit(attempt)
        while isinstance(step, NotSent):
            # Nothing reached the provider: wait without writing (the ledger is the problem), then
            # try the same attempt again, unless a cancel, a closing clock or late evidence came first.
            due = rules.not_sent()
            while rules.waits_to_resubmit(due):
                yield from self._wait_until(due, lazy=True)
            if rules.abandon_not_sent(attempt, step):
                return
            step = yield from self._submit(attempt)
        if step is None:
            return  # the submit did not finish: its outcome is unknown, and the attempt is looked up
        not_before = rules.on_submit(attempt, step)
        while isinstance(step, Held) and not_before is not None and rules.deferred(not_before):
            yield from self._wait_until(not_before)
            rules.deferral_woken(step)

    def _submit(self, attempt: AttemptRecord) -> Steps[SubmitStep | None]:
        """What the submit activity did; None when it did not finish (its unknown outcome is applied)."""
        rules = self._rules
        answer = yield self._submit_command(attempt, rules.rows_for_submit())
        if isinstance(answer, SubmitAnswered):
            return answer.step
        assert isinstance(answer, SubmitFailed)
        if answer.never_started:
            return rules.expired_in_queue()
        rules.submit_did_not_finish(attempt, answer.failure)
        return None

    def _submit_command(
        self, attempt: AttemptRecord, rows: LedgerBatch, resubmission: Resubmission | None = None
    ) -> Submit:
        """Send the attempt once, after its rows; it waits in the route's queue no later than the
        intent's expiry, a resubmission no later than its call-by time (a task still queued then is
        never started, so nothing is sent late)."""
        intent, policy, now = self._rules.intent, self._rules.policy, self._rules.clock.now()
        latest = intent.expires_at if resubmission is None else min(intent.expires_at, resubmission.call_by)
        submit = SubmitInput(
            attempt_ref=attempt.ref,
            message=intent.message,
            ledger=rows,
            validity_seconds=int((attempt.validity or policy.provider_queue_validity).total_seconds()),
            message_id_of=attempt.message_id_of,
            workflow_id=intent.workflow_id,
            time_zone=intent.time_zone,
            policy_at=now,
            route=self._rules.route_for(attempt),
            resubmission=resubmission,
        )
        return Submit(
            input=submit,
            queue_timeout=max(latest - now, timedelta(seconds=1)),
            timeout=policy.submit_timeout,
            # Where the submit stands while the route's rate limit holds a backlog (DispatchOrder).
            priority_key=attempt.priority,
            fairness_key=intent.tenant,
            fairness_weight=attempt.fairness_weight,
        )

    # ---- submitting / accepted: open attempts are looked up or polled, never resent ------

    def _resolve_open_attempts(self) -> Steps[None]:
        rules, plan = self._rules, LookPlan(self._rules)
        while rules.state in OPEN_STATES:
            yield from self._continue_as_new_if_suggested()
            until, governing, lazy = plan.next_wait()
            waited_in = rules.state
            timer_fired = yield from self._wait_until(until, governing, lazy=lazy)
            if rules.state not in OPEN_STATES:
                return
            if rules.state is not waited_in:
                continue  # submitting <-> accepted: the schedules change before anything else is judged
            closing = rules.closing(governing)
            if closing is not None and closing.state is IntentState.UNKNOWN:
                yield from self._last_look(closing.reason)
                return
            if rules.close_if(closing):
                return
            if timer_fired:
                for attempt in plan.watched:
                    if plan.take_if_due(attempt):
                        yield from self._look(attempt)

    def _look(self, attempt: AttemptRecord, *, following: bool = False) -> Steps[str | None]:
        """Ask about one attempt as its provider allows; what was found, None if it could not answer."""
        rules = self._rules
        way = rules.way_to_look(attempt)
        if way is Way.NOTHING and not following:
            return rules.why_nothing_to_ask(attempt)
        if way is Way.STREAM and not following:
            read = yield ReadStream(query=rules.stream_query(attempt))
            assert isinstance(read, StreamRead)
            return rules.on_event_stream(attempt, read.stream)
        if way is Way.RESUBMIT and not following:
            return (yield from self._resubmit(attempt))
        intent = rules.intent
        reference = MessageReference(
            recipient=intent.message.recipient,
            content_sha256=intent.content_sha256,
            attempt_ref=attempt.ref,
            since=attempt.started_at,
            created_by=rules.resubmits.latest_call(attempt) + rules.policy.submit_in_flight_bound,
            message_id_of=attempt.message_id_of,
        )
        lookup = LookupInput(
            channel=intent.message.channel, provider_id=attempt.provider_id, reference=reference, provider=attempt.provider
        )
        answer = yield Look(input=lookup)
        assert isinstance(answer, LookAnswered)
        return rules.on_lookup(attempt, answer.outcome, by_reference=way is Way.LOOKUP and not following)

    def _resubmit(self, attempt: AttemptRecord) -> Steps[str]:
        """Send the attempt again under its own message id, to its own provider, whose dedupe refuses
        a repeat within its grace: its answer is the proof a lookup would wait a proof window for."""
        rules = self._rules
        resubmission = rules.resubmits.begin(attempt)  # recorded first: its row is the claim on the call
        answer = yield self._submit_command(attempt, rules.rows_for_submit(), resubmission)
        if isinstance(answer, SubmitAnswered):
            return rules.on_resubmit(attempt, resubmission.number, answer.step)
        assert isinstance(answer, SubmitFailed)
        if answer.never_started:
            # Still queued when the grace allowed no later call: nothing was written or sent.
            return rules.on_resubmit(attempt, resubmission.number, NotSent(reason="still queued at its call-by time"))
        return rules.on_resubmit(attempt, resubmission.number, None, answer.failure)

    def _last_look(self, reason: str) -> Steps[None]:
        """The horizon passed: look at every open attempt once more (a provider that cannot answer
        is asked again, a bounded number of times) before the intent may be called `unknown`."""
        rules = self._rules
        looked_at, answers = rules.clock.now(), []
        for attempt in rules.open_attempts():
            answer = None
            for tries in range(LAST_LOOK_TRIES):
                if not attempt.open:
                    break
                if tries:
                    yield Pause(duration=LAST_LOOK_BACKOFF * tries)
                answer = yield from self._look(attempt)
                if answer is not None:
                    break
            answers.append(f"attempt {attempt.number} {answer or 'unavailable'}")
        rules.close_unknown(reason, looked_at, answers)

    # ---- after a cancel or expiry: the attempt the provider has, to its own outcome ----

    def _follow_open_attempt(self) -> Steps[None]:
        """After a cancel or expiry closed the intent, keep recording what its attempt does."""
        rules = self._rules
        attempt = rules.attempt_to_follow()
        if attempt is None:
            return
        if rules.asks_provider_to_cancel(attempt):
            assert attempt.provider_id is not None  # only an accepted attempt is asked about
            answer = yield AskToCancel(
                input=ProviderCancelInput(
                    channel=rules.intent.message.channel, provider_id=attempt.provider_id, provider=attempt.provider
                )
            )
            assert isinstance(answer, ProviderCancelAnswered)
            rules.on_provider_cancel(attempt, answer.canceled, answer.reason)
        due: datetime | None = None  # kept across wake-ups by reports: one timer per wait
        while rules.following(attempt):
            yield from self._continue_as_new_if_suggested()
            due = due or rules.follow_due(attempt)
            if (yield from self._wait_until(due, attempt, closing_clocks=False)):
                due = None
                if rules.follow_asks(attempt):
                    yield from self._look(attempt, following=True)

    # ---- retryable_failure: the next attempt, after the backoff -------------------------

    def _wait_for_retry(self) -> Steps[None]:
        rules = self._rules
        due = rules.retry_due()
        while due is not None and rules.state is IntentState.RETRYABLE_FAILURE:
            yield from self._continue_as_new_if_suggested()
            if rules.close_if(rules.closing()):
                return
            if rules.clock.now() >= due:
                rules.retry_elapsed()
                return
            # Reports for earlier attempts may wake this wait; they never shorten the backoff, and
            # late evidence that the attempt was accepted after all ends it without a new send.
            yield from self._wait_until(due)

    # ---- the one wait, and the checkpoint before it -------------------------------------

    def _wait_until(
        self, until: datetime, attempt: AttemptRecord | None = None, *, closing_clocks: bool = True, lazy: bool = False
    ) -> Steps[bool]:
        """Wait until `until`, a report, or (with closing_clocks) a cancel or closing clock: the
        earliest wins. Unless `lazy`, the ledger and the Web UI catch up first, since the wait
        may be long. Returns True when `until` has passed (the caller's own clock fired)."""
        rules = self._rules
        if not lazy:
            yield from self._checkpoint()
        limit = min(until, rules.deadline()) if closing_clocks else until
        if attempt is not None:
            limit = min(limit, rules.horizon(attempt))
        if limit > rules.clock.now():
            yield WaitUntil(fire_at=limit, cancel_wakes=closing_clocks)
        rules.apply_reports()
        return rules.clock.now() >= until

    def _checkpoint(self) -> Steps[None]:
        """Write the decided rows, then tell the Web UI the state if it changed (one upsert).

        A run that has shown no state and closes delivered says nothing: the upsert is a billed
        action on every notice and buys no guarantee (the ledger holds the outcome), and a closed
        run with no state is delivered by this rule alone, since every other close, and every wait
        long enough to checkpoint, shows its state (``herald.temporal.workflow_api``)."""
        yield from self._write_rows()
        published = (self._rules.state, len(self._rules.attempts))
        if self._published is None and self._rules.state is IntentState.DELIVERED:
            return
        if published != self._published:
            yield Publish(state=published[0], attempts=published[1])
            self._published = published

    def _write_rows(self) -> Steps[None]:
        batch = self._rules.rows_to_write()
        if batch is None:
            return
        written = yield WriteRows(batch=batch)
        assert isinstance(written, RowsWritten)
        if self._rules.rows_written(batch, written.recorded):
            yield from self._write_rows()


def _built_in_order(query: DispatchQuery, failure: str | None) -> DispatchOrder:
    """The send policy could not be read: the attempt goes at the built-in priorities rather than
    wait (its submit finds the ledger away too, and waits there)."""
    order = built_in_order(query.category, query.tenant, query.requested)
    return order.model_copy(update={"reason": f"send policy unreadable ({failure}): built-in defaults, {order.reason}"})
