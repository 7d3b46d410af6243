"""History events and Temporal Cloud billable actions, counted from fetched workflow histories.

Rules applied (Temporal Cloud's published action types, as far as a history shows them):

* workflow started ............ 1 per WorkflowExecutionStarted (client start, and also the
                                 start of a run created by continue-as-new: Cloud bills a
                                 continue-as-new as a workflow start, so the ContinuedAsNew
                                 event itself is not counted again)
* activity .................... 1 per attempt: ActivityTaskScheduled counts as many actions
                                 as the attempt number its ActivityTaskStarted reports
                                 (Temporal writes one Started event, for the last attempt,
                                 so retries are visible only there); 1 if it never started
* local activities ............ 1 per workflow task that recorded any local-activity marker,
                                 however many markers it recorded
* signal ...................... 1 per WorkflowExecutionSignaled (and per external signal sent)
* timer ....................... 1 per TimerStarted
* search attributes ........... 1 per UpsertWorkflowSearchAttributes, except the SDK's own
                                 upsert of TemporalChangeVersion with a patch marker, which
                                 Cloud exempts
* memo ........................ 1 per WorkflowPropertiesModified (neither shape uses it)
* update ...................... 1 per WorkflowExecutionUpdateAccepted
* child workflow ............... 1 per StartChildWorkflowExecutionInitiated

Not visible in a history and so not counted: queries, rejected updates, activity heartbeats.
Herald's happy path issues none of them (the client's `describe` after a start is not billed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

LOCAL_ACTIVITY_MARKER = "core_local_activity"
# Upserted by the SDK with each patch marker; Temporal Cloud does not bill it.
VERSION_SEARCH_ATTRIBUTE = "TemporalChangeVersion"

_ONE_EACH = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: "signal",
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: "signal",
    EventType.EVENT_TYPE_TIMER_STARTED: "timer",
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED: "memo",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: "update",
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED: "child_workflow",
}


def billable_actions(events: Iterable[HistoryEvent]) -> Counter[str]:
    """Billable actions of one run's history, by action type."""
    actions: Counter[str] = Counter()
    scheduled: set[int] = set()
    attempts: dict[int, int] = {}
    local_activity_tasks: set[int] = set()
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            actions["workflow_started"] += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled.add(event.event_id)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = max(1, started.attempt)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                local_activity_tasks.add(marker.workflow_task_completed_event_id)
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = set(event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
            if fields != {VERSION_SEARCH_ATTRIBUTE}:
                actions["search_attributes"] += 1
        elif kind in _ONE_EACH:
            actions[_ONE_EACH[kind]] += 1
    for event_id in scheduled:
        actions["activity"] += attempts.get(event_id, 1)
    if local_activity_tasks:
        actions["local_activities"] += len(local_activity_tasks)
    return actions


def next_run_id(events: list[HistoryEvent]) -> str | None:
    """The run a continue-as-new handed over to, or None when this run really ended."""
    if events and events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        return events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return None
