"""What the intent machine asks its runner to do: one tagged union of frozen commands.

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
from typing import Annotated, Literal

from pydantic import Field

from herald.contracts import (
    CancelAnswer,
    DispatchQuery,
    IntentStatus,
    LookupInput,
    NotificationInput,
    ProviderCancelInput,
    SubmitInput,
)
from herald.ledger.records import LedgerBatch
from herald.lifecycle import IntentState
from herald.machine import events
from herald.outcomes import Frozen
from herald.silence import EventStreamQuery


class ReadOrder(Frozen):
    """Ask the send policy where the next attempt stands in its route's queue."""

    kind: Literal["read_order"] = "read_order"
    query: DispatchQuery


class Submit(Frozen):
    """Write the attempt's rows and send it once, on the submit queue, at the place in it the send
    policy gave (priority and fairness); still queued after ``queue_timeout``, it never starts."""

    kind: Literal["submit"] = "submit"
    input: SubmitInput
    queue_timeout: timedelta
    timeout: timedelta
    priority_key: int | None
    fairness_key: str
    fairness_weight: float | None


class Look(Frozen):
    """Ask the provider about one attempt (by its id when known, else by our reference)."""

    kind: Literal["look"] = "look"
    input: LookupInput


class ReadStream(Frozen):
    """Read the recorded posts of the ESP that would carry an attempt's events."""

    kind: Literal["read_stream"] = "read_stream"
    query: EventStreamQuery


class AskToCancel(Frozen):
    """Ask the provider once to drop an accepted attempt."""

    kind: Literal["ask_to_cancel"] = "ask_to_cancel"
    input: ProviderCancelInput


class WriteRows(Frozen):
    """Write decided rows to the ledger (idempotent: each row carries its own key)."""

    kind: Literal["write_rows"] = "write_rows"
    batch: LedgerBatch


class Publish(Frozen):
    """Tell the Web UI the intent's state and attempt count (search attributes)."""

    kind: Literal["publish"] = "publish"
    state: IntentState
    attempts: int


class WaitUntil(Frozen):
    """Sleep on the run's one kept timer until ``fire_at`` (a timer already running for the same
    instant is reused: each timer started is a billed action), unless news comes first: reports
    always end the wait, a cancel only when ``cancel_wakes``. ``IntentMachine.woken`` says when."""

    kind: Literal["wait_until"] = "wait_until"
    fire_at: datetime
    cancel_wakes: bool = True


class Pause(Frozen):
    """Sleep a short while on a timer of its own that nothing ends early (the kept timer is left as is)."""

    kind: Literal["pause"] = "pause"
    duration: timedelta


class CheckHistory(Frozen):
    """Ask whether Temporal suggests continuing as new."""

    kind: Literal["check_history"] = "check_history"


class CheckPatch(Frozen):
    """Ask whether this run takes a changed course (``workflow.patched``): a run started before the
    change replays the old commands. No course asks today (README, "Changing workflow code once
    deployed"): a change that issues other commands for a running intent asks first."""

    kind: Literal["check_patch"] = "check_patch"
    patch_id: str


class AwaitHandlers(Frozen):
    """Wait until every running signal and update handler has finished."""

    kind: Literal["await_handlers"] = "await_handlers"


class ContinueAsNew(Frozen):
    """Hand everything known to a fresh run (the kept timer is dropped first)."""

    kind: Literal["continue_as_new"] = "continue_as_new"
    input: NotificationInput


class Finish(Frozen):
    """The intent is closed and everything is written: the run returns its status (the kept timer is dropped first)."""

    kind: Literal["finish"] = "finish"
    status: IntentStatus


class Reply(Frozen):
    """The answer a cancel update returns."""

    kind: Literal["reply"] = "reply"
    answer: CancelAnswer


Command = Annotated[
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
    | Reply,
    Field(discriminator="kind"),
]

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
