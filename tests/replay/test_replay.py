"""Replays every committed history against today's NotificationWorkflow.

A workflow change that alters the command sequence of running workflows fails here; gate such a
change with `workflow.patched()` and record the new paths beside the old ones (README, "Changing
workflow code once deployed"). The histories were recorded by one rule set, the only one Herald
has shipped; tests/faults/test_deploy_replay.py shows a patched change replaying them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from herald.settings import TemporalSettings
from herald.temporal.client import data_converter
from worker import WORKFLOW_RUNNER
from workflows.notification import NotificationWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_is_a_history_for_every_path() -> None:
    """The committed histories cover the workflow's paths (a replay test over nothing proves nothing)."""
    names = {path.name.split(".")[0] for path in HISTORIES}
    assert {
        "delivered_by_report",
        "unknown_submit_resolved_by_report",
        "unknown_submit_found_by_reference",
        "retry_after_proven_absence",
        "retry_after_429",
        "permanent_rejection",
        "undelivered_permanent_code",
        "delivered_by_poll",
        "unknown_at_horizon_continued_as_new",
        "cancel_racing_accepted_submit",
        "expired_while_deferred",
        "cancelled_while_deferred",
        "queued_message_found_by_reference",
        "delivered_by_last_lookup_at_horizon",
        "unknown_after_last_lookup_at_horizon",
        "late_report_settles_during_backoff",
        # The e-mail channel's paths (recorded with it): relay answers, events, the silence rule.
        "email_delivered_by_event",
        "email_unknown_submit_resolved_by_event",
        "email_resent_after_the_stream_passed",
        "email_unknown_submit_while_stream_silent",
        "email_retry_after_451",
        "email_permanent_550",
        "email_bounced",
        "email_unknown_at_horizon_without_events",
        "email_report_with_attachment",
        "email_relayed_without_events",
        # Started with no state shown: the straight delivery that upserts nothing, and one that shows its state.
        "delivered_straight_no_state_shown",
        "found_by_reference_state_shown",
    } <= names


def test_a_straight_delivery_started_without_a_state_upserts_nothing() -> None:
    """The history a straight delivery writes since the start request sets no state has no
    search-attribute upsert and no HeraldState at its start; one whose answer was lost upserts
    before its checkpointed wait and at its close, so a closed run with no state shown is a delivered one."""

    def events(name: str) -> list[dict]:
        return json.loads((Path(__file__).parent / "histories" / f"{name}.json").read_text())["events"]

    def upserts(name: str) -> int:
        return sum(e["eventType"] == "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES" for e in events(name))

    straight = events("delivered_straight_no_state_shown")
    started = straight[0]["workflowExecutionStartedEventAttributes"]
    assert "HeraldState" not in started.get("searchAttributes", {}).get("indexedFields", {})
    assert upserts("delivered_straight_no_state_shown") == 0
    assert upserts("found_by_reference_state_shown") >= 2  # submitting before the lookup's wait, delivered at the close


def test_no_history_carries_a_patch_marker() -> None:
    """Every committed history was recorded by today's rules: no path depends on a retired
    ``workflow.patched()`` branch (a marker here would mean a gate whose old side was deleted)."""
    for path in HISTORIES:
        markers = [
            event for event in json.loads(path.read_text())["events"]
            if event.get("markerRecordedEventAttributes", {}).get("markerName") == "core_patch"
        ]  # fmt: skip
        assert markers == [], path.name


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    """A committed history of this path replays against the current workflow code without a determinism error."""
    history = WorkflowHistory.from_json(f"replay-{path.stem}", json.loads(path.read_text()))
    # Herald's converter, as the worker has it (the histories are stored decoded: no codec keys).
    replayer = Replayer(
        workflows=[NotificationWorkflow],
        data_converter=data_converter(TemporalSettings()),
        workflow_runner=WORKFLOW_RUNNER,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
