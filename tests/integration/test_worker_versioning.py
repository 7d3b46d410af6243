"""Worker Versioning against a real Temporal server: a versioned worker process registers its deployment version."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.api.deployment.v1 import WorkerDeploymentVersion
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentVersionRequest
from temporalio.client import Client
from temporalio.service import RPCError

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.privacy.recipient_vault import RecipientVault
from herald.settings import WorkerVersionSettings
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from worker import build_submit_worker, build_worker


async def _version_task_queues(client: Client, deployment: str, build_id: str) -> set[tuple[str, int]]:
    """The task queues (and their kinds) the server lists under a deployment version; empty until it knows it."""
    request = DescribeWorkerDeploymentVersionRequest(
        namespace=client.namespace,
        deployment_version=WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id),
    )
    try:
        described = await client.workflow_service.describe_worker_deployment_version(request)
    except RPCError:  # NOT_FOUND until the first poll has registered the version
        return set()
    return {(queue.name, queue.type) for queue in described.version_task_queues}


async def test_a_versioned_worker_registers_both_task_queues_under_its_version(
    temporal: Client, settings: Any, pool: AsyncConnectionPool
) -> None:
    """With HERALD_WORKER_DEPLOYMENT_NAME and _BUILD_ID, the server accepts both workers' polls and lists the
    workflow queue and the submit queue under that one version."""
    deployment, build_id = f"herald-test-{secrets.token_hex(4)}", "build-1"
    task_queue = f"herald-versioned-{secrets.token_hex(4)}"
    versioned = settings.model_copy(
        update={
            "temporal": settings.temporal.model_copy(update={"task_queue": task_queue}),
            "worker_version": WorkerVersionSettings(deployment_name=deployment, build_id=build_id),
        }
    )
    provider = ProviderActivities(
        {}, settings.receipts.public_url, pool, vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING
    )
    workflow_worker = build_worker(
        temporal, versioned, LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS)), provider
    )
    submit_worker = build_submit_worker(temporal, versioned, provider)
    expected = {
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
        (submit_worker.task_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    }
    async with workflow_worker, submit_worker:
        deadline = asyncio.get_running_loop().time() + 30
        while not expected <= (found := await _version_task_queues(temporal, deployment, build_id)):
            assert asyncio.get_running_loop().time() < deadline, f"the server lists {found}, not {expected}"
            await asyncio.sleep(0.3)
