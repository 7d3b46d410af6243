"""What the intent machine asks its runner to do: one union of frozen commands, told apart by class.

``IntentMachine.step`` returns a list of commands to run in order. Every command but ``Publish``
and ``Reply`` is answered: it is the last of its list, and its answer (the event named here) is
what the runner steps the machine with next. The runner decides nothing: every input, timeout
and deadline is in the command.

    command          the runner does                                   answered by
    ReadOrder ...... the ledger's dispatch order (local activity) .... OrderRead
    Submit ......... the submit activity, never retried .............. SubmitAnswered | SubmitFailed
    Look ........... the lookup activity ............................. LookAnswered
    ReadStream ..... the ledger's ESP event stream (local activity) .. StreamRead
    AskToCancel .... the provider cancel activity .................... ProviderCancelAnswered
    WriteRows ...... the ledger write (local activity) ............... RowsWritten
    Publish ........ the search-attribute upsert (the Web UI) ........ (nothing)
    WaitUntil ...... the one kept timer, or news first ............... WaitEnded
    Pause .......... a short timer of its own ........................ WaitEnded
    CheckHistory ... asks whether Temporal suggests continue-as-new .. HistoryChecked
    CheckPatch ..... workflow.patched(patch_id) ...................... PatchChecked
    AwaitHandlers .. waits for every running handler ................. HandlersFinished
    ContinueAsNew .. continues as new with the carried state ......... (the run ends)
    Finish ......... returns the intent's status ..................... (the run ends)
    Reply .......... the cancel update's return value ................ (nothing)
"""

from __future__ import annotations

from datetime import datetime, timedelta

from herald.core.contracts import (
    CancelAnswer,
    DispatchQuery,
    IntentStatus,
    LookupInput,
    NotificationInput,
    ProviderCancelInput,
    SubmitInput,
)
from herald.core.lifecycle import IntentState
from herald.core.machine import events
from herald.core.machine.events import Told
from herald.core.rows import LedgerBatch
from herald.core.silence import EventStreamQuery


class ReadOrder(Told):
    """Ask the send policy where the next attempt stands in its route's queue."""

    query: DispatchQuery


class Submit(Told):
    """Write the attempt's rows and send it once, on the submit queue, at the place in it the send
    policy gave (priority and fairness); still queued after ``queue_timeout``, it never starts."""

    input: SubmitInput
    queue_timeout: timedelta
    timeout: timedelta
    priority_key: int | None
    fairness_key: str
    fairness_weight: float | None


class Look(Told):
    """Ask the provider about one attempt (by its id when known, else by our reference)."""

    input: LookupInput


class ReadStream(Told):
    """Read the recorded posts of the ESP that would carry an attempt's events."""

    query: EventStreamQuery


class AskToCancel(Told):
    """Ask the provider once to drop an accepted attempt."""

    input: ProviderCancelInput


class WriteRows(Told):
    """Write decided rows to the ledger (idempotent: each row carries its own key)."""

    batch: LedgerBatch


class Publish(Told):
    """Tell the Web UI the intent's state and attempt count (search attributes)."""

    state: IntentState
    attempts: int


class WaitUntil(Told):
    """Sleep on the run's one kept timer until ``fire_at`` (a timer already running for the same
    instant is reused: each timer started is a billed action), unless news comes first: reports
    always end the wait, a cancel only when ``cancel_wakes``. ``IntentMachine.woken`` says when."""

    fire_at: datetime
    cancel_wakes: bool = True


class Pause(Told):
    """Sleep a short while on a timer of its own that nothing ends early (the kept timer is left as is)."""

    duration: timedelta


class CheckHistory(Told):
    """Ask whether Temporal suggests continuing as new."""


class CheckPatch(Told):
    """Ask whether this run takes a changed course (``workflow.patched``): a run started before the
    change replays the old commands. No course asks today (README, "Changing workflow code once
    deployed"): a change that issues other commands for a running intent asks first."""

    patch_id: str


class AwaitHandlers(Told):
    """Wait until every running signal and update handler has finished."""


class ContinueAsNew(Told):
    """Hand everything known to a fresh run (the kept timer is dropped first)."""

    input: NotificationInput


class Finish(Told):
    """The intent is closed and everything is written: the run returns its status (the kept timer is dropped first)."""

    status: IntentStatus


class Reply(Told):
    """The answer a cancel update returns."""

    answer: CancelAnswer


Command = (
    ReadOrder
    | Submit
    | Look
    | ReadStream
    | AskToCancel
    | WriteRows
    | Publish
    | WaitUntil
    | Pause
    | CheckHistory
    | CheckPatch
    | AwaitHandlers
    | ContinueAsNew
    | Finish
    | Reply
)

# Which events answer each command that is answered; the machine refuses any other.
ANSWERED_BY: dict[type, tuple[type, ...]] = {
    ReadOrder: (events.OrderRead,),
    Submit: (events.SubmitAnswered, events.SubmitFailed),
    Look: (events.LookAnswered,),
    ReadStream: (events.StreamRead,),
    AskToCancel: (events.ProviderCancelAnswered,),
    WriteRows: (events.RowsWritten,),
    WaitUntil: (events.WaitEnded,),
    Pause: (events.WaitEnded,),
    CheckHistory: (events.HistoryChecked,),
    CheckPatch: (events.PatchChecked,),
    AwaitHandlers: (events.HandlersFinished,),
}
