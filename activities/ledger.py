"""Ledger activities, run as local activities: idempotent writes, retried freely."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool
from temporalio import activity

from herald.contracts import DispatchQuery
from herald.ledger import event_streams, policy_store, store
from herald.ledger.group_commit import GroupCommit
from herald.ledger.records import IntentRecorded, LedgerBatch
from herald.recipient_vault import RecipientVault
from herald.send_policy import DispatchOrder, dispatch_order
from herald.silence import EventStream, EventStreamQuery

_ORDER_CONNECT_SECONDS = 1.0


class LedgerActivities:
    def __init__(self, pool: AsyncConnectionPool, vault: RecipientVault) -> None:
        self._pool = pool
        # The intent row is recorded in plaintext (the ledger's copy is what erasure overwrites).
        self._vault = vault
        # Checkpoints of many workflows finishing at once share a transaction (group commit).
        self._checkpoints: GroupCommit[LedgerBatch, None] = GroupCommit(pool, store.write_checkpoints)

    @activity.defn(name="append_ledger")
    async def append_ledger(self, batch: LedgerBatch) -> IntentRecorded | None:
        """Append the workflow's unwritten rows (and its intent row, on its first write)."""
        batch = await self._vault.open_batch(batch)
        if batch.record is None and not batch.is_empty():
            return await self._checkpoints.write(batch)
        return await store.write_batch(self._pool, batch)

    @activity.defn(name="read_event_stream")
    async def read_event_stream(self, query: EventStreamQuery) -> EventStream:
        """What the ledger recorded of the event stream that would carry one attempt's events."""
        return await event_streams.read(self._pool, query)

    @activity.defn(name="dispatch_order")
    async def dispatch_order(self, query: DispatchQuery) -> DispatchOrder:
        """The priority and fairness of an attempt prepared at `query.at`, under the policy in force then."""
        # Fails fast with the ledger away: the workflow then goes at the built-in priorities, and its
        # submit meets the outage where it is handled (it writes nothing, sends nothing, and waits).
        async with self._pool.connection(timeout=_ORDER_CONNECT_SECONDS) as conn:
            version, rules = await policy_store.policy_in_force(conn, query.at)
        return dispatch_order(rules, version, query.category, query.tenant, query.requested)
