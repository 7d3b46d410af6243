"""The worker process's Temporal workers from its settings: which queues they poll (HERALD_WORKER_QUEUES),
and that all of them poll as one deployment version (Worker Versioning)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

import worker
from herald.settings import load_settings

VERSIONED = {"HERALD_WORKER_DEPLOYMENT_NAME": "herald", "HERALD_WORKER_BUILD_ID": "2026-12-01.3"}


class RecordedWorker:
    """Stands in for temporalio's Worker, which needs a connected client: keeps what it was given."""

    def __init__(self, client: Any, **options: Any) -> None:
        self.options = options


def _built(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[RecordedWorker]:
    monkeypatch.setattr(worker, "Worker", RecordedWorker)
    settings = load_settings(env)
    ledger: Any = SimpleNamespace(append_ledger=object(), dispatch_order=object(), read_event_stream=object())
    provider: Any = SimpleNamespace(lookup=object(), cancel=object(), submit=object())
    return worker.polled_workers(object(), settings, ledger, provider)  # type: ignore[arg-type, return-value]


BASE = "herald-notifications"
LANE, SUBMITS = f"{BASE}-urgent", f"{BASE}-submit"


@pytest.mark.parametrize(
    ("chosen", "queues"),
    [
        (None, [BASE, LANE, SUBMITS]),  # unset: one process polls the route's every queue
        ("all", [BASE, LANE, SUBMITS]),
        ("workflows", [BASE, LANE]),  # both workflow queues: a workflows/submits split leaves no lane unpolled
        ("submits", [SUBMITS]),
        ("urgent", [LANE]),
        ("standard", [BASE]),
        ("standard, submits", [BASE, SUBMITS]),
    ],
)
def test_each_process_polls_the_queues_it_is_given(
    monkeypatch: pytest.MonkeyPatch, chosen: str | None, queues: list[str]
) -> None:
    env = {"HERALD_TASK_QUEUE": BASE} | ({"HERALD_WORKER_QUEUES": chosen} if chosen is not None else {})
    built = _built(monkeypatch, env)
    assert [w.options["task_queue"] for w in built] == queues


def test_the_urgent_lane_runs_what_the_standard_queue_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane's worker is the workflow worker on another queue: the same workflow, the same
    activities (an urgent intent's lookups and cancels go to its own queue), slots of its own."""
    standard, lane, _ = _built(monkeypatch, {})
    assert {k: v for k, v in standard.options.items() if k != "task_queue"} == {
        k: v for k, v in lane.options.items() if k != "task_queue"
    }


def test_every_worker_polls_as_the_configured_deployment_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """HERALD_WORKER_DEPLOYMENT_NAME and _BUILD_ID become one auto-upgrade deployment config on every worker."""
    expected = WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name="herald", build_id="2026-12-01.3"),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )
    for built in _built(monkeypatch, VERSIONED):
        assert built.options["deployment_config"] == expected


def test_without_the_variables_the_workers_are_unversioned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, no deployment config reaches any worker: the behaviour before Worker Versioning."""
    for built in _built(monkeypatch, {}):
        assert built.options["deployment_config"] is None
