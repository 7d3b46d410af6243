"""Checkpoints: the ledger and the Web UI catch up with what the workflow knows.

A checkpoint writes the buffered ledger rows in one local activity, then publishes the state and
attempt count as search attributes, only when they changed (one upsert). The workflow decides when
(before a long wait, at its close, before continuing as new); this module only does it.
Deterministic code only.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from herald.contracts import CarriedState
    from herald.lifecycle import IntentState
    from herald.machine import IntentMachine
    from herald.workflow_api import ATTEMPTS_KEY, STATE_KEY
    from workflows import provider_calls


class Checkpoints:
    def __init__(self, machine: IntentMachine, carried: CarriedState | None) -> None:
        self._machine = machine
        # What the Web UI's search attributes say now: set by the client's start request, or
        # carried over by continue-as-new (search attributes carry over with the run).
        self._published = (carried.state, len(carried.attempts)) if carried else (IntentState.PENDING, 0)

    async def checkpoint(self) -> None:
        """Write the buffered rows, then tell the Web UI the state if it changed (one upsert)."""
        await self._flush()
        published = (self._machine.state, len(self._machine.attempts))
        if published != self._published:
            workflow.upsert_search_attributes(
                [STATE_KEY.value_set(published[0].value), ATTEMPTS_KEY.value_set(published[1])]
            )
            self._published = published

    async def _flush(self) -> None:
        batch = self._machine.rows_to_write()
        if batch is None:
            return
        if self._machine.rows_written(batch, await provider_calls.append_ledger(batch)):
            await self._flush()
