"""Stand-ins for NotificationWorkflow's activities, registered under the real activities' names.

The workflow schedules activities by name (``submit_attempt``, ``lookup_attempt``,
``cancel_attempt``, and the ledger's local activities ``append_ledger``, ``dispatch_order`` and
``read_event_stream``), so a worker that registers these stand-ins
runs the real workflow against scripted answers and keeps what it was asked.

Each stand-in plays a script: a list of answers, used in order, the last one repeated. An answer
is a value (returned), an exception (raised) or a callable ``(input, now) -> value`` where ``now``
is the server's (skipped) clock when the activity was scheduled (None for a local activity: its
info carries the worker's wall clock). The factories below build the answers; they are the only
place that knows the shape of the submit activity's answer (``herald.core.contracts.SubmitStep``), so a
change of that contract is adapted here and nowhere else.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from temporalio import activity
from temporalio.common import Priority
from temporalio.exceptions import ApplicationError

from herald.core.capabilities import Capabilities
from herald.core.channels import assumed_capabilities
from herald.core.contracts import (
    AlreadyRecorded,
    Called,
    DispatchQuery,
    Held,
    LookupInput,
    NotSent,
    ProviderCancelInput,
    ProviderCancelResult,
    Refused,
    SubmitInput,
    SubmitStep,
)
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.outcomes import (
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
    Unreachable,
)
from herald.core.rows import IntentRecorded, LedgerBatch, ObservationRow, TransitionRow
from herald.core.send_policy import Decision, DispatchOrder, PolicyDecision, PolicyRules, dispatch_order
from herald.core.silence import EventStream, EventStreamQuery
from herald.providers.twilio import TwilioAdapter

Answer = Any  # a value, an exception, or a callable (input, now) -> value

# What the real adapters declare: Twilio (lookups by id and by reference, a bounded queue, no
# cancel of an accepted message) and an SMTP relay with SendGrid's event webhook (events only).
TWILIO = TwilioAdapter.capabilities
SMTP_WITH_EVENTS = assumed_capabilities(Channel.EMAIL)
PROVIDERS = {Channel.SMS: ("twilio", TWILIO), Channel.EMAIL: ("sendgrid", SMTP_WITH_EVENTS)}

SUBMIT = "submit_attempt"
LOOKUP = "lookup_attempt"
CANCEL = "cancel_attempt"
APPEND_LEDGER = "append_ledger"
EVENT_STREAM = "read_event_stream"
DISPATCH_ORDER = "dispatch_order"


def default_order(query: DispatchQuery, _now: None) -> DispatchOrder:
    """The built-in policy's place for an attempt (version 1, as migration 009 publishes it)."""
    return dispatch_order(PolicyRules(), 1, query.category, query.tenant, query.requested)


# ---- submit answers (SubmitStep) -----------------------------------------------------------


def called(
    result: Any,
    channel: Channel = Channel.SMS,
    capabilities: Capabilities | None = None,
    give_up_after_seconds: int | None = None,
) -> SubmitStep:
    """The provider was called once and answered `result` (Accepted, Retryable, Rejected, ...);
    `give_up_after_seconds` is the admitting policy's give-up on an unreachable provider."""
    provider, declared = PROVIDERS[channel]
    return Called(
        outcome=SubmitOutcome(result=result),
        provider=provider,
        capabilities=capabilities or declared,
        give_up_after_seconds=give_up_after_seconds,
    )


def accepted(provider_id: str, status: ProviderStatus = ProviderStatus.QUEUED, **kwargs: Any) -> SubmitStep:
    return called(Accepted(provider_id=provider_id, status=status), **kwargs)


def retryable(
    reason: str = "Twilio 30001: queue overflow", error_code: int | None = 30001, **kwargs: Any
) -> SubmitStep:
    return called(Retryable(reason=reason, error_code=error_code), **kwargs)


def rejected(
    reason: str = "Twilio 21211: invalid 'To' number", error_code: int | None = 21211, **kwargs: Any
) -> SubmitStep:
    return called(Rejected(reason=reason, error_code=error_code), **kwargs)


def unknown(reason: str = "ReadTimeout after the request was sent", **kwargs: Any) -> SubmitStep:
    """The adapter itself says it cannot tell (a read timeout after sending)."""
    return called(Unknown(reason=reason), **kwargs)


def unreachable(reason: str = "ConnectError before the request left", **kwargs: Any) -> SubmitStep:
    return called(Unreachable(reason=reason), **kwargs)


def refused(reason: str = "recipient: sealed under an erased recipient's key (recipient erased); it cannot be read") -> SubmitStep:
    """Refused before any provider was called (the recipient erased, no provider for the channel)."""
    return Refused(reason=reason)


def not_sent(reason: str = "ledger unavailable before the provider call (OperationalError)") -> SubmitStep:
    return NotSent(reason=reason)


def already_recorded(
    first_run_id: str, last_state: IntentState, next_transition_seq: int, next_observation_seq: int
) -> SubmitStep:
    """The ledger already holds this key from an earlier workflow run: nothing was written or sent."""
    recorded = IntentRecorded(
        created=False,
        same_payload=True,
        first_run_id=first_run_id,
        next_transition_seq=next_transition_seq,
        next_observation_seq=next_observation_seq,
        last_state=last_state,
    )
    return AlreadyRecorded(recorded=recorded)


def held(
    decision: Decision, rule: str, reason: str, not_before: datetime | None = None, version: int = 7
) -> SubmitStep:
    """The send policy held the attempt before anything was written or sent."""
    return Held(
        decision=PolicyDecision(version=version, decision=decision, rule=rule, reason=reason, not_before=not_before)
    )


def crashes(message: str = "worker lost mid-submit") -> ApplicationError:
    """The submit activity fails (the workflow cannot know whether the provider got the request)."""
    return ApplicationError(message, type="StandInCrash")


def hangs() -> Callable[[Any, datetime], Any]:
    """The submit activity never answers: its start-to-close timeout ends it."""

    async def hang(_input: Any, _now: datetime) -> Any:
        await asyncio.sleep(3600)

    return hang


def after(gate: asyncio.Event, answer: Answer) -> Callable[[Any, datetime], Any]:
    """`answer`, once the test opens `gate` (the activity is in flight until then)."""

    async def wait_then_answer(input: Any, now: datetime) -> Any:
        await asyncio.wait_for(gate.wait(), 30)
        return answer(input, now) if callable(answer) else answer

    return wait_then_answer


# ---- lookup answers (LookupOutcome) --------------------------------------------------------


def found(
    provider_id: str, status: ProviderStatus, error_code: int | None = None, failure_retryable: bool = False
) -> LookupOutcome:
    return LookupOutcome(
        result=Found(provider_id=provider_id, status=status, error_code=error_code, failure_retryable=failure_retryable)
    )


def not_found(queue_bounded: bool = True) -> Callable[[LookupInput, datetime], LookupOutcome]:
    """The provider answered and listed nothing, searched at the moment of the lookup."""

    def answer(input: LookupInput, now: datetime) -> LookupOutcome:
        return LookupOutcome(result=NotFound(searched_since=input.reference.since, searched_at=now, queue_bounded=queue_bounded))

    return answer


def by_reference_then_by_id(by_reference: Answer, by_id: Answer) -> Callable[[LookupInput, datetime], Any]:
    """One answer for lookups by our reference (no provider id yet), another for polls by id."""

    def answer(input: LookupInput, now: datetime) -> Any:
        chosen = by_reference if input.provider_id is None else by_id
        return chosen(input, now) if callable(chosen) else chosen

    return answer


def lookup_unavailable(reason: str = "HTTP 503 from the provider") -> LookupOutcome:
    return LookupOutcome(result=Unavailable(reason=reason))


def cancel_answer(canceled: bool, reason: str) -> ProviderCancelResult:
    return ProviderCancelResult(canceled=canceled, reason=reason)


# ---- event stream answers (EventStream) ---------------------------------------------------


def stream_silent(provider: str = "sendgrid") -> EventStream:
    """No post has named a submission made after the attempt: the stream has not passed it."""
    return EventStream(provider=provider, last_post_at=None, passed_at=None)


def stream_passed_at_window_end(provider: str = "sendgrid") -> Callable[[EventStreamQuery, datetime], EventStream]:
    """Fresh events for later submissions arrived right after the attempt's event window."""

    def answer(query: EventStreamQuery, _now: None) -> EventStream:
        return EventStream(provider=provider, last_post_at=query.window_to, passed_at=query.window_to)

    return answer


# ---- the stand-ins -----------------------------------------------------------------------


class Script:
    """Answers in order; the last one keeps answering."""

    def __init__(self, name: str, answers: Sequence[Answer], order: Iterator[int]) -> None:
        if not answers:
            raise ValueError(f"{name}: a script needs at least one answer")
        self._name = name
        self._answers = list(answers)
        self._order = order
        self.calls: list[Any] = []
        self.times: list[datetime | None] = []
        # Where each call falls among the calls to every stand-in of the test.
        self.positions: list[int] = []
        # The task-queue priority each call was scheduled with (None for local activities).
        self.priorities: list[Priority | None] = []

    async def play(self, input: Any) -> Any:
        info = activity.info()
        # The server's (skipped) clock when the activity was scheduled. A local activity's info
        # carries the worker's wall clock instead, which means nothing here: None.
        now = None if info.is_local else info.current_attempt_scheduled_time
        self.calls.append(input)
        self.times.append(now)
        self.positions.append(next(self._order))
        self.priorities.append(None if info.is_local else info.priority)
        answer = self._answers[min(len(self.calls), len(self._answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            value = answer(input, now)
            return await value if asyncio.iscoroutine(value) else value
        return answer


def _refuse(name: str) -> ApplicationError:
    return ApplicationError(
        f"{name}: not expected on this path (no answer scripted)", type="Unexpected", non_retryable=True
    )


class StandIns:
    """One test's stand-ins and what they were asked (``calls(name)``).

    Unscripted provider activities fail (the workflow reads that as an activity failure), so a
    path that should never look up or cancel shows it in ``calls`` instead of passing quietly.
    """

    def __init__(
        self,
        *,
        submit: Sequence[Answer] = (),
        lookup: Sequence[Answer] = (),
        cancel: Sequence[Answer] = (),
        event_stream: Sequence[Answer] = (),
        dispatch: Sequence[Answer] = (default_order,),
    ) -> None:
        order = itertools.count()
        self._scripts = {
            SUBMIT: Script(SUBMIT, submit or [_refuse(SUBMIT)], order),
            LOOKUP: Script(LOOKUP, lookup or [_refuse(LOOKUP)], order),
            CANCEL: Script(CANCEL, cancel or [_refuse(CANCEL)], order),
            APPEND_LEDGER: Script(APPEND_LEDGER, [None], order),
            EVENT_STREAM: Script(EVENT_STREAM, event_stream or [_refuse(EVENT_STREAM)], order),
            DISPATCH_ORDER: Script(DISPATCH_ORDER, dispatch, order),
        }

    def calls(self, name: str) -> list[Any]:
        return self._scripts[name].calls

    def priorities(self, name: str) -> list[Priority | None]:
        """The task-queue priority each call was scheduled with; None for local activities."""
        return self._scripts[name].priorities

    def times(self, name: str) -> list[datetime | None]:
        """The server's clock at each call (when the activity was scheduled); None for local activities."""
        return self._scripts[name].times

    @property
    def submits(self) -> list[SubmitInput]:
        return self.calls(SUBMIT)

    @property
    def lookups(self) -> list[LookupInput]:
        return self.calls(LOOKUP)

    @property
    def ledger_batches(self) -> list[LedgerBatch]:
        """Every batch the workflow handed over (with a submit, or at a checkpoint), in order."""
        submit, append = self._scripts[SUBMIT], self._scripts[APPEND_LEDGER]
        handed = [(at, each.ledger) for at, each in zip(submit.positions, submit.calls)]
        handed += zip(append.positions, append.calls)
        return [batch for _, batch in sorted(handed, key=lambda pair: pair[0])]

    @property
    def transition_rows(self) -> list[TransitionRow]:
        """The transitions handed over, by seq; a row handed over again (a requeued batch) counts once,
        as the ledger's idempotent write counts it, and the latest row of a seq wins."""
        rows = {row.seq: row for batch in self.ledger_batches for row in batch.transitions}
        return [rows[seq] for seq in sorted(rows)]

    @property
    def observation_rows(self) -> list[ObservationRow]:
        """The observations handed over, by seq, each once (as ``transition_rows``)."""
        rows = {row.seq: row for batch in self.ledger_batches for row in batch.observations}
        return [rows[seq] for seq in sorted(rows)]

    async def called(self, name: str, times: int = 1, timeout: float = 10.0) -> None:
        """Wait (real time, bounded) until the stand-in `name` has been called `times` times."""

        async def enough() -> None:
            while len(self.calls(name)) < times:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(enough(), timeout)

    # The workflow worker's activities; the submit runs on its own task queue.

    @activity.defn(name=SUBMIT)
    async def submit_attempt(self, input: SubmitInput) -> SubmitStep:
        return await self._scripts[SUBMIT].play(input)

    @activity.defn(name=LOOKUP)
    async def lookup_attempt(self, input: LookupInput) -> LookupOutcome:
        return await self._scripts[LOOKUP].play(input)

    @activity.defn(name=CANCEL)
    async def cancel_attempt(self, input: ProviderCancelInput) -> ProviderCancelResult:
        return await self._scripts[CANCEL].play(input)

    @activity.defn(name=APPEND_LEDGER)
    async def append_ledger(self, batch: LedgerBatch) -> IntentRecorded | None:
        return await self._scripts[APPEND_LEDGER].play(batch)

    @activity.defn(name=DISPATCH_ORDER)
    async def dispatch_order(self, query: DispatchQuery) -> DispatchOrder:
        return await self._scripts[DISPATCH_ORDER].play(query)

    @activity.defn(name=EVENT_STREAM)
    async def read_event_stream(self, query: EventStreamQuery) -> EventStream:
        return await self._scripts[EVENT_STREAM].play(query)

    def workflow_activities(self) -> list[Callable[..., Any]]:
        return [
            self.append_ledger,
            self.dispatch_order,
            self.read_event_stream,
            self.lookup_attempt,
            self.cancel_attempt,
        ]

    def submit_activities(self) -> list[Callable[..., Any]]:
        return [self.submit_attempt]
