"""Worker Versioning from settings: both of the worker process's Temporal workers poll as one deployment version."""

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
    return [
        worker.build_worker(object(), settings, ledger, provider),  # type: ignore[list-item]
        worker.build_submit_worker(object(), settings, provider),  # type: ignore[list-item]
    ]


def test_both_workers_poll_as_the_configured_deployment_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """HERALD_WORKER_DEPLOYMENT_NAME and _BUILD_ID become one auto-upgrade deployment config on both workers."""
    expected = WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name="herald", build_id="2026-12-01.3"),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )
    for built in _built(monkeypatch, VERSIONED):
        assert built.options["deployment_config"] == expected


def test_without_the_variables_the_workers_are_unversioned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, no deployment config reaches either worker: the behaviour before Worker Versioning."""
    for built in _built(monkeypatch, {}):
        assert built.options["deployment_config"] is None
