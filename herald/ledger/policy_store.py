"""The send policy's tables: published versions, consent evidence, suppression and its lifts, and
the strict recipient cooldown claimed in the submit transaction (migration 009)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg import Error as DatabaseError
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from herald.core.intent import Intent
from herald.core.outcomes import Frozen
from herald.core.send_policy import Category, DispatchOrder, PolicyRules, dispatch_order

log = logging.getLogger("herald.policy")

# A client starting intents waits this long for the ledger before leaving the read to the workflow.
_START_READ_SECONDS = 1.0


async def publish_policy(
    pool: AsyncConnectionPool, rules: PolicyRules, *, effective_from: datetime, owner: str, note: str
) -> int:
    """Add the next version; returns its number. Earlier versions never change."""
    async with pool.connection() as conn, conn.transaction():
        # One publisher at a time, so two publishes cannot take the same number. An advisory lock,
        # not LOCK TABLE: the application's role may only SELECT and INSERT on the ledger.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('herald.policy_versions'))")
        cursor = await conn.execute(
            """INSERT INTO policy_versions (version, effective_from, owner, note, rules)
               SELECT coalesce(max(version), 0) + 1, %s, %s, %s, %s FROM policy_versions
               RETURNING version""",
            (effective_from, owner, note, Jsonb(rules.model_dump(mode="json", exclude_defaults=True))),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


# Version 1 is in force from '-infinity', which no Python datetime can hold: it is read as None,
# "from the beginning".
_EFFECTIVE_FROM = "NULLIF(effective_from, '-infinity') AS effective_from"


class PolicyVersion(Frozen):
    """One published version, without its rules."""

    version: int
    effective_from: datetime | None  # None: in force from the beginning (version 1)
    owner: str
    note: str
    published_at: datetime


class PublishedPolicy(PolicyVersion):
    """One published version with its rules."""

    rules: PolicyRules


async def policy_versions(pool: AsyncConnectionPool) -> list[PolicyVersion]:
    async with pool.connection() as conn, conn.cursor(row_factory=class_row(PolicyVersion)) as cursor:
        await cursor.execute(
            f"SELECT version, {_EFFECTIVE_FROM}, owner, note, published_at FROM policy_versions ORDER BY version"
        )
        return await cursor.fetchall()


async def policy_version(pool: AsyncConnectionPool, version: int) -> PublishedPolicy | None:
    async with pool.connection() as conn, conn.cursor(row_factory=class_row(PublishedPolicy)) as cursor:
        await cursor.execute(
            f"SELECT version, {_EFFECTIVE_FROM}, owner, note, rules, published_at FROM policy_versions WHERE version = %s",
            (version,),
        )
        return await cursor.fetchone()


async def orders_at_start(
    pool: AsyncConnectionPool, intents: Sequence[Intent], at: datetime
) -> list[DispatchOrder] | None:
    """Each intent's dispatch order under the policy in force at `at`, in one read, for a client
    starting them; None when the ledger does not answer within a second (the workflow then reads it)."""
    try:
        async with pool.connection(timeout=_START_READ_SECONDS) as conn:
            version, rules = await policy_in_force(conn, at)
    except (DatabaseError, PoolTimeout, OSError, LookupError) as error:
        log.warning("send policy not read at start (%s): the workflow reads it", type(error).__name__)
        return None
    return [dispatch_order(rules, version, i.message.category, i.tenant, i.priority) for i in intents]


async def policy_in_force(conn: AsyncConnection, at: datetime) -> tuple[int, PolicyRules]:
    """The version in force at `at`: the latest effective_from at or before it (version 1, the
    built-in defaults, is in force from the beginning of time)."""
    cursor = await conn.execute(
        """SELECT version, rules FROM policy_versions WHERE effective_from <= %s
           ORDER BY effective_from DESC, version DESC LIMIT 1""",
        (at,),
    )
    row = await cursor.fetchone()
    if row is None:
        raise LookupError("no send-policy version is in force (migration 009 publishes version 1)")
    return int(row[0]), PolicyRules.model_validate(row[1])


class Standing(Frozen):
    """Everything the policy gate reads, in one round trip (it runs inside every submit)."""

    version: int
    rules: PolicyRules
    consent: bool
    # Unlifted suppression evidence for the recipient and channel: (cause, detail, seen at), newest first;
    # an unsubscribe only when it was from the attempt's own category.
    suppressions: list[tuple[str, str, datetime]]
    # Another intent's last submit to this recipient on this channel.
    last_submit: datetime | None
    # The latest lift on this channel (an operator's, or the recipient's own opt-in): evidence seen
    # at or before it no longer suppresses. None: never lifted.
    lifted_at: datetime | None = None

    def suppressed_because(self, category: Category) -> str | None:
        """What stops an attempt of `category` now, as the gate records it ("opt_out (Twilio 21610) at
        ..."): the newest unlifted evidence whose cause the rules in force let suppress that
        category; None when nothing does."""
        causes = self.rules.suppressing_causes(category)
        return next(
            (
                f"{cause} ({detail}) at {seen.isoformat()}"
                for cause, detail, seen in self.suppressions
                if cause in causes
            ),
            None,
        )


_STANDING_SQL = """
WITH policy AS (
    SELECT version, rules FROM policy_versions WHERE effective_from <= %(at)s
     ORDER BY effective_from DESC, version DESC LIMIT 1),
lifted AS (  -- an operator's lift, or the recipient's own opt-in (START: migration 018)
    SELECT greatest(
        (SELECT coalesce(max(lifted_at), '-infinity') FROM suppression_lifts
          WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s),
        (SELECT coalesce(max(requested_at), '-infinity') FROM recipient_requests
          WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s AND request = 'opt_in')) AS at)
SELECT p.version, p.rules,
       EXISTS (SELECT 1 FROM consent_evidence
                WHERE recipient_fingerprint = ANY(%(fps)s) AND category = %(category)s),
       (SELECT coalesce(json_agg(json_build_array(e.cause, e.detail, e.seen_at) ORDER BY e.seen_at DESC), '[]')
          FROM (SELECT e.cause, e.detail, e.seen_at
                  FROM (SELECT cause, detail, seen_at FROM suppression_evidence
                         WHERE (recipient_fingerprint = ANY(%(fps)s)  -- any spelling of the address
                                OR (recipient_fingerprint IS NULL AND recipient = %(recipient)s))  -- before 016
                           AND recipient <> '(erased)' AND channel = %(channel)s
                        UNION ALL  -- an erased recipient's evidence, kept by fingerprint (migration 013)
                        SELECT cause, detail, seen_at FROM erased_suppressions
                         WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s
                        UNION ALL  -- what the recipient asked of us: a STOP, an unsubscribe from this category
                        SELECT request, detail, requested_at FROM recipient_requests
                         WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s
                           AND (request = 'opt_out' OR (request = 'unsubscribe' AND category = %(category)s))) e, lifted
                 WHERE e.seen_at > lifted.at
                 ORDER BY e.seen_at DESC LIMIT 10) e),
       (SELECT max(last_submit_at) FROM recipient_cooldowns
         WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s AND workflow_id <> %(workflow_id)s),
       (SELECT NULLIF(at, '-infinity') FROM lifted)  -- no Python datetime holds '-infinity'
  FROM policy p
"""


async def standing(
    conn: AsyncConnection, *, at: datetime, recipient: str, channel: str, category: Category, workflow_id: str,
    fps: Sequence[str],
) -> Standing:
    """The policy in force at `at` and the recipient's standing under it, in one statement; `fps`:
    the fingerprints to find them by (``Keyring.recipient_candidates``: every key's, and the plain
    SHA-256 forms written before keyed fingerprints)."""
    params = {
        "at": at, "recipient": recipient, "channel": channel, "category": category.value, "workflow_id": workflow_id,
        "fps": list(fps),
    }  # fmt: skip
    cursor = await conn.execute(_STANDING_SQL, params)
    row = await cursor.fetchone()
    if row is None:
        raise LookupError("no send-policy version is in force (migration 009 publishes version 1)")
    version, rules, consent, suppressions, last_submit, lifted_at = row
    return Standing(
        version=version,
        rules=PolicyRules.model_validate(rules),
        consent=consent,
        suppressions=[(cause, detail, datetime.fromisoformat(seen)) for cause, detail, seen in suppressions],
        last_submit=last_submit,
        lifted_at=lifted_at,
    )


async def claim_cooldown(
    cursor: Any, *, fingerprint: str, channel: str, workflow_id: str, cooldown: timedelta, at: datetime
) -> datetime | None:
    """Claim the recipient for a submit now, inside the submit's transaction.

    Returns None when claimed, or the instant the cooldown ends when another intent submitted to
    this recipient too recently. The row lock orders racing workers: the second waits for the
    first to commit, then sees its claim and is refused. An intent's own earlier attempts do not
    count (the cooldown is across intents).

    The claim is stamped with the later of the workflow's clock (`at`: a time-skipping test runs
    ahead of the wall) and the database's clock now: the activity may start well after the
    workflow decided, and the cooldown is about when messages go out, not when they were decided.
    """
    await cursor.execute(
        """INSERT INTO recipient_cooldowns (recipient_fingerprint, channel, last_submit_at, workflow_id)
           VALUES (%s, %s, greatest(%s::timestamptz, clock_timestamp()), %s)
           ON CONFLICT (recipient_fingerprint, channel) DO UPDATE
               SET last_submit_at = EXCLUDED.last_submit_at, workflow_id = EXCLUDED.workflow_id
             WHERE recipient_cooldowns.last_submit_at <= EXCLUDED.last_submit_at - %s
                OR recipient_cooldowns.workflow_id = EXCLUDED.workflow_id
           RETURNING last_submit_at""",
        (fingerprint, channel, at, workflow_id, cooldown),
    )
    if await cursor.fetchone() is not None:
        return None
    await cursor.execute(
        "SELECT last_submit_at + %s FROM recipient_cooldowns WHERE recipient_fingerprint = %s AND channel = %s",
        (cooldown, fingerprint, channel),
    )
    row = await cursor.fetchone()
    return row[0] if row else None


async def count_cooldown_from_answer(
    pool: AsyncConnectionPool, *, fingerprint: str, channel: str, workflow_id: str
) -> None:
    """Restamp this intent's claim with the instant the provider answered its submit.

    The claim was stamped before the call; the message reached the provider somewhere between the
    claim and the answer. Counting the next intent's cooldown from the answer keeps the gap the
    provider sees at least the cooldown, however long the call took. Only this intent's own claim
    moves, and never backwards (a time-skipping workflow clock may be ahead of the database's).
    """
    async with pool.connection() as conn:
        await conn.execute(
            """UPDATE recipient_cooldowns SET last_submit_at = greatest(last_submit_at, clock_timestamp())
                WHERE recipient_fingerprint = %s AND channel = %s AND workflow_id = %s""",
            (fingerprint, channel, workflow_id),
        )


async def grant_consent(
    pool: AsyncConnectionPool, *, fingerprint: str, category: Category, source: str, granted_at: datetime
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO consent_evidence (recipient_fingerprint, category, source, granted_at)
               VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            (fingerprint, category.value, source, granted_at),
        )


async def lift_suppression(
    pool: AsyncConnectionPool, *, fingerprint: str, channel: str, operator: str, reason: str
) -> datetime:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """INSERT INTO suppression_lifts (recipient_fingerprint, channel, operator, reason)
               VALUES (%s, %s, %s, %s) RETURNING lifted_at""",
            (fingerprint, channel, operator, reason),
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0]


class Evidence(Frozen):
    """One provider's report that a recipient cannot or will not receive (a 21610, a bounce)."""

    source: str  # "provider report", or "provider report (recipient erased)": kept by fingerprint
    cause: str
    detail: str
    seen_at: datetime


class Lift(Frozen):
    """An operator's lift of a recipient's suppression on one channel."""

    lifted_at: datetime
    operator: str
    reason: str


# The evidence the gate reads (_STANDING_SQL, with the same predicates), whether lifted or not.
_EVIDENCE_SQL = """
SELECT 'provider report' AS source, cause, detail, seen_at FROM suppression_evidence
 WHERE (recipient_fingerprint = ANY(%(fps)s) OR (recipient_fingerprint IS NULL AND recipient = %(recipient)s))
   AND recipient <> '(erased)' AND channel = %(channel)s
UNION ALL
SELECT 'provider report (recipient erased)', cause, detail, seen_at FROM erased_suppressions
 WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s
ORDER BY seen_at DESC
"""


async def suppression_evidence(
    conn: AsyncConnection, *, fps: Sequence[str], recipient: str, channel: str
) -> list[Evidence]:
    """Every provider report about the recipient on `channel` (under any of `fps`), newest first."""
    async with conn.cursor(row_factory=class_row(Evidence)) as cursor:
        await cursor.execute(_EVIDENCE_SQL, {"fps": list(fps), "recipient": recipient, "channel": channel})
        return await cursor.fetchall()


async def suppression_lifts(conn: AsyncConnection, *, fps: Sequence[str], channel: str) -> list[Lift]:
    """Every operator's lift for the recipient on `channel` (under any of `fps`), newest first."""
    async with conn.cursor(row_factory=class_row(Lift)) as cursor:
        await cursor.execute(
            """SELECT lifted_at, operator, reason FROM suppression_lifts
                WHERE recipient_fingerprint = ANY(%s) AND channel = %s ORDER BY lifted_at DESC""",
            (list(fps), channel),
        )
        return await cursor.fetchall()
