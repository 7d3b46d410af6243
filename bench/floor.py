"""The floor: a workflow of Herald's shape with none of Herald's logic.

Shape, exactly: the client starts the workflow (1 action); one activity POSTs the message to
the emulator with a StatusCallback URL naming the workflow (1 action); the workflow waits,
with no timer, for one signal, which the bench's receipt handler (`bench.receiver`) sends
when the emulator reports the final status; the emulator's intermediate `sent` callback is
answered 200 and dropped (1 action); one activity inserts one row into PostgreSQL
(1 action); the workflow completes. Four billable actions per message.

No ledger, no state machine, no search attributes, no lookups or polls, no pydantic
converter: Temporal's default data converter and worker settings, the same sandboxed
workflow runner Herald's worker uses.

This module is imported inside the workflow sandbox, so it imports only temporalio and the
standard library; the activities (httpx, psycopg) live in `bench.floor_worker` and are
called by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

TASK_QUEUE = "bench-floor"
# The same workflow on a queue of its own whose worker's submit activity is an SMTP transaction
# (`bench.floor_email`): the e-mail bench's floor (`python -m bench.floor_worker email`).
EMAIL_TASK_QUEUE = "bench-floor-email"
WORKFLOW_NAME = "FloorWorkflow"
SUBMIT_ACTIVITY = "floor_submit"
INSERT_ACTIVITY = "floor_insert"


@dataclass
class FloorInput:
    intent_id: str
    to: str
    body: str


@dataclass
class FloorInsert:
    intent_id: str
    provider_sid: str
    status: str


@workflow.defn(name=WORKFLOW_NAME)
class FloorWorkflow:
    @workflow.init
    def __init__(self, input: FloorInput) -> None:
        # Set in __init__ so a signal that arrives with the first task is not overwritten.
        self._status: str | None = None

    @workflow.signal
    def delivered(self, status: str) -> None:
        self._status = status

    @workflow.run
    async def run(self, input: FloorInput) -> str:
        # One attempt, as Herald's submit: a retried submit is a duplicate send.
        sid = await workflow.execute_activity(
            SUBMIT_ACTIVITY,
            input,
            result_type=str,
            start_to_close_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        await workflow.wait_condition(lambda: self._status is not None)
        assert self._status is not None
        await workflow.execute_activity(
            INSERT_ACTIVITY,
            FloorInsert(input.intent_id, sid, self._status),
            start_to_close_timeout=timedelta(seconds=10),
        )
        return self._status
