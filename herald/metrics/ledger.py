"""The ledger's numbers as Prometheus metric families, read at scrape time.

The ledger is the business record every worker and receipt server writes to, so its numbers are
exported once per deployment, not per process. Most come from ``herald.ledger.report`` (the same
numbers ``starter.py report`` prints); the queries here add what the report does not break down:
intents by state and channel, submit outcomes by class, the oldest intent waiting for an attempt
and the inbox rows waiting for the drainer.

Rows reach the ledger at the workflow's checkpoints (with each submit, before a long wait, at the
close), so these numbers trail the workflows by that much; an intent waiting for its first submit
is not in the ledger yet (the worker's ``temporal_activity_schedule_to_start_latency`` on the
submit task queue shows that wait). Counts of append-only rows are exported as counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg_pool import AsyncConnectionPool

from herald.core.lifecycle import TERMINAL_STATES, IntentState
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.ledger.report import QUEUE_WINDOW, LedgerReport, ledger_report

_INTENTS_SQL = "SELECT state, channel, count(*) FROM intent_current_state GROUP BY state, channel"

# What each submit call's answer was: accepted, unknown, retryable, rejected, not_sent.
_SUBMIT_OUTCOMES_SQL = """
SELECT i.channel, o.kind, count(*)
  FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
 WHERE o.source = 'submit'
 GROUP BY i.channel, o.kind
"""

# Intents the ledger shows waiting for their next attempt (a retry backoff, the send policy, a
# recipient cooldown), and since when: in pending since their last transition, or since created.
_PENDING_SQL = """
SELECT channel, extract(epoch FROM max(now() - coalesce(state_since, created_at)))
  FROM intent_current_state WHERE state = 'pending'
 GROUP BY channel
"""

# Undecided inbox rows whose signal failed at least once: the drainer owes them another try.
_REDELIVERY_SQL = """
SELECT count(*) FROM receipt_redelivery d
 WHERE NOT EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = d.inbox_id)
"""

_TERMINAL_VALUES = frozenset(state.value for state in TERMINAL_STATES)
_DEFINITE_STATES = _TERMINAL_VALUES - {IntentState.UNKNOWN.value}


class IntentCount(Frozen):
    state: str
    channel: str
    intents: int


class SubmitOutcomeCount(Frozen):
    channel: str
    outcome: str
    observations: int


class LedgerNumbers(Frozen):
    """One scrape's reading of the ledger."""

    intents: list[IntentCount]
    submit_outcomes: list[SubmitOutcomeCount]
    oldest_pending_seconds: dict[str, float]  # by channel; a channel with no pending intent is absent
    inbox_awaiting_redelivery: int
    report: LedgerReport


async def read_ledger_numbers(pool: AsyncConnectionPool) -> LedgerNumbers:
    """Everything a scrape exports, in a handful of read-only queries."""
    report = await ledger_report(pool)
    async with pool.connection() as conn:
        intents = await (await conn.execute(_INTENTS_SQL)).fetchall()
        outcomes = await (await conn.execute(_SUBMIT_OUTCOMES_SQL)).fetchall()
        pending = await (await conn.execute(_PENDING_SQL)).fetchall()
        redelivery = await (await conn.execute(_REDELIVERY_SQL)).fetchone()
    return LedgerNumbers(
        intents=[IntentCount(state=s, channel=c, intents=n) for s, c, n in intents],
        submit_outcomes=[SubmitOutcomeCount(channel=c, outcome=k, observations=n) for c, k, n in outcomes],
        oldest_pending_seconds={channel: float(age) for channel, age in pending},
        inbox_awaiting_redelivery=redelivery[0] if redelivery else 0,
        report=report,
    )


class LedgerCollector(Collector):
    """The metric families of one scrape: the ledger's numbers, or only ``herald_ledger_up 0``
    when they could not be read (so an alert can tell "no data" from "all is well")."""

    def __init__(self, numbers: LedgerNumbers | None, scrape_seconds: float) -> None:
        self._numbers = numbers
        self._scrape_seconds = scrape_seconds

    def collect(self) -> Iterator[Metric]:
        numbers = self._numbers
        up = float(numbers is not None)
        yield _gauge("herald_ledger_up", "1 if this scrape read the ledger, 0 if it could not", up)
        yield _gauge(
            "herald_ledger_scrape_duration_seconds", "Time this scrape spent reading the ledger", self._scrape_seconds
        )
        if numbers is not None:
            yield from _intents(numbers)
            yield from _submit(numbers)
            yield from _inbox(numbers.report, numbers.inbox_awaiting_redelivery)
            yield from _whole_ledger(numbers.report)
            yield from _queue_ages(numbers.report)
            yield from _outages_and_streams(numbers.report)


def _intents(numbers: LedgerNumbers) -> Iterator[Metric]:
    # Every known (state, channel) pair has a series, 0 included, so rates and absences are plain.
    counts = {(state.value, channel.value): 0 for state in IntentState for channel in Channel}
    for row in numbers.intents:
        counts[(row.state, row.channel)] = row.intents
    by_state = GaugeMetricFamily(
        "herald_intents", "Intents in the ledger by current state and channel", labels=["state", "channel"]
    )
    for (state, channel), count in sorted(counts.items()):
        by_state.add_metric([state, channel], count)
    yield by_state

    coverage = GaugeMetricFamily(
        "herald_intents_coverage_ratio",
        "Share of finished intents whose outcome is definite (every terminal state but unknown)",
        labels=["channel"],
    )
    unknown = GaugeMetricFamily(
        "herald_intents_unknown_ratio",
        "Share of finished intents that ended unknown (raised for a human)",
        labels=["channel"],
    )
    for channel in sorted({channel for _, channel in counts}):
        finished = sum(n for (state, c), n in counts.items() if c == channel and state in _TERMINAL_VALUES)
        if finished == 0:
            continue  # no ratio of nothing: the series is absent rather than a made-up 0 or 1
        definite = sum(n for (state, c), n in counts.items() if c == channel and state in _DEFINITE_STATES)
        coverage.add_metric([channel], definite / finished)
        unknown.add_metric([channel], counts.get((IntentState.UNKNOWN.value, channel), 0) / finished)
    yield coverage
    yield unknown

    yield _gauge(
        "herald_intents_oldest_unresolved_age_seconds",
        "Age of the oldest intent without a terminal state (0 when none is open)",
        _seconds(numbers.report.oldest_unresolved_age),
    )


def _submit(numbers: LedgerNumbers) -> Iterator[Metric]:
    outcomes = CounterMetricFamily(
        "herald_submit_outcomes",
        "Submit calls by what they established (accepted, unknown, retryable, rejected, not_sent)",
        labels=["channel", "outcome"],
    )
    for row in sorted(numbers.submit_outcomes, key=lambda r: (r.channel, r.outcome)):
        outcomes.add_metric([row.channel, row.outcome], row.observations)
    yield outcomes

    queue = GaugeMetricFamily(
        "herald_submit_queue_oldest_age_seconds",
        "How long the oldest intent the ledger shows pending has waited for its next attempt (0: none waiting)",
        labels=["channel"],
    )
    for channel in Channel:
        queue.add_metric([channel.value], numbers.oldest_pending_seconds.get(channel.value, 0.0))
    yield queue


def _inbox(report: LedgerReport, awaiting_redelivery: int) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "herald_inbox_reports", "Delivery reports stored in the receipt inbox", value=report.inbox_rows
    )
    yield _gauge(
        "herald_inbox_undecided",
        "Stored reports not yet applied or ignored by their intent (the inbox backlog)",
        report.inbox_undecided,
    )
    yield _gauge(
        "herald_inbox_awaiting_redelivery",
        "Undecided reports whose signal failed; the drainer offers them again",
        awaiting_redelivery,
    )
    yield _gauge(
        "herald_inbox_oldest_undecided_age_seconds",
        "Age of the oldest undecided stored report (0 when none)",
        _seconds(report.inbox_oldest_undecided),
    )


def _whole_ledger(report: LedgerReport) -> Iterator[Metric]:
    """The report's whole-ledger percentiles and counts, for dashboards beside the live series."""
    quantiles = {
        "herald_submit_to_accept_seconds": (
            "Attempt prepared to accepted by the provider, over the whole ledger",
            {"0.5": report.submit_to_accept_p50_ms, "0.95": report.submit_to_accept_p95_ms},
        ),
        "herald_accept_to_terminal_seconds": (
            "Accepted to terminal state, over the whole ledger",
            {"0.5": report.accept_to_terminal_p50_ms, "0.95": report.accept_to_terminal_p95_ms},
        ),
        "herald_route_wait_seconds": (
            "Attempt prepared to taken by the submit activity (queue age), over the whole ledger; 1 is the longest",
            {"0.5": report.route_wait_p50_ms, "0.95": report.route_wait_p95_ms, "1": report.route_wait_max_ms},
        ),
    }
    for name, (help_text, values) in quantiles.items():
        family = GaugeMetricFamily(name, help_text, labels=["quantile"])
        for quantile, ms in values.items():
            if ms is not None:
                family.add_metric([quantile], ms / 1000)
        yield family
    yield CounterMetricFamily(
        "herald_key_conflicts", "Business keys reused with another payload, refused", value=report.key_conflicts
    )
    duplicates = CounterMetricFamily(
        "herald_duplicates_sent",
        "Copies sent beside another copy of the same intent, by provider/cause",
        labels=["cause"],
    )
    for cause, count in sorted(report.duplicates_by_cause.items()):
        duplicates.add_metric([cause], count)
    yield duplicates
    yield CounterMetricFamily(
        "herald_presumed_not_accepted_then_seen",
        "Attempts Herald concluded the provider never took that it had after all",
        value=report.presumed_then_seen,
    )
    yield CounterMetricFamily(
        "herald_refused_message_claims",
        "Claims on a provider message another intent's attempt already held, refused by the ledger",
        value=report.refused_claims,
    )


def _queue_ages(report: LedgerReport) -> Iterator[Metric]:
    """Queue age (attempt prepared -> provider answered) by priority key and by tenant over the
    report's window (the tenants that waited longest; a scrape keeps to TENANTS_SHOWN of them, so the
    series stay few however many tenants there are), and the intents that expired in the queue."""
    window = f"the last {QUEUE_WINDOW.total_seconds() / 3600:g} h"
    families = {
        by: (
            GaugeMetricFamily(
                f"herald_route_queue_age_by_{by}_seconds",
                f"Attempt prepared to the provider's answer, by {by}, over {window}; quantile 1 is the longest",
                labels=[by, "quantile"],
            ),
            GaugeMetricFamily(
                f"herald_expired_in_route_queue_by_{by}",
                f"Intents that expired while their submit was still queued on the route, by {by}, over {window}",
                labels=[by],
            ),
        )
        for by in ("priority", "tenant")
    }
    for age in report.queue_ages:
        quantiles, expired = families[age.by]
        for quantile, ms in (("0.5", age.p50_ms), ("0.95", age.p95_ms), ("1", age.oldest_ms)):
            if ms is not None:
                quantiles.add_metric([age.key, quantile], ms / 1000)
        expired.add_metric([age.key], age.expired_in_queue)
    for quantiles, expired in families.values():
        yield quantiles
        yield expired


def _outages_and_streams(report: LedgerReport) -> Iterator[Metric]:
    """An outage is visible at once, not discovered later as failures: intents waiting on an unreachable
    provider, and each ESP's event stream (when it last spoke, its redeliveries, who waits on its silence)."""
    now = datetime.now(UTC)
    waiting = _per_provider(
        "herald_unreachable_provider_intents", "Open intents whose latest attempts reached no provider"
    )
    oldest = _per_provider(
        "herald_unreachable_provider_seconds", "How long the oldest of them has found its provider unreachable"
    )
    for outage in report.outages:
        waiting.add_metric([outage.provider], outage.intents)
        oldest.add_metric([outage.provider], max((now - outage.since).total_seconds(), 0.0))
    yield waiting
    yield oldest
    # The route rule's view (herald.core.routes): 1 while new attempts skip the provider.
    skipped = _per_provider(
        "herald_provider_in_outage", "1 while routes skip the provider for new attempts (3 Unreachable in a row)"
    )
    skipped_for = _per_provider("herald_provider_outage_seconds", "How long routes have skipped the provider")
    for state in report.provider_states:
        skipped.add_metric([state.provider], float(state.outage_since is not None))
        if state.outage_since is not None:
            skipped_for.add_metric([state.provider], max((now - state.outage_since).total_seconds(), 0.0))
    yield skipped
    yield skipped_for
    silent = _per_provider("herald_event_stream_silent_seconds", "Seconds since the ESP's last event post arrived")
    redelivered = _per_provider(
        "herald_event_stream_redelivered_posts",
        "Event posts in the last 24 hours that arrived late (redelivered after an interruption)",
    )
    stalled = _per_provider(
        "herald_event_stream_waiting_intents",
        "Unknown e-mail submits waiting because the ESP's event stream is not flowing past them",
    )
    for stream in report.event_streams:
        if stream.last_post_at is not None:
            silent.add_metric([stream.provider], max((now - stream.last_post_at).total_seconds(), 0.0))
        redelivered.add_metric([stream.provider], stream.redelivered_posts_24h)
        stalled.add_metric([stream.provider], stream.waiting_intents)
    yield silent
    yield redelivered
    yield stalled


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _per_provider(name: str, help_text: str) -> GaugeMetricFamily:
    """A gauge with one series per provider (an outage's, an ESP event stream's)."""
    return GaugeMetricFamily(name, help_text, labels=["provider"])


def _seconds(value: timedelta | None) -> float:
    return value.total_seconds() if value else 0.0
