"""Claims on provider messages (migration 019): written with the evidence they rest on.

Three writers, one constraint (one holder per provider message):
* ``claim_observed``: the workflow's observations that name a provider id (a submit's answer, a poll,
  a report it applied), in the transaction that writes them;
* the receipt inbox, for a report whose callback names our attempt (``store.store_reports``);
* ``settle_search``: a lookup by recipient and content, by the rule of ``herald.core.claims``.
A claim on a message another intent's attempt holds is refused and recorded in ``refused_claims``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from herald.core.claims import CLOCK_SKEW, ClaimDecision, Rival, judge
from herald.core.lifecycle import ObservationKind, Source
from herald.core.outcomes import Candidates, Unavailable
from herald.core.rows import ObservationRow

# Observations that say which provider message an attempt is, and the basis each claims on.
_CLAIMING_KINDS = (ObservationKind.ACCEPTED, ObservationKind.FOUND, ObservationKind.STATUS)
_BASIS = {Source.SUBMIT: "submit", Source.POLL: "poll", Source.REPORT: "report"}
# What proves an attempt created no message, as its observations record it: the submit never left
# or was refused, the ledger was away (no call), or a lookup proved absence past the proof window.
_CREATED_NOTHING = ("unreachable", "retryable", "rejected", "not_sent")

_CLAIM_OBSERVED = """
INSERT INTO message_claims (provider, provider_message_id, attempt_ref, workflow_id, basis)
SELECT a.provider, v.provider_id, a.attempt_ref, a.workflow_id, v.basis
  FROM unnest(%(workflow_ids)s::text[], %(numbers)s::int[], %(provider_ids)s::text[], %(bases)s::text[])
       AS v(workflow_id, number, provider_id, basis)
  JOIN attempts a ON a.workflow_id = v.workflow_id AND a.number = v.number
 WHERE a.provider IS NOT NULL
ON CONFLICT DO NOTHING"""

_REFUSE_OBSERVED = """
INSERT INTO refused_claims (provider, provider_message_id, attempt_ref, basis, workflow_id, held_by)
SELECT a.provider, v.provider_id, a.attempt_ref, v.basis, a.workflow_id, c.attempt_ref
  FROM unnest(%(workflow_ids)s::text[], %(numbers)s::int[], %(provider_ids)s::text[], %(bases)s::text[])
       AS v(workflow_id, number, provider_id, basis)
  JOIN attempts a ON a.workflow_id = v.workflow_id AND a.number = v.number
  JOIN message_claims c ON c.provider = a.provider AND c.provider_message_id = v.provider_id
 WHERE c.workflow_id <> a.workflow_id
ON CONFLICT DO NOTHING"""


async def claim_observed(cursor: Any, rows: Sequence[ObservationRow]) -> None:
    """Claim, in the caller's transaction, the provider messages these observations name for their
    attempts (idempotent); record every claim another intent's attempt already held as refused."""
    claiming = [
        row
        for row in rows
        if row.provider_id is not None
        and row.attempt_number is not None
        and row.kind in _CLAIMING_KINDS
        and row.source in _BASIS
    ]
    if not claiming:
        return
    params = {
        "workflow_ids": [row.workflow_id for row in claiming],
        "numbers": [row.attempt_number for row in claiming],
        "provider_ids": [row.provider_id for row in claiming],
        "bases": [_BASIS[row.source] for row in claiming],
    }
    await cursor.execute(_CLAIM_OBSERVED, params)
    await cursor.execute(_REFUSE_OBSERVED, params)


# The report's claim rides in the statement that stores it (store.store_reports): a report whose
# callback names our attempt is exact. Only rows this statement inserted claim (a redelivery's
# first copy already did).
CLAIM_STORED_REPORTS = """,
claimed AS (
    INSERT INTO message_claims (provider, provider_message_id, attempt_ref, workflow_id, basis)
    SELECT stored.provider, stored.provider_message_id, a.attempt_ref, a.workflow_id, 'report'
      FROM stored JOIN attempts a ON a.attempt_ref = stored.attempt_ref
    ON CONFLICT DO NOTHING),
refused AS (
    INSERT INTO refused_claims (provider, provider_message_id, attempt_ref, basis, workflow_id, held_by)
    SELECT stored.provider, stored.provider_message_id, a.attempt_ref, 'report', a.workflow_id, c.attempt_ref
      FROM stored JOIN attempts a ON a.attempt_ref = stored.attempt_ref
      JOIN message_claims c ON c.provider = stored.provider AND c.provider_message_id = stored.provider_message_id
     WHERE c.workflow_id <> a.workflow_id
    ON CONFLICT DO NOTHING)"""

_ME = """SELECT a.provider, a.workflow_id, i.content_sha256 FROM attempts a JOIN intents i USING (workflow_id)
          WHERE a.attempt_ref = %s"""
_HOLDERS = """SELECT provider_message_id, attempt_ref FROM message_claims
               WHERE provider = %s AND provider_message_id = ANY(%s)"""
# Attempts to the same recipient (under any fingerprint key) with the same content on the same
# provider, started early enough to have created a candidate, holding no message, and with no
# observation proving they created none.
_RIVALS = f"""
SELECT a.attempt_ref, a.prepared_at
  FROM intents i JOIN attempts a USING (workflow_id)
 WHERE i.recipient_fingerprint = ANY(%(fingerprints)s) AND i.content_sha256 = %(content)s
   AND a.provider = %(provider)s AND a.attempt_ref <> %(me)s
   AND a.prepared_at BETWEEN %(earliest)s AND %(latest)s
   AND NOT EXISTS (SELECT 1 FROM message_claims c WHERE c.attempt_ref = a.attempt_ref)
   AND NOT EXISTS (SELECT 1 FROM observations o
                    WHERE o.workflow_id = a.workflow_id AND o.attempt_number = a.number
                      AND (o.kind IN ({", ".join(f"'{kind}'" for kind in _CREATED_NOTHING)})
                           OR (o.kind = 'not_found' AND o.applied)))"""
_CLAIM = """INSERT INTO message_claims (provider, provider_message_id, attempt_ref, workflow_id, basis)
            VALUES (%s, %s, %s, %s, 'lookup_by_reference') ON CONFLICT DO NOTHING RETURNING attempt_ref"""


async def settle_search(
    pool: AsyncConnectionPool,
    *,
    attempt_ref: str,
    recipient_fingerprints: Sequence[str],
    search: Candidates,
    in_flight_bound: timedelta,
) -> ClaimDecision:
    """What a search's candidates mean for the attempt (``herald.core.claims.judge``), with the claim it
    allows written in the same transaction as the reads it rests on.

    An advisory lock per provider and content serialises two lookups that could claim the same
    message; a claim by exact evidence (a report) that lands between the reads and the insert makes
    the insert conflict, and the answer is then "look again", never the other's message.
    """
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(_ME, (attempt_ref,))
        me = await cursor.fetchone()
        if me is None:
            return ClaimDecision(result=Unavailable(reason="the attempt's row is not in the ledger; nothing claimed"))
        provider, workflow_id, content = me
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"claims:{provider}:{content}",))
        ids = [each.found.provider_id for each in search.messages]
        cursor = await conn.execute(_HOLDERS, (provider, ids))
        holders = {message_id: holder for message_id, holder in await cursor.fetchall()}
        created = [each.created_at for each in search.messages]
        cursor = await conn.execute(
            _RIVALS,
            {
                "fingerprints": list(recipient_fingerprints),
                "content": content,
                "provider": provider,
                "me": attempt_ref,
                "earliest": min(created) - in_flight_bound - CLOCK_SKEW,
                "latest": max(created) + CLOCK_SKEW,
            },
        )
        rivals = [Rival(attempt_ref=ref, started_at=started) for ref, started in await cursor.fetchall()]
        decision = judge(attempt_ref, search, holders, rivals, in_flight_bound)
        if decision.claim is None:
            return decision
        cursor = await conn.execute(_CLAIM, (provider, decision.claim.found.provider_id, attempt_ref, workflow_id))
        if await cursor.fetchone() is None:
            return ClaimDecision(
                result=Unavailable(reason="the fitting message was claimed by another attempt meanwhile; looking again")
            )
        return decision

