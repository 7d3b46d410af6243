"""What submits told about their providers (``provider_marks``, migration 021): read for the route rule
inside the submit's transaction, a probe claimed there, answers marked after the call, outages reported."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from herald.core.outcomes import Frozen
from herald.core.routes import PROBE_AFTER, Mark, ProviderHealth, health
from herald.ledger.policy_store import policy_in_force

log = logging.getLogger("herald.routes")

# The newest marks read per provider: enough for the outage rule (three answers, a probe between).
_NEWEST = 8
# The report reads further back, so a long outage's start is dated right (a probe and its
# Unreachable every 30 s: 500 marks are about two hours of outage).
_REPORTED = 500


class RoutingFacts(Frozen):
    """What the route rule reads in the submit's transaction, in one round trip."""

    now: datetime  # the database's clock: marks are stamped with it
    healths: dict[str, ProviderHealth]
    # The provider each named attempt's row was handed to (rows that name none are left out).
    attempt_providers: dict[str, str]


_ROUTING_SQL = """
SELECT clock_timestamp(),
       (SELECT coalesce(json_agg(json_build_array(p.name, m.mark, m.marked_at)), '[]')
          FROM unnest(%(providers)s::text[]) AS p(name),
               LATERAL (SELECT mark, marked_at FROM provider_marks
                         WHERE provider = p.name ORDER BY marked_at DESC LIMIT %(newest)s) m),
       (SELECT coalesce(json_object_agg(attempt_ref, provider), '{}') FROM attempts
         WHERE attempt_ref = ANY(%(refs)s) AND provider IS NOT NULL)
"""


async def routing_facts(
    cursor: Any,
    providers: Sequence[str],
    attempt_refs: Sequence[str],
    *,
    probe_after: timedelta = PROBE_AFTER,
    newest: int = _NEWEST,
) -> RoutingFacts:
    """The providers' outage state (a probe due `probe_after` after the newest mark: the policy's) and
    the named attempts' providers, read in the caller's transaction."""
    await cursor.execute(_ROUTING_SQL, {"providers": list(providers), "newest": newest, "refs": list(attempt_refs)})
    row = await cursor.fetchone()
    assert row is not None
    now, marks, attempt_providers = row
    by_provider: dict[str, list[tuple[Mark, datetime]]] = {name: [] for name in providers}
    for name, mark, at in marks:
        by_provider[name].append((Mark(mark), datetime.fromisoformat(at)))
    healths = {
        name: health(name, sorted(found, key=lambda each: each[1], reverse=True), now, probe_after)
        for name, found in by_provider.items()
    }
    return RoutingFacts(now=now, healths=healths, attempt_providers=attempt_providers)


async def claim_probe(cursor: Any, provider: str, attempt_ref: str, quiet: timedelta = PROBE_AFTER) -> bool:
    """Claim the probe of a provider in outage for this attempt, in the caller's transaction; False
    when another attempt claimed one within `quiet` (the policy's probe interval; the lock orders
    racing workers: the second waits for the first to commit, then sees its probe)."""
    await cursor.execute("SELECT pg_advisory_xact_lock(hashtext('herald.provider_probe:' || %s))", (provider,))
    await cursor.execute(
        """INSERT INTO provider_marks (provider, mark, attempt_ref)
           SELECT %(provider)s, 'probe', %(attempt)s
            WHERE NOT EXISTS (SELECT 1 FROM provider_marks WHERE provider = %(provider)s
                                 AND marked_at > clock_timestamp() - %(quiet)s)
           RETURNING id""",
        {"provider": provider, "attempt": attempt_ref, "quiet": quiet},
    )
    return await cursor.fetchone() is not None


async def mark(pool: AsyncConnectionPool, provider: str, kind: Mark, attempt_ref: str, *, within: float | None) -> None:
    """Append what a submit told about its provider. Never at the answer's expense: a ledger that
    fails or is slower than `within` seconds loses the mark (logged), and the outage rule sees one
    submit fewer; the answer still reaches the workflow."""
    try:
        async with asyncio.timeout(within), pool.connection() as conn:
            await conn.execute(
                "INSERT INTO provider_marks (provider, mark, attempt_ref) VALUES (%s, %s, %s)",
                (provider, kind.value, attempt_ref),
            )
    except (DatabaseError, PoolTimeout, OSError, TimeoutError) as error:
        log.warning("provider mark %s for %s not recorded (%s)", kind.value, provider, type(error).__name__)


class ProviderState(Frozen):
    """One provider as the report and the metrics show it."""

    provider: str
    outage_since: datetime | None
    probe_due: bool
    last_mark: Mark
    last_mark_at: datetime


async def provider_states(conn: AsyncConnection) -> list[ProviderState]:
    """Every provider that has marks, with its outage state now (by name), probes due as the policy
    in force says."""
    cursor = await conn.execute("SELECT DISTINCT provider FROM provider_marks ORDER BY provider")
    names = [row[0] for row in await cursor.fetchall()]
    if not names:
        return []
    _, rules = await policy_in_force(conn, datetime.now(UTC))
    probe_after = timedelta(seconds=rules.provider_probe_after_seconds)
    async with conn.cursor() as reading:
        facts = await routing_facts(reading, names, [], probe_after=probe_after, newest=_REPORTED)
        await reading.execute(
            """SELECT DISTINCT ON (provider) provider, mark, marked_at FROM provider_marks
                WHERE provider = ANY(%s) ORDER BY provider, marked_at DESC""",
            (names,),
        )
        last = {name: (Mark(kind), at) for name, kind, at in await reading.fetchall()}
    return [
        ProviderState(
            provider=name,
            outage_since=facts.healths[name].outage_since,
            probe_due=facts.healths[name].probe_due,
            last_mark=last[name][0],
            last_mark_at=last[name][1],
        )
        for name in names
    ]
