"""The numbers Herald reports about itself, computed from the ledger alone.

Coverage (a known terminal outcome was recorded) is kept apart from the delivered
share: the first says whether our pipeline wrote down what happened, the second
whether the route worked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from psycopg_pool import AsyncConnectionPool

from herald.core.delivery_policy import DeliveryPolicy
from herald.core.lifecycle import EXPIRED_IN_QUEUE_MARK
from herald.core.outcomes import Frozen
from herald.ledger.provider_marks import ProviderState, provider_states


class ProviderOutage(Frozen):
    """Open intents whose latest attempts reached no provider: an outage, seen at once."""

    provider: str
    intents: int
    # When the oldest of those intents first found the provider unreachable.
    since: datetime


class EventStreamState(Frozen):
    """One ESP's event stream as the receipt server recorded it, and the e-mails waiting on its silence."""

    provider: str
    last_post_at: datetime | None
    # Posts that arrived later than the stream's normal lag after their events: redeliveries after
    # an interruption, in the last 24 hours.
    redelivered_posts_24h: int
    # Unknown e-mail submits waiting because the stream is not flowing past them (herald.core.silence).
    waiting_intents: int
    waiting_since: datetime | None


class QueueAge(Frozen):
    """Queue age (attempt prepared by the workflow -> the provider's answer to its submit) of the
    attempts of one priority key or one tenant, over the report's window."""

    by: Literal["priority", "tenant"]
    key: str  # the priority key ("unrecorded" for attempts from before priorities), or the tenant
    attempts: int
    p50_ms: float | None
    p95_ms: float | None
    oldest_ms: float | None
    # Intents of this key that ended expired while their submit was still queued on the route.
    expired_in_queue: int = 0


class ConsentCount(Frozen):
    """Recipients' opt-outs, opt-ins, unsubscribes and help requests of one kind from one source (an
    inbound keyword, a one-click link, an ESP's event, a provider's refusal), over the whole ledger."""

    request: str
    source: str
    channel: str
    count: int
    last_at: datetime


class LedgerReport(Frozen):
    intents: int
    coverage_pct: float
    delivered_pct: float
    unknown_pct: float
    open_intents: int
    submit_to_accept_p50_ms: float | None
    submit_to_accept_p95_ms: float | None
    accept_to_terminal_p50_ms: float | None
    accept_to_terminal_p95_ms: float | None
    polls_per_terminal_message: float | None
    key_conflicts: int
    inbox_rows: int
    inbox_undecided: int
    inbox_oldest_undecided: timedelta | None
    oldest_unresolved_age: timedelta | None
    # Attempts Herald concluded the provider never took that it had after all, and of those the
    # duplicates sent (the copy went out beside another copy), by "provider/cause".
    presumed_then_seen: int = 0
    duplicates_sent: int = 0
    duplicates_by_cause: dict[str, int] = {}
    # Claims on a provider message that another intent's attempt already held (migration 019):
    # refused by the ledger's constraint, each one for a human.
    refused_claims: int = 0
    # Queue age, apart from delivery latency: how long attempts waited for the route (prepared by
    # the workflow -> taken by the submit activity: the Temporal server's rate limit and worker
    # slots), and how long intents were held by the send policy (cooldown, quiet hours) before
    # their first attempt.
    route_wait_p50_ms: float | None = None
    route_wait_p95_ms: float | None = None
    route_wait_max_ms: float | None = None
    policy_held: int = 0
    policy_hold_p50_ms: float | None = None
    policy_hold_max_ms: float | None = None
    # The same wait measured to the provider's answer, by priority key and by tenant (the tenants
    # with the longest p95 first, at most TENANTS_SHOWN), over the last QUEUE_WINDOW; with the
    # intents that expired in the route's queue in that window.
    queue_ages: list[QueueAge] = []
    tenants_not_shown: int = 0
    # Intents waiting on a provider that cannot be reached (retried until their deadline), by provider.
    outages: list[ProviderOutage] = []
    # Each ESP's event stream: when it last spoke, its redeliveries, the e-mails waiting on it.
    event_streams: list[EventStreamState] = []
    # Each provider submits have marked (migration 021): in outage for the route rule or not, and
    # whether its next probe is due (herald.core.routes: 3 Unreachable within 60 s; a probe per 30 s).
    provider_states: list[ProviderState] = []
    # What recipients asked (migration 018) and what providers refused for them (Twilio 21610), by source.
    consent: list[ConsentCount] = []

    def render(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:,.0f} ms"

        return "\n".join(
            [
                f"intents {self.intents}   open {self.open_intents}   oldest unresolved "
                f"{self.oldest_unresolved_age or '-'}",
                f"coverage (known terminal outcome) {self.coverage_pct:.1f}%   delivered {self.delivered_pct:.1f}%   "
                f"unknown {self.unknown_pct:.1f}%",
                f"submission -> acceptance   p50 {ms(self.submit_to_accept_p50_ms)}   p95 {ms(self.submit_to_accept_p95_ms)}",
                f"acceptance -> terminal     p50 {ms(self.accept_to_terminal_p50_ms)}   "
                f"p95 {ms(self.accept_to_terminal_p95_ms)}",
                f"polls per terminal message {self.polls_per_terminal_message or 0:.2f}   "
                f"duplicate-key conflicts {self.key_conflicts}",
                f"inbox rows {self.inbox_rows}   undecided {self.inbox_undecided}   oldest undecided "
                f"{self.inbox_oldest_undecided or '-'}",
                f"queue age, route (attempt prepared -> submitted)   p50 {ms(self.route_wait_p50_ms)}   "
                f"p95 {ms(self.route_wait_p95_ms)}   oldest {ms(self.route_wait_max_ms)}",
                *_render_queue_ages(self.queue_ages, self.tenants_not_shown),
                f"held by the send policy   intents {self.policy_held}   p50 {ms(self.policy_hold_p50_ms)}   "
                f"longest {ms(self.policy_hold_max_ms)}",
                f"duplicates sent {self.duplicates_sent}"
                + "".join(f"   {cause} {count}" for cause, count in sorted(self.duplicates_by_cause.items()))
                + f"   (attempts presumed not accepted, then seen: {self.presumed_then_seen})"
                + f"   refused double claims {self.refused_claims}",
                "waiting on an unreachable provider   "
                + (
                    "   ".join(
                        f"{o.provider} {o.intents} since {o.since.isoformat(timespec='seconds')}" for o in self.outages
                    )
                    or "none"
                ),
                "providers skipped by routes (in outage)   "
                + (
                    "   ".join(
                        f"{s.provider} since {s.outage_since.isoformat(timespec='seconds')}, "
                        + ("probe due" if s.probe_due else f"last {s.last_mark.value} {s.last_mark_at.isoformat(timespec='seconds')}")
                        for s in self.provider_states
                        if s.outage_since is not None
                    )
                    or "none"
                ),
                "recipients' requests   "
                + (
                    "   ".join(
                        f"{c.request} by {c.source} ({c.channel}) {c.count}, last {c.last_at.isoformat(timespec='seconds')}"
                        for c in self.consent
                    )
                    or "none"
                ),
                *(
                    f"event stream {e.provider}   last post "
                    f"{e.last_post_at.isoformat(timespec='seconds') if e.last_post_at else 'never'}   "
                    f"redelivered posts (24 h) {e.redelivered_posts_24h}   e-mails waiting on its silence "
                    f"{e.waiting_intents}"
                    + (f" since {e.waiting_since.isoformat(timespec='seconds')}" if e.waiting_since else "")
                    for e in self.event_streams
                ),
            ]
        )


def _render_queue_ages(ages: list[QueueAge], tenants_not_shown: int) -> list[str]:
    def s(ms: float | None) -> str:
        return "-" if ms is None else f"{ms / 1000:,.1f} s"

    window = f"{QUEUE_WINDOW.total_seconds() / 3600:g} h"
    lines = [f"queue age by priority and tenant, last {window} (attempt prepared -> provider answered)"]
    if not ages:
        return [*lines[:1], "  no attempt answered in the window"]
    for age in ages:
        lines.append(
            f"  {age.by} {age.key:<12} attempts {age.attempts:>6}   p50 {s(age.p50_ms)}   p95 {s(age.p95_ms)}   "
            f"oldest {s(age.oldest_ms)}   expired in the route queue {age.expired_in_queue}"
        )
    if tenants_not_shown:
        lines.append(f"  ({tenants_not_shown} more tenants, shorter waits)")
    return lines


# One statement, each table read once where the numbers share it: the intents' current states (the
# view's per-intent look-up of the newest transition, the report's costliest read) feed every count
# and the oldest unresolved age (unresolved_intents is those same intents, now() - created_at), each
# pair of percentiles is one sort, and observations and the undecided reports one scan each. Before
# (bench/RESULTS-console.md) the states were read twice and each figure scanned on its own.
_SQL = """
WITH states AS (
    SELECT s.state, s.state_since, s.created_at, s.workflow_id, s.state IN (SELECT state FROM terminal_states) AS terminal
      FROM intent_current_state s),
accepted AS (  -- the first observation that proved each attempt accepted
    SELECT o.workflow_id, o.attempt_number, min(o.observed_at) AS accepted_at
      FROM observations o WHERE o.provider_id IS NOT NULL AND o.applied
     GROUP BY o.workflow_id, o.attempt_number),
submit_latency AS (
    SELECT extract(epoch FROM ac.accepted_at - a.prepared_at) * 1000 AS ms
      FROM attempts a JOIN accepted ac ON ac.workflow_id = a.workflow_id AND ac.attempt_number = a.number),
last_accepted AS (  -- each intent's latest accepted attempt: grouped once, joined by key (a lateral
                     -- scan of `accepted` per intent was quadratic: over 10 minutes at 100,000 intents)
    SELECT workflow_id, max(accepted_at) AS accepted_at FROM accepted GROUP BY workflow_id),
terminal_latency AS (
    SELECT extract(epoch FROM s.state_since - ac.accepted_at) * 1000 AS ms
      FROM states s JOIN last_accepted ac ON ac.workflow_id = s.workflow_id
     WHERE s.terminal),
counts AS (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE terminal AND state <> 'unknown') AS known,
           count(*) FILTER (WHERE state = 'delivered') AS delivered,
           count(*) FILTER (WHERE state = 'unknown') AS unknown,
           count(*) FILTER (WHERE NOT terminal) AS open,
           count(*) FILTER (WHERE terminal) AS finished,
           now() - min(created_at) FILTER (WHERE NOT terminal) AS oldest_unresolved
      FROM states),
submit_p AS (SELECT percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY ms) AS p FROM submit_latency),
terminal_p AS (SELECT percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY ms) AS p FROM terminal_latency),
observed AS (
    SELECT count(*) FILTER (WHERE source = 'poll') AS polls, count(*) FILTER (WHERE kind = 'key_conflict') AS conflicts
      FROM observations),
undecided AS (SELECT count(*) AS reports, max(age) AS oldest FROM undecided_reports)
SELECT c.total, c.known, c.delivered, c.unknown, c.open, sp.p[1], sp.p[2], tp.p[1], tp.p[2], o.polls, c.finished,
       o.conflicts + (SELECT count(*) FROM transitions WHERE to_state = 'suppressed' AND reason LIKE 'key reused%%'),
       (SELECT count(*) FROM receipt_inbox),
       u.reports, u.oldest, c.oldest_unresolved,
       (SELECT count(*) FROM presumed_not_accepted_then_seen)
  FROM counts c, submit_p sp, terminal_p tp, observed o, undecided u
"""

_QUEUE_SQL = """
WITH route AS (
    SELECT extract(epoch FROM a.recorded_at - a.prepared_at) * 1000 AS ms
      FROM attempts a WHERE a.provider IS NOT NULL),
held AS (
    SELECT extract(epoch FROM min(a.prepared_at) - i.created_at) * 1000 AS ms
      FROM intents i JOIN attempts a ON a.workflow_id = i.workflow_id
     WHERE EXISTS (SELECT 1 FROM observations o WHERE o.workflow_id = i.workflow_id
                     AND o.source = 'policy' AND o.kind = 'deferred')
     GROUP BY i.workflow_id, i.created_at)
SELECT (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM route),
       (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) FROM route),
       (SELECT max(ms) FROM route),
       (SELECT count(*) FROM held),
       (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM held),
       (SELECT max(ms) FROM held)
"""

# The breakdown's window: an operator's "now", not the ledger's whole history.
QUEUE_WINDOW = timedelta(hours=1)
TENANTS_SHOWN = 10

# By priority key and by tenant: each attempt handed to a provider in the window, from its
# preparation to the provider's first answer to the submit (accepted, "not now" or a refusal; a
# submit with no answer has no queue age yet), and the intents that expired in the route queue.
_ANSWERED = """
answered AS (
    SELECT coalesce(a.priority::text, 'unrecorded') AS priority, i.tenant, a.prepared_at,
           extract(epoch FROM o.answered_at - a.prepared_at) * 1000 AS ms
      FROM attempts a
      JOIN intents i ON i.workflow_id = a.workflow_id
      JOIN LATERAL (SELECT min(o.observed_at) AS answered_at FROM observations o
                     WHERE o.workflow_id = a.workflow_id AND o.attempt_number = a.number AND o.source = 'submit'
                       AND o.kind IN ('accepted', 'retryable', 'rejected')) o ON o.answered_at IS NOT NULL
     WHERE a.provider IS NOT NULL AND a.prepared_at > now() - %(window)s)"""

_QUEUE_AGES_SQL = f"""
WITH {_ANSWERED},
expired AS (
    SELECT coalesce(last.priority::text, 'unrecorded') AS priority, i.tenant
      FROM transitions t
      JOIN intents i ON i.workflow_id = t.workflow_id
      LEFT JOIN LATERAL (SELECT a.priority FROM attempts a WHERE a.workflow_id = t.workflow_id
                          ORDER BY a.number DESC LIMIT 1) last ON true
     WHERE t.to_state = 'expired' AND t.reason LIKE %(expired_in_queue)s AND t.at > now() - %(window)s),
groups AS (
    SELECT 'priority' AS dim, priority AS key, count(*) AS attempts,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95, max(ms) AS oldest
      FROM answered GROUP BY priority
    UNION ALL
    SELECT 'tenant', tenant, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), max(ms)
      FROM answered GROUP BY tenant),
expired_counts AS (
    SELECT 'priority' AS dim, priority AS key, count(*) AS n FROM expired GROUP BY priority
    UNION ALL
    SELECT 'tenant', tenant, count(*) FROM expired GROUP BY tenant)
SELECT coalesce(g.dim, e.dim), coalesce(g.key, e.key), coalesce(g.attempts, 0), g.p50, g.p95, g.oldest,
       coalesce(e.n, 0)
  FROM groups g FULL JOIN expired_counts e ON e.dim = g.dim AND e.key = g.key
"""

# The same waits over time: each bucket's attempts (by the time they were prepared) and their p95,
# by priority key and by tenant (the console's chart of queue age).
_QUEUE_AGE_SERIES_SQL = f"""
WITH {_ANSWERED},
binned AS (SELECT priority, tenant, ms, date_bin(%(bucket)s, prepared_at, now() - %(window)s) AS bucket FROM answered)
SELECT 'priority', priority, bucket, count(*), percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)
  FROM binned GROUP BY priority, bucket
UNION ALL
SELECT 'tenant', tenant, bucket, count(*), percentile_cont(0.95) WITHIN GROUP (ORDER BY ms)
  FROM binned GROUP BY tenant, bucket
ORDER BY 1, 2, 3
"""


class QueueAgePoint(Frozen):
    """One bucket of one priority key's or tenant's queue age (as ``QueueAge``, over a shorter span)."""

    by: Literal["priority", "tenant"]
    key: str
    bucket_start: datetime
    attempts: int
    p95_ms: float


async def queue_age_series(pool: AsyncConnectionPool, *, window: timedelta, bucket: timedelta) -> list[QueueAgePoint]:
    """Queue age over the last `window`, in buckets of `bucket` (by when attempts were prepared), by
    priority key and by tenant; buckets with no attempt answered are absent."""
    async with pool.connection() as conn:
        cursor = await conn.execute(_QUEUE_AGE_SERIES_SQL, {"window": window, "bucket": bucket})
        return [
            QueueAgePoint(by=by, key=key, bucket_start=start, attempts=n, p95_ms=p95)
            for by, key, start, n, p95 in await cursor.fetchall()
        ]


class ExpiredInQueue(Frozen):
    """An intent that expired while its submit was still queued on the route: nothing was sent."""

    at: datetime  # when it expired
    business_key: str
    workflow_id: str
    channel: str
    template_id: str
    template_version: int
    tenant: str


# The newest first, within the range: a backward walk of transitions_expired_by_at (migration 025)
# from now to the range's start, stopped after `limit` rows; never the whole table.
_RECENT_EXPIRED_IN_QUEUE_SQL = """
SELECT t.at, i.business_key, i.workflow_id, i.channel, i.template_id, i.template_version, i.tenant
  FROM transitions t JOIN intents i ON i.workflow_id = t.workflow_id
 WHERE t.to_state = 'expired' AND t.at > now() - %(within)s AND t.reason LIKE %(expired_in_queue)s
 ORDER BY t.at DESC
 LIMIT %(limit)s
"""


async def recent_expired_in_queue(pool: AsyncConnectionPool, *, within: timedelta, limit: int) -> list[ExpiredInQueue]:
    """The newest `limit` intents that expired in the route queue within the last `within`, newest
    first (those the report's queue ages count, one by one)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            _RECENT_EXPIRED_IN_QUEUE_SQL,
            {"within": within, "limit": limit, "expired_in_queue": f"%{EXPIRED_IN_QUEUE_MARK}%"},
        )
        return [
            ExpiredInQueue(at=at, business_key=key, workflow_id=wf, channel=ch, template_id=tid, template_version=tv,
                           tenant=tenant)
            for at, key, wf, ch, tid, tv, tenant in await cursor.fetchall()
        ]  # fmt: skip


_OUTAGES_SQL = """
WITH open_intents AS (
    SELECT workflow_id FROM intent_current_state WHERE state NOT IN (SELECT state FROM terminal_states)),
latest AS (  -- each open intent's latest attempt
    SELECT DISTINCT ON (a.workflow_id) a.workflow_id, a.number, a.provider
      FROM attempts a JOIN open_intents USING (workflow_id)
     ORDER BY a.workflow_id, a.number DESC),
outage AS (  -- whose latest attempt reached no provider; since the first of that run of attempts
    SELECT l.workflow_id, l.provider,
           (SELECT min(a.prepared_at) FROM attempts a
             WHERE a.workflow_id = l.workflow_id
               AND a.number > coalesce((SELECT max(o.attempt_number) FROM observations o
                                         WHERE o.workflow_id = l.workflow_id AND o.source = 'submit'
                                           AND o.kind <> 'unreachable'), 0)) AS since
      FROM latest l
     WHERE EXISTS (SELECT 1 FROM observations o
                    WHERE o.workflow_id = l.workflow_id AND o.attempt_number = l.number
                      AND o.source = 'submit' AND o.kind = 'unreachable'))
SELECT coalesce(provider, 'unrecorded'), count(*), min(since) FROM outage GROUP BY 1 ORDER BY 1
"""

_STREAMS_SQL = """
WITH providers AS (SELECT DISTINCT provider FROM event_stream_marks
                   UNION SELECT DISTINCT a.provider FROM attempts a
                          JOIN observations o ON o.workflow_id = a.workflow_id AND o.attempt_number = a.number
                         WHERE o.kind = 'stream_silent'),
waiting AS (
    SELECT a.provider, s.workflow_id, min(o.observed_at) AS since
      FROM intent_current_state s
      JOIN observations o ON o.workflow_id = s.workflow_id AND o.kind = 'stream_silent'
      JOIN attempts a ON a.workflow_id = o.workflow_id AND a.number = o.attempt_number
     WHERE s.state = 'submitting'
     GROUP BY a.provider, s.workflow_id)
SELECT p.provider,
       (SELECT max(m.received_at) FROM event_stream_marks m WHERE m.provider = p.provider),
       (SELECT count(*) FROM event_stream_marks m
         WHERE m.provider = p.provider AND m.received_at > now() - interval '24 hours'
           AND m.received_at - m.newest_event_at > %(lag)s),
       (SELECT count(*) FROM waiting w WHERE w.provider = p.provider),
       (SELECT min(w.since) FROM waiting w WHERE w.provider = p.provider)
  FROM providers p WHERE p.provider IS NOT NULL ORDER BY 1
"""

# What recipients asked of us directly, and the opt-outs a provider told us of by refusing a send.
_CONSENT_SQL = """
SELECT request, source, channel, count(*), max(requested_at) FROM recipient_requests GROUP BY 1, 2, 3
UNION ALL
SELECT 'opt_out', 'provider_refusal', 'sms', count(*), max(o.observed_at)
  FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
 WHERE i.channel = 'sms' AND o.error_code = 21610
HAVING count(*) > 0
ORDER BY 1, 2, 3
"""

_DUPLICATES_SQL = """
SELECT provider || '/' || cause, count(*) FROM duplicates_sent GROUP BY provider, cause ORDER BY 1
"""


async def ledger_report(
    pool: AsyncConnectionPool, *, stream_lag: timedelta = DeliveryPolicy().event_stream_lag
) -> LedgerReport:
    """The report; `stream_lag` tells a redelivered event post from one posted as its events happened."""
    async with pool.connection() as conn:
        cursor = await conn.execute(_SQL)
        row = await cursor.fetchone()
        cursor = await conn.execute(_DUPLICATES_SQL)
        duplicates = dict(await cursor.fetchall())
        cursor = await conn.execute("SELECT count(*) FROM refused_claims")
        (refused,) = await cursor.fetchone()  # type: ignore[misc]
        cursor = await conn.execute(_QUEUE_SQL)
        r50, r95, rmax, held, h50, hmax = await cursor.fetchone()  # type: ignore[misc]
        cursor = await conn.execute(
            _QUEUE_AGES_SQL, {"window": QUEUE_WINDOW, "expired_in_queue": f"%{EXPIRED_IN_QUEUE_MARK}%"}
        )
        queue_ages, tenants_not_shown = _shown(
            [
                QueueAge(by=by, key=key, attempts=n, p50_ms=p50, p95_ms=p95, oldest_ms=oldest, expired_in_queue=expired)
                for by, key, n, p50, p95, oldest, expired in await cursor.fetchall()
            ]  # fmt: skip
        )
        cursor = await conn.execute(_CONSENT_SQL)
        consent = [
            ConsentCount(request=r, source=src, channel=ch, count=n, last_at=last)
            for r, src, ch, n, last in await cursor.fetchall()
        ]
        cursor = await conn.execute(_OUTAGES_SQL)
        outages = [ProviderOutage(provider=p, intents=n, since=since) for p, n, since in await cursor.fetchall()]
        cursor = await conn.execute(_STREAMS_SQL, {"lag": stream_lag})
        streams = [
            EventStreamState(
                provider=p, last_post_at=last, redelivered_posts_24h=late, waiting_intents=waiting, waiting_since=since
            )  # fmt: skip
            for p, last, late, waiting, since in await cursor.fetchall()
        ]
        states = await provider_states(conn)
    (total, known, delivered, unknown, open_, s50, s95, t50, t95, polls, terminal, conflicts,
     inbox, undecided, inbox_age, oldest, presumed_then_seen) = row  # fmt: skip

    def pct(part: int) -> float:
        return 100.0 * part / total if total else 0.0

    return LedgerReport(
        intents=total,
        coverage_pct=pct(known),
        delivered_pct=pct(delivered),
        unknown_pct=pct(unknown),
        open_intents=open_,
        submit_to_accept_p50_ms=s50,
        submit_to_accept_p95_ms=s95,
        accept_to_terminal_p50_ms=t50,
        accept_to_terminal_p95_ms=t95,
        polls_per_terminal_message=polls / terminal if terminal else None,
        key_conflicts=conflicts,
        inbox_rows=inbox,
        inbox_undecided=undecided,
        inbox_oldest_undecided=inbox_age,
        oldest_unresolved_age=oldest,
        presumed_then_seen=presumed_then_seen,
        duplicates_sent=sum(duplicates.values()),
        duplicates_by_cause=duplicates,
        refused_claims=refused,
        route_wait_p50_ms=r50,
        route_wait_p95_ms=r95,
        route_wait_max_ms=rmax,
        policy_held=held,
        policy_hold_p50_ms=h50,
        policy_hold_max_ms=hmax,
        queue_ages=queue_ages,
        tenants_not_shown=tenants_not_shown,
        outages=outages,
        event_streams=streams,
        consent=consent,
        provider_states=states,
    )


def _shown(ages: list[QueueAge]) -> tuple[list[QueueAge], int]:
    """Every priority key, first to last; the TENANTS_SHOWN tenants that waited longest (then those
    with intents expired in the queue); and how many tenants were left out."""
    priorities = sorted((a for a in ages if a.by == "priority"), key=lambda a: (not a.key.isdigit(), a.key))
    tenants = sorted(
        (a for a in ages if a.by == "tenant"), key=lambda a: (-(a.p95_ms or 0.0), -a.expired_in_queue, a.key)
    )
    return [*priorities, *tenants[:TENANTS_SHOWN]], max(0, len(tenants) - TENANTS_SHOWN)
