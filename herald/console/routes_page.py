"""The routes at a glance: the numbers ``starter.py report`` prints, from the same queries, as a page.

Coverage against delivered, the unknown share, duplicates sent, intents open and the oldest; the
providers the route rule skips (in outage since when, whether a probe is due) and the intents
waiting on an unreachable one; each event stream's last post and the e-mails waiting on its
silence; queue age by priority and by tenant, as figures over the report's window and as charts
over time; the recipients' requests. The report's own text is on the page too, so the two can be
held side by side: they are one reading (``herald.ledger.report.ledger_report``), computed at most
once per few seconds for every reader (``herald.console.single_flight``: the page says when, and in
how long). Read afresh on every load: each route's submit queue from the Temporal server, the
outbox's backlog from the services' database, the newest intents that expired in the route queue.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from herald.console.chart import Point, Series, line_chart
from herald.console.markup import Markup, el, fragment
from herald.console.pages import delay, moment, notice_href, page
from herald.console.single_flight import Computed
from herald.core.outcomes import Frozen
from herald.ledger.report import QUEUE_WINDOW, TENANTS_SHOWN, ExpiredInQueue, LedgerReport, QueueAgePoint
from herald.temporal.route_backlog import LaneBacklog, RouteBacklog
from herald.temporal.task_queues import submit_task_queue

# The windows the chart may span, in hours: each drawn in CHART_BUCKETS buckets.
CHART_HOURS = (1, 6, 24)
CHART_BUCKETS = 60
# Tenants drawn: the report's longest waits first; more lines than this is a tangle.
TENANTS_DRAWN = 5


class RouteQueue(Frozen):
    """One route's submit queue as the Temporal server counted it now, or why it is unknown."""

    route: str  # the route's workflow task queue
    backlog: RouteBacklog | None = None
    unknown: str = ""


def _ms(value: float | None) -> str:
    return "-" if value is None else delay(value / 1000)


def _card(label: str, figure: str, note: str = "", *, alarm: bool = False) -> Markup:
    return el("div", el("div", label, class_="muted"), el("div", figure, class_="figure"),
              el("div", note, class_="muted") if note else None, class_="card alarm" if alarm else "card")  # fmt: skip


def _cards(report: LedgerReport) -> Markup:
    causes = ", ".join(f"{cause} {count}" for cause, count in sorted(report.duplicates_by_cause.items()))
    return el(
        "div",
        _card("intents", f"{report.intents:,}", f"{report.open_intents:,} open"),
        _card("coverage", f"{report.coverage_pct:.1f}%", "a known terminal outcome recorded"),
        _card("delivered", f"{report.delivered_pct:.1f}%"),
        _card("unknown", f"{report.unknown_pct:.1f}%", alarm=report.unknown_pct > 0),
        _card("oldest unresolved", str(report.oldest_unresolved_age or "-")),
        _card(
            "duplicates sent",
            str(report.duplicates_sent),
            causes or f"presumed then seen {report.presumed_then_seen}",
            alarm=report.duplicates_sent > 0,
        ),  # fmt: skip
        _card("refused double claims", str(report.refused_claims), alarm=report.refused_claims > 0),
        _card("inbox undecided", str(report.inbox_undecided), f"oldest {report.inbox_oldest_undecided or '-'}"),
        _card(
            "submission → acceptance",
            f"p50 {_ms(report.submit_to_accept_p50_ms)}",
            f"p95 {_ms(report.submit_to_accept_p95_ms)}",
        ),  # fmt: skip
        _card(
            "acceptance → terminal",
            f"p50 {_ms(report.accept_to_terminal_p50_ms)}",
            f"p95 {_ms(report.accept_to_terminal_p95_ms)}",
        ),  # fmt: skip
        class_="cards",
    )


def _table(head: tuple[str, ...], rows: list[Markup], empty: str) -> Markup:
    if not rows:
        return el("p", empty, class_="muted")
    return el("table", el("thead", el("tr", *(el("th", h) for h in head))), el("tbody", *rows))


def _providers(report: LedgerReport, now: datetime) -> Markup:
    rows = []
    for state in report.provider_states:
        if state.outage_since is not None:
            standing = el("strong", f"in outage since {moment(state.outage_since)} ({delay(now - state.outage_since)})",
                          class_="state unknown")  # fmt: skip
        else:
            standing = el("span", "answering", class_="state delivered")
        rows.append(el("tr", el("td", state.provider), el("td", standing),
                       el("td", "due" if state.probe_due else "-"),
                       el("td", f"{state.last_mark.value} at {moment(state.last_mark_at)}"),
                       data_provider=state.provider))  # fmt: skip
    waiting = [
        el(
            "tr",
            el("td", o.provider),
            el("td", str(o.intents)),
            el("td", moment(o.since)),
            el("td", delay(now - o.since)),
        )
        for o in report.outages
    ]
    return fragment(
        _table(
            ("provider", "route rule", "probe", "last mark"),
            rows,
            "no provider has been watched: every submit answered",
        ),
        el("h3", "waiting on an unreachable provider"),
        _table(("provider", "intents", "since", "for"), waiting, "none"),
    )


def _streams(report: LedgerReport) -> Markup:
    rows = [
        el(
            "tr",
            el("td", e.provider),
            el("td", moment(e.last_post_at) if e.last_post_at else "never"),
            el("td", str(e.redelivered_posts_24h)),
            el("td", str(e.waiting_intents)),
            el("td", moment(e.waiting_since)),
        )  # fmt: skip
        for e in report.event_streams
    ]
    head = ("provider", "last post", "redelivered posts (24 h)", "e-mails waiting on its silence", "since")
    return _table(head, rows, "no event stream has posted")


def _queue_ages(report: LedgerReport) -> Markup:
    rows = [
        el(
            "tr",
            el("td", a.by),
            el("td", a.key),
            el("td", f"{a.attempts:,}"),
            el("td", _ms(a.p50_ms)),
            el("td", _ms(a.p95_ms)),
            el("td", _ms(a.oldest_ms)),
            el("td", str(a.expired_in_queue)),
        )  # fmt: skip
        for a in report.queue_ages
    ]
    window = f"{QUEUE_WINDOW.total_seconds() / 3600:g} h"
    more = f" ({report.tenants_not_shown} more tenants, shorter waits)" if report.tenants_not_shown else ""
    return fragment(
        el(
            "p",
            f"attempt prepared → the provider's answer, last {window}{more}; route wait p50 "
            f"{_ms(report.route_wait_p50_ms)}, p95 {_ms(report.route_wait_p95_ms)}; held by the send policy "
            f"{report.policy_held} (longest {_ms(report.policy_hold_max_ms)})",
            class_="muted",
        ),  # fmt: skip
        _table(
            ("by", "key", "attempts", "p50", "p95", "oldest", "expired in the route queue"),
            rows,
            "no attempt answered in the window",
        ),  # fmt: skip
    )


def _charts(report: LedgerReport, points: list[QueueAgePoint], hours: int, now: datetime) -> Markup:
    start = now - timedelta(hours=hours)
    shown_tenants = [a.key for a in report.queue_ages if a.by == "tenant"][:TENANTS_DRAWN]

    def series(by: str, keys: list[str]) -> list[Series]:
        return [
            Series(name=f"{by} {key}", points=[
                Point(at=p.bucket_start, seconds=p.p95_ms / 1000, note=f"{p.attempts} attempts")
                for p in points if p.by == by and p.key == key
            ])
            for key in keys
        ]  # fmt: skip

    priorities = sorted({p.key for p in points if p.by == "priority"}, key=lambda k: (not k.isdigit(), k))
    tenants = shown_tenants or sorted({p.key for p in points if p.by == "tenant"})[:TENANTS_DRAWN]
    choose = el("p", "window: ", *(
        fragment(" ", el("a", f"{h} h", href=f"/routes?hours={h}") if h != hours else el("strong", f"{h} h"))
        for h in CHART_HOURS
    ), class_="muted")  # fmt: skip
    return fragment(
        choose,
        line_chart(f"queue age p95 by priority, last {hours} h", series("priority", priorities), start=start, end=now),
        line_chart(
            f"queue age p95 by tenant (the {min(TENANTS_DRAWN, TENANTS_SHOWN)} longest waits), last {hours} h",
            series("tenant", tenants),
            start=start,
            end=now,
        ),  # fmt: skip
    )


def _consent(report: LedgerReport) -> Markup:
    rows = [
        el(
            "tr",
            el("td", c.request),
            el("td", c.source),
            el("td", c.channel),
            el("td", str(c.count)),
            el("td", moment(c.last_at)),
        )  # fmt: skip
        for c in report.consent
    ]
    return _table(("request", "by", "channel", "count", "last"), rows, "none")


def _backlogs(queues: list[RouteQueue] | None) -> Markup:
    """One line per route: its submit queue's tasks and the oldest's wait, by priority key."""
    if queues is None:
        return el("p", "route backlog: not read (the console has no Temporal connection)", class_="backlog muted")
    rows = []
    for queue in queues:
        backlog = queue.backlog
        if backlog is None:
            cells = [el("td", el("span", "unknown", class_="state unknown")), el("td", "-"), el("td", queue.unknown)]
        else:
            levels = [level for level in backlog.by_priority if level.tasks or level.added_per_second]
            oldest = max((level.oldest_seconds for level in backlog.by_priority), default=0.0)
            by_priority = "   ".join(
                f"priority {level.priority}: {level.tasks} queued, oldest {level.oldest_seconds:,.1f} s" for level in levels
            )  # fmt: skip
            cells = [el("td", f"{backlog.tasks:,}"), el("td", f"{oldest:,.1f} s"),
                     el("td", by_priority or "empty", *_lane(backlog.lane))]  # fmt: skip
        rows.append(el("tr", el("td", submit_task_queue(queue.route), class_="mono"), *cells, data_route=queue.route))
    return fragment(
        el("p", "each route's submit queue now, as the Temporal server counts it (approximate)", class_="muted"),
        _table(("submit queue", "queued", "oldest", "by priority"), rows, "no route configured"),
    )


def _lane(lane: LaneBacklog | None) -> list[Markup]:
    """The route's urgent lane under its submit queue's line, marked when no worker polls it while
    urgent intents wait there."""
    if lane is None:
        return []
    unpolled = bool(lane.tasks) and not lane.pollers
    return [el("div", lane.render(), class_="lane warn" if unpolled else "lane")]


def _expired(expired: list[ExpiredInQueue], within: str) -> Markup:
    rows = [
        el(
            "tr",
            el("td", moment(e.at), class_="mono"),
            el("td", el("a", e.business_key, href=notice_href(e.business_key))),
            el("td", e.channel),
            el("td", f"{e.template_id} v{e.template_version}"),
            el("td", e.tenant),
            data_workflow=e.workflow_id,
        )  # fmt: skip
        for e in expired
    ]
    return _table(("expired", "notice", "channel", "template", "tenant"), rows, f"none in the last {within}")


def routes_page(
    reading: Computed[LedgerReport],
    points: list[QueueAgePoint],
    *,
    hours: int,
    backlogs: list[RouteQueue] | None,
    outbox: str,
    expired: list[ExpiredInQueue],
    operator: str,
    now: datetime,
    expired_within: str = "24 h",
) -> str:
    report = reading.value
    return page(
        "routes",
        operator,
        el("h1", "Routes"),
        el(
            "p",
            f"as of {reading.at:%H:%M:%S} UTC, computed in {reading.seconds:,.1f} s (shared by every reader for a few "
            "seconds): the numbers of starter.py report, from the same queries",
            class_="muted as-of",
        ),  # fmt: skip
        _cards(report),
        el("h2", "providers"),
        _providers(report, now),
        el("h2", "route backlog"),
        _backlogs(backlogs),
        el("h2", "outbox"),
        el("p", outbox, class_="outbox"),
        el("h2", "queue age over time"),
        _charts(report, points, hours, now),
        el("h2", "queue age by priority and tenant"),
        _queue_ages(report),
        el("h3", f"expired in the route queue, the newest of the last {expired_within}"),
        _expired(expired, expired_within),
        el("p", el("a", "intents that expired", href="/intents?state=expired"), ": the list, newest first."),
        el("h2", "event streams"),
        _streams(report),
        el("h2", "recipients' requests"),
        _consent(report),
        el("details", el("summary", "as starter.py report prints it"), el("pre", report.render(), class_="report")),
    )
