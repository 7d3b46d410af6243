"""What the intent machine is told: one union of frozen events, each named for what happened.

Two kinds come in. Answers: the event that answers the command the machine is waiting on (the
table in ``herald.core.machine.commands`` says which answers which); the machine refuses any other.
Arrivals: a handler's news, at any moment, even before ``Started`` (Temporal runs the handlers of
a run's first task before its main loop): reports, a refused key reuse, a cancel.
"""

from __future__ import annotations

from herald.core.contracts import CancelRequest, KeyConflict, ReportBatch, SubmitStep
from herald.core.lifecycle import IntentState
from herald.core.outcomes import Frozen, LookupOutcome
from herald.core.rows import IntentRecorded
from herald.core.send_policy import DispatchOrder
from herald.core.silence import EventStream


class Told(Frozen):
    """An event, or a command (``herald.core.machine.commands``): in-process only, told apart by
    its class (``match``, ``isinstance``); ``kind`` is the class's name as messages print it."""

    @property
    def kind(self) -> str:
        """``OrderRead`` -> ``order_read``."""
        name = type(self).__name__
        return "".join(f"_{letter.lower()}" if letter.isupper() else letter for letter in name).lstrip("_")


class Shown(Frozen):
    """What the run's search attributes say for the Web UI: the state and the attempt count."""

    state: IntentState
    attempts: int


class Started(Told):
    """The run began: the machine starts (or, after continue-as-new, resumes) its course.

    ``shown`` is what the run's search attributes say at its start: what a continued run carried
    over, the client's `pending` for a run started before the start request stopped setting it,
    None for a run started without a state (then a straight delivery closes without saying one).
    """

    shown: Shown | None = Shown(state=IntentState.PENDING, attempts=0)


class OrderRead(Told):
    """The send policy's place for the next attempt; None when it could not be read (``failure``
    says why), and the attempt goes at the built-in order."""

    order: DispatchOrder | None
    failure: str | None = None


class SubmitAnswered(Told):
    """The submit activity finished and said what it did (``herald.core.contracts.SubmitStep``)."""

    step: SubmitStep


class SubmitFailed(Told):
    """The submit activity did not finish (its worker died, it timed out: the provider may have the
    message), or never started (still queued at the intent's expiry: nothing was written or sent)."""

    failure: str
    never_started: bool = False


class LookAnswered(Told):
    """What the provider said about the attempt asked about (Unavailable when the lookup could not run)."""

    outcome: LookupOutcome


class StreamRead(Told):
    """The ESP's recorded event stream around the attempt, read from the ledger."""

    stream: EventStream


class ProviderCancelAnswered(Told):
    """Whether the provider dropped the accepted attempt it was asked to drop, and why."""

    canceled: bool
    reason: str


class RowsWritten(Told):
    """The rows were committed; ``recorded`` is the ledger's own record of the key when it already
    held it from a run Temporal no longer knows (the intent row was not this run's)."""

    recorded: IntentRecorded | None = None


class WaitEnded(Told):
    """A wait or a pause is over: its time came, or news the machine must judge arrived first."""


class HistoryChecked(Told):
    """Whether Temporal suggests continuing as new (the run's history is long)."""

    long: bool


class PatchChecked(Told):
    """Whether this run takes the changed course the machine asked about."""

    patched: bool


class HandlersFinished(Told):
    """Every signal and update handler of the run has finished."""


class ReportsArrived(Told):
    """Stored delivery reports of one attempt (the receipt server signals them after its inbox commit)."""

    batch: ReportBatch


class KeyConflictArrived(Told):
    """A client reused this intent's key with another payload, and was refused."""

    conflict: KeyConflict


class CancelAsked(Told):
    """An operator asks to cancel the intent; answered at once, by an ``Answer`` command."""

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
Event = Started | Answer | Arrival
