"""The intent machine's tables: events in, commands out, each command shown as one short line.

A case is a list of rows ``(seconds, event, commands)``: the test clock moves on by `seconds`,
the machine is stepped with `event`, and the commands it returns, shown by ``show``, must be
`commands`. A report or cancel that ends the wait the machine is in shows as "(woken)".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from herald.core.capabilities import Capabilities
from herald.core.contracts import (
    Called,
    CancelRequest,
    DeliveryReport,
    NotificationInput,
    Refused,
    ReportBatch,
    attempt_number_of,
    attempt_ref,
)
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import workflow_id_for
from herald.core.machine import IntentMachine
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
    Reply,
    Submit,
    WaitUntil,
    WriteRows,
)
from herald.core.machine.events import (
    CancelAsked,
    Event,
    HandlersFinished,
    HistoryChecked,
    LookAnswered,
    OrderRead,
    ReportsArrived,
    RowsWritten,
    Started,
    StreamRead,
    SubmitAnswered,
    SubmitFailed,
    WaitEnded,
)
from herald.core.message import Channel
from herald.core.outcomes import Accepted, Found, LookupOutcome, NotFound, ProviderStatus, SubmitOutcome, Unavailable
from herald.core.rows import LedgerBatch
from herald.core.send_policy import Category, PolicyRules, dispatch_order
from herald.core.silence import EventStream
from herald.intake.requests import build_intent, parse_request
from herald.providers.smtp import SmtpAdapter
from herald.providers.twilio import TwilioAdapter
from herald.settings import EmailSettings
from tests.keys import SESSION_KEYRING
from tests.unit.clock import TestClock

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DATA = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}
POLICY = DeliveryPolicy()
ORDER = dispatch_order(PolicyRules(), 1, Category.TRANSACTIONAL, "shared", None)
SMS = {"business_key": "order_receipt:pay_1", "channel": "sms", "recipient": "+15551230001",
       "template_id": "order_receipt", "template_version": 1, "render_data": DATA}  # fmt: skip
EMAIL = {**SMS, "channel": "email", "recipient": "a@example.com", "template_id": "order_receipt_email"}

# The answers most rows give.
STARTED = Started()
ORDER_READ = OrderRead(order=ORDER)
SHORT = HistoryChecked(long=False)  # Temporal does not suggest continue-as-new
ENDED = WaitEnded()
WRITTEN = RowsWritten()
DONE = HandlersFinished()
LOST = SubmitFailed(failure="TimeoutError")  # the submit activity did not finish
UNAVAILABLE = LookAnswered(outcome=LookupOutcome(result=Unavailable(reason="provider down")))


def intent(request: dict[str, Any], at: datetime = AT) -> Any:
    return build_intent(parse_request(request), at, SESSION_KEYRING)


def accepted(provider_id: str = "SM1", capabilities: Capabilities = TwilioAdapter.capabilities) -> SubmitAnswered:
    return called(Accepted(provider_id=provider_id, status=ProviderStatus.QUEUED), capabilities)


def called(result: Any, capabilities: Capabilities, provider: str = "twilio") -> SubmitAnswered:
    """The submit activity's answer: the provider was called once and said `result`."""
    return SubmitAnswered(step=Called(outcome=SubmitOutcome(result=result), provider=provider, capabilities=capabilities))


def refused(reason: str, provider: str | None = None) -> SubmitAnswered:
    """The submit activity's answer: the attempt was refused before any provider was called."""
    return SubmitAnswered(step=Refused(reason=reason, provider=provider))


def smtp(events: bool) -> Capabilities:
    """What an SMTP relay declares, with or without an event webhook."""
    config = EmailSettings(host="relay.example.com", from_address="n@example.com", message_id_domain="example.com", delivery_events=events)  # fmt: skip
    return SmtpAdapter(config, keyring=SESSION_KEYRING).capabilities


def not_found(seconds: float) -> LookAnswered:
    """The provider has no such message, searched `seconds` after AT."""
    result = NotFound(searched_at=AT + timedelta(seconds=seconds), queue_bounded=True)
    return LookAnswered(outcome=LookupOutcome(result=result))


def found(status: ProviderStatus, provider_id: str = "SM1") -> LookAnswered:
    return LookAnswered(outcome=LookupOutcome(result=Found(provider_id=provider_id, status=status)))


def stream(passed_after: float | None = None) -> StreamRead:
    """The ESP's event stream as the ledger recorded it: passing the attempt `passed_after` seconds after AT, or silent."""
    passed = AT + timedelta(seconds=passed_after) if passed_after is not None else None
    return StreamRead(stream=EventStream(provider="sendgrid", last_post_at=passed, passed_at=passed))


def report(
    inbox_id: int, status: ProviderStatus, attempt: int = 1, provider_id: str = "SM1", request: dict[str, Any] = SMS
) -> ReportsArrived:
    ref = attempt_ref(workflow_id_for(str(request["business_key"]), Channel(request["channel"])), attempt)
    delivered = DeliveryReport(inbox_id=inbox_id, attempt_ref=ref, provider_id=provider_id, status=status, received_at=AT)
    return ReportsArrived(batch=ReportBatch(reports=[delivered]))


def cancel() -> CancelAsked:
    return CancelAsked(request=CancelRequest(reason="refunded", operator="ops"))


def rows(batch: LedgerBatch) -> str:
    """A batch as one line: the intent row, attempt rows, transitions, observations, inbox verdicts."""
    parts = ["intent"] if batch.record is not None else []
    parts += [f"attempt {row.number}" for row in batch.attempts]
    parts += [f"t{row.seq} {row.to_state.value}" for row in batch.transitions]
    parts += [f"o{row.seq} {row.kind.value}{'' if row.applied else ' (not applied)'}" for row in batch.observations]
    parts += [f"inbox {row.inbox_id} {row.outcome}" for row in batch.receipt_outcomes]
    return ", ".join(parts)


def show(command: Command, now: datetime) -> str:
    """One command as a short line (a wait as its length from now)."""
    match command:
        case ReadOrder():
            return "read order"
        case Submit(input=submit):
            return f"submit attempt {attempt_number_of(submit.attempt_ref)}: {rows(submit.ledger)}"
        case Look(input=look):
            by = f"by id {look.provider_id}" if look.provider_id else "by reference"
            return f"look attempt {attempt_number_of(look.reference.attempt_ref)} {by}"
        case ReadStream():
            return "read stream"
        case AskToCancel(input=ask):
            return f"ask the provider to cancel {ask.provider_id}"
        case WriteRows(batch=batch):
            return f"write {rows(batch)}"
        case Publish(state=state, attempts=attempts):
            return f"publish {state.value}/{attempts}"
        case WaitUntil(fire_at=fire_at, cancel_wakes=cancel_wakes):
            return f"wait {(fire_at - now).total_seconds():g}s" + ("" if cancel_wakes else ", a cancel does not wake it")
        case Pause(duration=duration):
            return f"pause {duration.total_seconds():g}s"
        case CheckHistory():
            return "check history"
        case AwaitHandlers():
            return "await handlers"
        case ContinueAsNew(input=carried):
            assert carried.carried is not None
            return f"continue as new ({carried.carried.state.value})"
        case Finish(status=status):
            return f"finish {status.state.value}"
        case Reply(answer=answer):
            return f"reply {answer.state.value}" + ("" if answer.cancelled else " (refused)")
    raise AssertionError(command)


Row = tuple[float, Event, list[str]]


@dataclass(frozen=True)
class Case:
    """One path through the machine: the intent, its policy, and its rows."""

    name: str
    rows: list[Row]
    request: dict[str, Any] = field(default_factory=lambda: SMS)
    policy: DeliveryPolicy = POLICY
    first_order_at: datetime | None = None  # the starting client read ORDER then
    reason: str | None = None  # a part of the last transition's reason


def machine_for(case: Case, clock: TestClock) -> IntentMachine:
    first = {"first_order": ORDER, "first_order_at": case.first_order_at} if case.first_order_at else {}
    return IntentMachine(NotificationInput(intent=intent(case.request), policy=case.policy, **first), clock, "run-1")


def play(case: Case) -> tuple[IntentMachine, TestClock, list[Command]]:
    """Step a new machine through the case's rows, checking each; the machine, its clock and its last commands."""
    clock = TestClock(AT)
    machine = machine_for(case, clock)
    commands: list[Command] = []
    for number, (seconds, event, expected) in enumerate(case.rows, start=1):
        clock.advance(timedelta(seconds=seconds))
        commands = machine.step(event)
        shown = [show(command, clock.now()) for command in commands]
        if isinstance(event, (ReportsArrived, CancelAsked)) and machine.woken:
            shown.append("(woken)")
        assert shown == expected, f"row {number} ({event.kind})"
    if case.reason is not None:
        assert case.reason in machine.status().transitions[-1].reason
    return machine, clock, commands
