"""Removing intents' workflow executions from Temporal, every run, for an erasure (``starter.py erase``).

An intent's history holds its recipient and body: the workflow input (``NotificationInput`` and
its ``Intent``), activity inputs, the input of every run after a continue-as-new. The payload
codec encrypts them, but whoever holds a codec key (the codec server, an operator) reads them, so
an erasure deletes the executions themselves.

    close ....... a running intent is asked to cancel through its own ``cancel`` update (as
                  ``starter.py cancel`` does), never terminated: an intent killed mid-submit would
                  leave an attempt nobody resolves and a ledger row that never closes. It closes
                  as cancelled when it can; with an attempt already at the provider it keeps
                  tracking that attempt to its outcome first. It is given ``close_within``.
    delete ...... every closed run of the workflow id (continue-as-new makes several), each by
                  run id with WorkflowService ``DeleteWorkflowExecution``. Never a running run:
                  the server terminates a running execution it is asked to delete.
    verify ...... deletion is asynchronous on the server (for a run that closed a moment ago,
                  about half a minute: see VERIFY_WITHIN): each deleted run is polled, within
                  ``verify_within``, until describe and history both answer NotFound and the
                  visibility store no longer lists it.

What ``DeleteWorkflowExecution`` removes (Temporal API: "asynchronously deletes a specific Workflow
Execution (when run_id is provided) ... If the Workflow Execution is Running, it will be terminated
before deletion"): the execution's mutable state, its event history and its visibility record. In a
global namespace it removes them from every replica. It cannot reach copies outside the cluster:
with archival enabled on the namespace, closed histories and visibility records are copied to the
archive store soon after close (visibility at once, history after a delay of up to minutes), and
nothing here deletes them; ``archival_enabled`` says when that applies. Nor does it reach what a
codec server, a log or an exported history already showed someone.

An intent still running when the bound passes is reported, neither deleted nor terminated; the
operator runs the erasure again once it has closed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ArchivalState
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest, DescribeNamespaceRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from herald.core.contracts import CancelAnswer, CancelRequest
from herald.core.outcomes import Frozen
from herald.temporal.workflow_api import UPDATE_CANCEL

# How long a running intent is given to close after its cancel: a pending intent closes in well
# under a second; one tracking an accepted attempt may need its whole resolution horizon.
CLOSE_WITHIN = timedelta(seconds=30)
# How long the server is given to carry out deletions. Measured on the dev server: a run closed 40 s
# or more before is gone (describe, history, visibility) within 30 ms of the request; a run closed
# just now only 25-32 s after its close (the server defers the deletion until the execution's close
# tasks are done), which is the case of an intent this erasure has just cancelled.
VERIFY_WITHIN = timedelta(seconds=60)
POLL_SECONDS = 0.2
# Workflow ids erased at once: each costs a few RPCs, an erasure names a handful.
CONCURRENCY = 8
# What a visibility query can hold between double quotes without escaping, and every id Herald
# makes (`<business key>/<channel>`) fits.
_QUOTABLE_ID = re.compile(r"[A-Za-z0-9_.:/-]{1,400}")


class RunRef(Frozen):
    workflow_id: str
    run_id: str


class ExecutionErasure(Frozen):
    """What one erasure did in Temporal."""

    # Running when found: Herald's cancel was requested (never a terminate).
    cancel_requested: tuple[str, ...]
    # Deleted and verified gone: describe and history answer NotFound, visibility lists nothing.
    deleted: tuple[RunRef, ...]
    # Deletion requested, but the run still answered when `verify_within` ran out.
    unverified: tuple[RunRef, ...]
    # Still running after `close_within`: not deleted, not terminated; erase again later.
    still_running: tuple[str, ...]
    # The namespace archives histories or visibility records: copies there are out of reach.
    archival_enabled: bool

    @property
    def complete(self) -> bool:
        return not self.still_running and not self.unverified


class _Erased(Frozen):
    cancel_requested: bool
    deleted: tuple[RunRef, ...]
    unverified: tuple[RunRef, ...]
    still_running: bool


async def erase_executions(
    client: Client,
    workflow_ids: Sequence[str],
    *,
    operator: str,
    reason: str,
    close_within: timedelta = CLOSE_WITHIN,
    verify_within: timedelta = VERIFY_WITHIN,
) -> ExecutionErasure:
    """Remove every run of each workflow from Temporal; a running one is cancelled first, never
    terminated, and reported if it has not closed within `close_within` (see the module).

    `operator` and `reason` go into the cancel request, so the intent records who closed it and why.
    Raises ValueError for an id no visibility query can quote (Herald makes none).
    """
    for workflow_id in workflow_ids:
        if not _QUOTABLE_ID.fullmatch(workflow_id):
            raise ValueError("workflow_ids: an id must be letters, digits and _ . : / - (as Herald's are)")
    request = CancelRequest(reason=f"erasure: {reason}"[:500], operator=operator)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(workflow_id: str) -> _Erased:
        async with gate:
            return await _erase_one(client, workflow_id, request, close_within, verify_within)

    unique = sorted(set(workflow_ids))
    done = await asyncio.gather(*(one(workflow_id) for workflow_id in unique))
    return ExecutionErasure(
        cancel_requested=tuple(wid for wid, erased in zip(unique, done) if erased.cancel_requested),
        deleted=tuple(run for erased in done for run in erased.deleted),
        unverified=tuple(run for erased in done for run in erased.unverified),
        still_running=tuple(wid for wid, erased in zip(unique, done) if erased.still_running),
        archival_enabled=await _archival_enabled(client),
    )


async def _erase_one(
    client: Client, workflow_id: str, request: CancelRequest, close_within: timedelta, verify_within: timedelta
) -> _Erased:
    close_by = time.monotonic() + close_within.total_seconds()
    asked = await _status(client, workflow_id) is WorkflowExecutionStatus.RUNNING
    if asked:
        await _ask_to_cancel(client, workflow_id, request, close_by)
        while await _status(client, workflow_id) is WorkflowExecutionStatus.RUNNING and time.monotonic() < close_by:
            await asyncio.sleep(POLL_SECONDS)
    runs = await _runs(client, workflow_id)
    closed = [run_id for run_id, status in runs.items() if status is not WorkflowExecutionStatus.RUNNING]
    for run_id in closed:
        await _delete(client, workflow_id, run_id)
    gone, lingering = await _verify_gone(client, workflow_id, closed, time.monotonic() + verify_within.total_seconds())
    return _Erased(
        cancel_requested=asked,
        deleted=tuple(RunRef(workflow_id=workflow_id, run_id=run_id) for run_id in gone),
        unverified=tuple(RunRef(workflow_id=workflow_id, run_id=run_id) for run_id in lingering),
        still_running=WorkflowExecutionStatus.RUNNING in runs.values(),
    )


async def _ask_to_cancel(client: Client, workflow_id: str, request: CancelRequest, close_by: float) -> None:
    """Herald's own cancel, bounded by the close deadline. Whatever the intent answers (cancelled;
    already closed; cancelled but tracking an accepted attempt first), the caller then waits for
    the run to close. An intent that closed meanwhile refuses the update (NotFound, or a failed
    precondition): that is what was wanted. Without a worker the update is never taken; the wait
    gives up at the deadline, and the intent is reported as still running.
    """
    handle = client.get_workflow_handle(workflow_id)
    try:
        await asyncio.wait_for(
            handle.execute_update(UPDATE_CANCEL, request, result_type=CancelAnswer),
            timeout=max(close_by - time.monotonic(), 0.1),
        )
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError, WorkflowUpdateFailedError):
        pass  # the run's status, read next, is the answer that counts
    except RPCError as error:
        if error.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
            raise


async def _status(client: Client, workflow_id: str, run_id: str | None = None) -> WorkflowExecutionStatus | None:
    """The run's status from its mutable state (the latest run without `run_id`); None: not found."""
    try:
        described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.status


async def _runs(client: Client, workflow_id: str) -> dict[str, WorkflowExecutionStatus]:
    """Every run of the workflow id the server still holds, with its status from describe.

    Visibility lists the runs (every run of a continue-as-new chain, and any earlier chain under
    the same id); it is eventually consistent, so the latest run is added from describe, and each
    listed run's status is read from describe too (a just-closed run may still be listed running).
    """
    run_ids = [execution.run_id async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"')]
    try:
        run_ids.append((await client.get_workflow_handle(workflow_id).describe()).run_id)
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise
    statuses: dict[str, WorkflowExecutionStatus] = {}
    for run_id in dict.fromkeys(run_ids):
        status = await _status(client, workflow_id, run_id)
        # A listed run describe no longer finds is being deleted already: verified with the rest.
        statuses[run_id] = status if status is not None else WorkflowExecutionStatus.COMPLETED
    return statuses


async def _delete(client: Client, workflow_id: str, run_id: str) -> None:
    """Ask the server to delete one closed run; a run already gone is already what was asked."""
    try:
        await client.workflow_service.delete_workflow_execution(
            DeleteWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            )
        )
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise


async def _verify_gone(
    client: Client, workflow_id: str, run_ids: list[str], deadline: float
) -> tuple[list[str], list[str]]:
    """Poll until each run is gone from mutable state, history and visibility, or the deadline
    passes; (gone, still answering)."""
    waiting = list(run_ids)
    gone: list[str] = []
    while waiting:
        listed = {execution.run_id async for execution in client.list_workflows(f'WorkflowId = "{workflow_id}"')}
        for run_id in list(waiting):
            if run_id not in listed and await _history_gone(client, workflow_id, run_id):
                waiting.remove(run_id)
                gone.append(run_id)
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    return gone, waiting


async def _history_gone(client: Client, workflow_id: str, run_id: str) -> bool:
    if await _status(client, workflow_id, run_id) is not None:
        return False
    try:
        # skip_archival: this asks what the cluster still holds; an archive is out of reach (module).
        await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history(skip_archival=True)
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            return True
        raise
    return False


async def _archival_enabled(client: Client) -> bool:
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
    config = described.config
    return ArchivalState.ARCHIVAL_STATE_ENABLED in (config.history_archival_state, config.visibility_archival_state)
