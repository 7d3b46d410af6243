"""One intent's history as the ledger holds it, for operators: typed rows, in order.

``starter.py status --channel`` prints it; tests read a run's transitions and observations through
it. Read-only: what the ledger recorded, never a judgement made again here.
"""

from __future__ import annotations

from datetime import datetime

from psycopg.rows import class_row
from psycopg_pool import AsyncConnectionPool

from herald.core.contracts import IntentHeader
from herald.core.outcomes import Frozen


class RecordedAttempt(Frozen):
    number: int
    attempt_ref: str
    prepared_at: datetime
    provider: str | None  # None: recorded before the provider was named (migration 004)
    # The send policy version that admitted it, and why the route chose its provider (migration 021;
    # None before it, or for a channel with one provider and no route).
    policy_version: int | None = None
    route_reason: str | None = None


class RecordedTransition(Frozen):
    seq: int
    at: datetime
    from_state: str
    to_state: str
    reason: str
    source: str
    attempt_number: int | None


class RecordedObservation(Frozen):
    seq: int
    attempt_number: int | None
    source: str
    kind: str
    provider_id: str | None
    provider_status: str | None
    error_code: int | None
    applied: bool
    reason: str
    inbox_id: int | None  # set when the observation came from a stored report
    observed_at: datetime


class IntentHistory(IntentHeader):
    """The intent row with its attempts, transitions and observations, each in order."""

    intent_fingerprint: str
    # How the ledger names the recipient (None: recorded before keyed fingerprints, or never).
    recipient_fingerprint: str | None
    created_at: datetime
    expires_at: datetime
    attempts: list[RecordedAttempt] = []
    transitions: list[RecordedTransition] = []
    observations: list[RecordedObservation] = []


_INTENT = """SELECT workflow_id, business_key, channel, template_id, template_version, content_sha256,
                    intent_fingerprint, recipient_fingerprint, created_at, expires_at
               FROM intents WHERE workflow_id = %s"""
_ATTEMPTS = """SELECT number, attempt_ref, prepared_at, provider, policy_version, route_reason
                FROM attempts WHERE workflow_id = %s ORDER BY number"""
_TRANSITIONS = """SELECT seq, at, from_state, to_state, reason, source, attempt_number
                    FROM transitions WHERE workflow_id = %s ORDER BY seq"""
_OBSERVATIONS = """SELECT seq, attempt_number, source, kind, provider_id, provider_status, error_code,
                          applied, reason, inbox_id, observed_at
                     FROM observations WHERE workflow_id = %s ORDER BY seq"""


async def intent_history(pool: AsyncConnectionPool, workflow_id: str) -> IntentHistory | None:
    """The intent with its attempts, transitions and observations; None when the ledger has no row yet."""
    async with pool.connection() as conn:
        async with conn.cursor(row_factory=class_row(IntentHistory)) as cursor:
            await cursor.execute(_INTENT, (workflow_id,))
            intent = await cursor.fetchone()
        if intent is None:
            return None
        async with conn.cursor(row_factory=class_row(RecordedAttempt)) as cursor:
            await cursor.execute(_ATTEMPTS, (workflow_id,))
            attempts = await cursor.fetchall()
        async with conn.cursor(row_factory=class_row(RecordedTransition)) as cursor:
            await cursor.execute(_TRANSITIONS, (workflow_id,))
            transitions = await cursor.fetchall()
        async with conn.cursor(row_factory=class_row(RecordedObservation)) as cursor:
            await cursor.execute(_OBSERVATIONS, (workflow_id,))
            observations = await cursor.fetchall()
    return intent.model_copy(update={"attempts": attempts, "transitions": transitions, "observations": observations})
