"""Runs the real NotificationWorkflow on the time-skipping server against stand-in activities.

Workers are built as ``worker.py`` builds them (the same workflow runner, the submit activity on
its own task queue) and intents are started as ``herald.client`` starts them (id, policies,
memo, initial search attributes), from intents rendered by ``herald.intake.requests.build_intent`` at the
server's own clock: the server's time runs ahead of the wall clock once a test has skipped it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from herald.client import start_priority
from herald.core.contracts import (
    CancelAnswer,
    CancelRequest,
    DeliveryReport,
    IntentStatus,
    KeyConflict,
    NotificationInput,
    ReportBatch,
    attempt_ref,
)
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import Intent
from herald.core.outcomes import ProviderStatus
from herald.intake.requests import build_intent, parse_request
from herald.temporal.task_queues import submit_task_queue
from herald.temporal.workflow_api import (
    QUERY_STATUS,
    SIGNAL_DELIVERY_REPORTS,
    SIGNAL_KEY_CONFLICT,
    UPDATE_CANCEL,
    WORKFLOW_TYPE,
    initial_search_attributes,
)
from tests.intents import email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.workflow.standins import StandIns
from worker import WORKFLOW_RUNNER
from workflows.notification import NotificationWorkflow

# The longest any one await of a test may take in real time; a path takes a few seconds.
TIMEOUT = 30.0

# Production clocks, except a horizon of half an hour and lookups capped at two minutes, so a
# path that runs to the horizon takes tens of lookups, not hundreds. Time is skipped: the
# clocks cost nothing, but every lookup and poll is a real activity.
FAST_POLICY = DeliveryPolicy(resolution_horizon=timedelta(minutes=30), lookup_max=timedelta(minutes=2))

# Memo key herald.client records the intent's fingerprint under.
_FINGERPRINT_MEMO = "intent_fingerprint"


async def server_now(env: WorkflowEnvironment) -> datetime:
    return await env.get_current_time()


def sms_intent(now: datetime, **overrides: Any) -> Intent:
    """An order-receipt SMS intent, rendered at the server's `now`, for a fresh key and number."""
    return build_intent(
        parse_request(receipt_request(fresh_key(), fresh_recipient(), **overrides)), now, SESSION_KEYRING
    )


def email_intent(now: datetime, **overrides: Any) -> Intent:
    """An order-receipt e-mail intent, rendered at the server's `now`, for a fresh key and address."""
    return build_intent(parse_request(email_request(fresh_key(), fresh_address(), **overrides)), now, SESSION_KEYRING)


class Running:
    """One intent's workflow on the test server, its stand-ins, and the calls a service makes."""

    def __init__(
        self, env: WorkflowEnvironment, handle: WorkflowHandle[Any, IntentStatus], intent: Intent, standins: StandIns
    ) -> None:
        self.env = env
        self.handle = handle
        self.intent = intent
        self.standins = standins

    def attempt_ref(self, number: int = 1) -> str:
        return attempt_ref(self.intent.workflow_id, number)

    async def result(self) -> IntentStatus:
        """Wait for the intent's end; the server skips time while this waits."""
        return await asyncio.wait_for(self.handle.result(), TIMEOUT)

    async def status(self) -> IntentStatus:
        return await asyncio.wait_for(self.handle.query(QUERY_STATUS, result_type=IntentStatus), TIMEOUT)

    async def report(
        self,
        status: ProviderStatus,
        *,
        provider_id: str,
        inbox_id: int,
        attempt: int = 1,
        error_code: int | None = None,
        failure_retryable: bool = False,
    ) -> None:
        """Signal one stored report, as the receipt server does after its inbox row committed."""
        now = await server_now(self.env)
        report = DeliveryReport(
            inbox_id=inbox_id,
            attempt_ref=self.attempt_ref(attempt),
            provider_id=provider_id,
            status=status,
            error_code=error_code,
            provider_event_at=now,
            received_at=now,
            failure_retryable=failure_retryable,
        )
        await asyncio.wait_for(self.handle.signal(SIGNAL_DELIVERY_REPORTS, ReportBatch(reports=[report])), TIMEOUT)

    async def cancel(self, reason: str = "order refunded", operator: str = "ops@example") -> CancelAnswer:
        request = CancelRequest(reason=reason, operator=operator)
        return await asyncio.wait_for(
            self.handle.execute_update(UPDATE_CANCEL, request, result_type=CancelAnswer), TIMEOUT
        )

    async def key_conflict(self, fingerprint: str) -> None:
        conflict = KeyConflict(intent_fingerprint=fingerprint, observed_at=await server_now(self.env))
        await asyncio.wait_for(self.handle.signal(SIGNAL_KEY_CONFLICT, conflict), TIMEOUT)


def notification_input(intent: Intent, policy: DeliveryPolicy) -> NotificationInput:
    return NotificationInput(intent=intent, policy=policy)


@asynccontextmanager
async def running(
    env: WorkflowEnvironment, standins: StandIns, intent: Intent, policy: DeliveryPolicy = FAST_POLICY
) -> AsyncIterator[Running]:
    """Workers on a fresh task queue (and its submit queue) and the intent started on it."""
    task_queue = f"workflow-fast-{secrets.token_hex(4)}"
    workflows = Worker(
        env.client,
        task_queue=task_queue,
        workflows=[NotificationWorkflow],
        workflow_runner=WORKFLOW_RUNNER,
        activities=standins.workflow_activities(),
    )
    submits = Worker(env.client, task_queue=submit_task_queue(task_queue), activities=standins.submit_activities())
    async with workflows, submits:
        handle = await asyncio.wait_for(
            env.client.start_workflow(
                WORKFLOW_TYPE,
                notification_input(intent, policy),
                result_type=IntentStatus,
                id=intent.workflow_id,
                task_queue=task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                memo={_FINGERPRINT_MEMO: intent.intent_fingerprint},
                search_attributes=initial_search_attributes(
                    f"{intent.template_id}.v{intent.template_version}", intent.message.channel.value
                ),
                priority=start_priority(intent),
            ),
            TIMEOUT,
        )
        try:
            yield Running(env, handle, intent, standins)
        finally:
            # A run left open (a failed test) would hold the server's clock for every later test:
            # the time-skipping server stops skipping while a workflow task waits for a worker.
            try:
                await asyncio.wait_for(handle.terminate(reason="test over"), TIMEOUT)
            except RPCError:
                pass  # closed already, as it should be


async def skip_until(
    env: WorkflowEnvironment, done: Callable[[], Awaitable[bool]], step: timedelta, most: int = 60
) -> None:
    """Skip the server's time `step` at a time until `done()` (at most `most` steps); time stands
    still in between, so a test can act on what it sees (signal a report, say) before anything else happens."""
    for _ in range(most):
        if await done():
            return
        await asyncio.wait_for(env.sleep(step), TIMEOUT)
    assert await done(), f"still waiting after {most} steps of {step}"
