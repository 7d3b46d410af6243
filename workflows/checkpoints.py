"""Checkpoints: the ledger and the Web UI catch up with what the workflow knows.

A checkpoint writes the buffered ledger rows in one local activity, then publishes the state and
attempt count as search attributes, only when they changed (one upsert). The workflow decides when
(before a long wait, at its close, before continuing as new); this module only does it.
Deterministic code only.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from herald.lifecycle import IntentState
    from herald.workflow_api import ATTEMPTS_KEY, STATE_KEY
    from workflows import provider_calls
    from workflows.intent_record import IntentRecord


class Checkpoints:
    def __init__(self, record: IntentRecord, published: tuple[IntentState, int] = (IntentState.PENDING, 0)) -> None:
        self._record = record
        # What the Web UI's search attributes say now: set by the client's start request, or
        # carried over by continue-as-new (search attributes carry over with the run).
        self._published = published

    async def checkpoint(self) -> None:
        """Write the buffered rows, then tell the Web UI the state if it changed (one upsert)."""
        await self._flush()
        published = (self._record.state, len(self._record.attempts))
        if published != self._published:
            workflow.upsert_search_attributes(
                [STATE_KEY.value_set(published[0].value), ATTEMPTS_KEY.value_set(published[1])]
            )
            self._published = published

    async def _flush(self) -> None:
        batch = self._record.ledger.take()
        if not (batch.attempts or batch.transitions or batch.observations or batch.receipt_outcomes):
            # Only the intent row is pending: it is written with the first real rows.
            return
        recorded = await provider_calls.append_ledger(batch)
        if batch.record is None:
            return
        self._record.ledger.intent_recorded = True
        if recorded is not None and recorded.first_run_id != batch.record.run_id:
            self._record.suppress(recorded)
            await self._flush()
