"""What the intent machine is told: one tagged union of frozen events, each named for what happened.

Two kinds come in. Answers: the event that answers the command the machine is waiting on (the
table in ``herald.machine.commands`` says which answers which); the machine refuses any other.
Arrivals: a handler's news, at any moment, even before ``Started`` (Temporal runs the handlers of
a run's first task before its main loop): reports, a refused key reuse, a cancel.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from herald.contracts import CancelRequest, KeyConflict, ReportBatch, SubmitStep
from herald.ledger.records import IntentRecorded
from herald.outcomes import Frozen, LookupOutcome
from herald.send_policy import DispatchOrder
from herald.silence import EventStream


class Started(Frozen):
    """The run began: the machine starts (or, after continue-as-new, resumes) its course."""

    kind: Literal["started"] = "started"


class OrderRead(Frozen):
    """The send policy's place for the next attempt; None when it could not be read (``failure``
    says why), and the attempt goes at the built-in order."""

    kind: Literal["order_read"] = "order_read"
    order: DispatchOrder | None
    failure: str | None = None


class SubmitAnswered(Frozen):
    """The submit activity finished and said what it did (``herald.contracts.SubmitStep``)."""

    kind: Literal["submit_answered"] = "submit_answered"
    step: SubmitStep


class SubmitFailed(Frozen):
    """The submit activity did not finish (its worker died, it timed out: the provider may have the
    message), or never started (still queued at the intent's expiry: nothing was written or sent)."""

    kind: Literal["submit_failed"] = "submit_failed"
    failure: str
    never_started: bool = False


class LookAnswered(Frozen):
    """What the provider said about the attempt asked about (Unavailable when the lookup could not run)."""

    kind: Literal["look_answered"] = "look_answered"
    outcome: LookupOutcome


class StreamRead(Frozen):
    """The ESP's recorded event stream around the attempt, read from the ledger."""

    kind: Literal["stream_read"] = "stream_read"
    stream: EventStream


class ProviderCancelAnswered(Frozen):
    """Whether the provider dropped the accepted attempt it was asked to drop, and why."""

    kind: Literal["provider_cancel_answered"] = "provider_cancel_answered"
    canceled: bool
    reason: str


class RowsWritten(Frozen):
    """The rows were committed; ``recorded`` is the ledger's own record of the key when it already
    held it from a run Temporal no longer knows (the intent row was not this run's)."""

    kind: Literal["rows_written"] = "rows_written"
    recorded: IntentRecorded | None = None


class WaitEnded(Frozen):
    """A wait or a pause is over: its time came, or news the machine must judge arrived first."""

    kind: Literal["wait_ended"] = "wait_ended"


class HistoryChecked(Frozen):
    """Whether Temporal suggests continuing as new (the run's history is long)."""

    kind: Literal["history_checked"] = "history_checked"
    long: bool


class PatchChecked(Frozen):
    """Whether this run takes the changed course the machine asked about."""

    kind: Literal["patch_checked"] = "patch_checked"
    patched: bool


class HandlersFinished(Frozen):
    """Every signal and update handler of the run has finished."""

    kind: Literal["handlers_finished"] = "handlers_finished"


class ReportsArrived(Frozen):
    """Stored delivery reports of one attempt (the receipt server signals them after its inbox commit)."""

    kind: Literal["reports_arrived"] = "reports_arrived"
    batch: ReportBatch


class KeyConflictArrived(Frozen):
    """A client reused this intent's key with another payload, and was refused."""

    kind: Literal["key_conflict_arrived"] = "key_conflict_arrived"
    conflict: KeyConflict


class CancelAsked(Frozen):
    """An operator asks to cancel the intent; answered at once, by an ``Answer`` command."""

    kind: Literal["cancel_asked"] = "cancel_asked"
    request: CancelRequest


Answer = (
    OrderRead
    | SubmitAnswered
    | SubmitFailed
    | LookAnswered
    | StreamRead
    | ProviderCancelAnswered
    | RowsWritten
    | WaitEnded
    | HistoryChecked
    | PatchChecked
    | HandlersFinished
)
Arrival = ReportsArrived | KeyConflictArrived | CancelAsked
Event = Annotated[Started | Answer | Arrival, Field(discriminator="kind")]
