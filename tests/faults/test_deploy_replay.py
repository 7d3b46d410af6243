"""Scenario 10 of the fault matrix: a worker deploy that changes workflow code, judged by replay.

The same committed histories that running workflows produced are replayed against two
changed versions of the workflow: one that adds a command without `workflow.patched()`
(a deploy that would break every running intent) and one that gates it (safe).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

with workflow.unsafe.imports_passed_through():
    # The sandbox re-imports this module; the models must be the very classes the workflow uses.
    from herald.core.contracts import IntentStatus, NotificationInput
    from herald.core.machine.commands import CheckPatch, Pause
    from herald.core.machine.course import Course, Steps
    from herald.core.machine.events import PatchChecked
    from herald.settings import TemporalSettings
    from herald.temporal.client import data_converter
    from workflows.notification import NotificationWorkflow

HISTORIES = sorted((Path(__file__).parents[1] / "replay" / "histories").glob("*.json"))
# Histories whose run reached a dispatch: the changed code path runs in them.
DISPATCHED = [path for path in HISTORIES if "deferred" not in path.name and ".run2" not in path.name]
PAUSE = Pause(duration=timedelta(milliseconds=100))


class PausingCourse(Course):
    """A new release's course: it pauses before each dispatch, shipped without a patch gate."""

    def _dispatch(self) -> Steps[None]:
        yield PAUSE
        yield from super()._dispatch()


class GatedCourse(Course):
    """The same release, gated: running workflows keep their old command sequence."""

    def _dispatch(self) -> Steps[None]:
        checked = yield CheckPatch(patch_id="pause-before-dispatch")
        assert isinstance(checked, PatchChecked)
        if checked.patched:
            yield PAUSE
        yield from super()._dispatch()


@workflow.defn(name="NotificationWorkflow")
class UnpatchedDeploy(NotificationWorkflow):
    """The workflow of the unpatched release: its machine runs the pausing course."""

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        self._machine._course = PausingCourse(self._machine._rules)  # the release's change
        return await super().run(input)


@workflow.defn(name="NotificationWorkflow")
class PatchedDeploy(NotificationWorkflow):
    """The workflow of the gated release."""

    @workflow.run
    async def run(self, input: NotificationInput) -> IntentStatus:
        self._machine._course = GatedCourse(self._machine._rules)  # the release's change
        return await super().run(input)


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", json.loads(path.read_text()))


def test_the_changed_path_is_covered() -> None:
    """Enough committed histories reach a dispatch for the verdicts below to mean something."""
    assert len(DISPATCHED) >= 8


@pytest.mark.parametrize("path", DISPATCHED, ids=[path.stem for path in DISPATCHED])
async def test_unpatched_change_fails_replay(path: Path) -> None:
    """Replaying a committed history against the unpatched change fails with a nondeterminism error."""
    replayer = Replayer(workflows=[UnpatchedDeploy], data_converter=data_converter(TemporalSettings()))
    result = await replayer.replay_workflow(_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_patched_change_replays(path: Path) -> None:
    """Replaying every committed history against the patched change succeeds."""
    replayer = Replayer(workflows=[PatchedDeploy], data_converter=data_converter(TemporalSettings()))
    result = await replayer.replay_workflow(_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
