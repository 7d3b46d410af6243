"""NotificationWorkflow: runs one intent's machine (``herald.core.machine``) on Temporal.

It decides nothing and changes nothing itself. The machine is stepped with an event and answers
with commands; the workflow runs each (an activity or local activity through
``workflows/provider_calls.py``, the one kept timer, a search-attribute upsert, continue-as-new,
the return) and steps the machine with the answer. Handlers step it with what arrives.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from herald.core.contracts import (
        CancelAnswer,
        CancelRequest,
        IntentStatus,
        KeyConflict,
        NotificationInput,
        ReportBatch,
    )
    from herald.core.lifecycle import IntentState
    from herald.core.machine import IntentMachine
    from herald.core.machine.commands import (
        AwaitHandlers,
        CheckHistory,
        CheckPatch,
        ContinueAsNew,
        Finish,
        Pause,
        Publish,
        Reply,
        WaitUntil,
    )
    from herald.core.machine.events import (
        CancelAsked,
        Event,
        HandlersFinished,
        HistoryChecked,
        KeyConflictArrived,
        PatchChecked,
        ReportsArrived,
        Shown,
        Started,
        WaitEnded,
    )
    from herald.metrics.instruments import count_finished
    from herald.temporal.workflow_api import (
        ATTEMPTS_KEY,
        QUERY_STATUS,
        SIGNAL_DELIVERY_REPORTS,
        SIGNAL_KEY_CONFLICT,
        STATE_KEY,
        UPDATE_CANCEL,
        WORKFLOW_TYPE,
    )
    from workflows import provider_calls
    from workflows.durable_clock import DurableClock, WorkflowClock


@workflow.defn(name=WORKFLOW_TYPE)
class NotificationWorkflow:
    @workflow.init
    def __init__(self, input: NotificationInput) -> None:
        # Signals and updates delivered with the first task run before run(): all state lives here.
        self._machine = IntentMachine(input, WorkflowClock(), workflow.info().first_execution_run_id)
        self._timer = DurableClock()

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        event: Event = Started(shown=_shown())
        while True:
            for command in self._machine.step(event):
                match command:
                    case Finish(status=status):
                        self._timer.disarm()
                        # Temporal counts every normal return as a success, undelivered included:
                        # this counter says how the intent ended. The SDK records nothing during
                        # replay; only a final workflow task run again (its worker died before
                        # completing it) can count an intent twice.
                        count_finished(workflow.metric_meter(), status.state.value, status.channel)
                        return status
                    case ContinueAsNew(input=carried):
                        self._timer.disarm()
                        workflow.continue_as_new(carried)
                    case Publish(state=state, attempts=attempts):
                        workflow.upsert_search_attributes(
                            [STATE_KEY.value_set(state.value), ATTEMPTS_KEY.value_set(attempts)]
                        )
                    case WaitUntil(fire_at=fire_at):
                        event = await self._wait(fire_at)
                    case Pause(duration=duration):
                        await workflow.sleep(duration)
                        event = WaitEnded()
                    case CheckHistory():
                        event = HistoryChecked(long=workflow.info().is_continue_as_new_suggested())
                    case CheckPatch(patch_id=patch_id):
                        event = PatchChecked(patched=workflow.patched(patch_id))
                    case AwaitHandlers():
                        await workflow.wait_condition(workflow.all_handlers_finished)
                        event = HandlersFinished()
                    case _:
                        event = await provider_calls.call(command)

    async def _wait(self, fire_at: datetime) -> WaitEnded:
        """Until `fire_at` on the kept timer (a wait woken by news and resumed toward the same
        instant keeps it: each timer started is a billed action), or until the machine has news."""
        timer = self._timer.arm(fire_at)
        await workflow.wait_condition(lambda: self._machine.woken or timer.done())
        return WaitEnded()

    @workflow.signal(name=SIGNAL_DELIVERY_REPORTS)
    def delivery_reports(self, batch: ReportBatch) -> None:
        self._machine.step(ReportsArrived(batch=batch))

    @workflow.signal(name=SIGNAL_KEY_CONFLICT)
    def key_conflict(self, conflict: KeyConflict) -> None:
        self._machine.step(KeyConflictArrived(conflict=conflict))

    @workflow.update(name=UPDATE_CANCEL)
    def cancel(self, request: CancelRequest) -> CancelAnswer:
        (reply,) = self._machine.step(CancelAsked(request=request))
        assert isinstance(reply, Reply)
        return reply.answer

    @workflow.query(name=QUERY_STATUS)
    def status(self) -> IntentStatus:
        return self._machine.status()


def _shown() -> Shown | None:
    """What this run's search attributes say at its start (None: no state), as its first event
    recorded them: the client's start request, or what a continued run carried over."""
    attributes = workflow.info().typed_search_attributes
    state = attributes.get(STATE_KEY)
    if state is None:
        return None
    return Shown(state=IntentState(state), attempts=attributes.get(ATTEMPTS_KEY) or 0)
