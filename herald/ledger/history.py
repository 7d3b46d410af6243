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
from herald.core.rows import AttemptRow


class RecordedAttempt(AttemptRow):
    """An attempt's row as the ledger holds it (provider None: recorded before migration 004 named it,
    or never handed to one)."""


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
    # A stored report's own times: the provider's clock for the event, and ours for its arrival.
    report_event_at: datetime | None = None
    report_received_at: datetime | None = None


class IntentHistory(IntentHeader):
    """The intent row with its attempts, transitions and observations, each in order."""

    intent_fingerprint: str
    # How the ledger names the recipient (None: recorded before keyed fingerprints, or never).
    recipient_fingerprint: str | None
    created_at: datetime
    expires_at: datetime
    tenant: str = "shared"
    category: str | None = None  # None: recorded before the send policy (009)
    # The workflow's first run (the Temporal Web UI's address for it).
    first_run_id: str | None = None
    attempts: list[RecordedAttempt] = []
    transitions: list[RecordedTransition] = []
    observations: list[RecordedObservation] = []


_INTENT = """SELECT workflow_id, business_key, channel, template_id, template_version, content_sha256,
                    intent_fingerprint, recipient_fingerprint, created_at, expires_at, tenant, category, first_run_id
               FROM intents WHERE workflow_id = %s"""
_ATTEMPTS = """SELECT workflow_id, number, attempt_ref, prepared_at, provider, route, route_reason, policy_version, policy_decision,
                      priority, fairness_weight
                 FROM attempts WHERE workflow_id = %s ORDER BY number"""
_TRANSITIONS = """SELECT seq, at, from_state, to_state, reason, source, attempt_number
                    FROM transitions WHERE workflow_id = %s ORDER BY seq"""
_OBSERVATIONS = """SELECT o.seq, o.attempt_number, o.source, o.kind, o.provider_id, o.provider_status, o.error_code,
                          o.applied, o.reason, o.inbox_id, o.observed_at,
                          r.provider_event_at AS report_event_at, r.received_at AS report_received_at
                     FROM observations o LEFT JOIN receipt_inbox r ON r.id = o.inbox_id
                    WHERE o.workflow_id = %s ORDER BY o.seq"""


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
