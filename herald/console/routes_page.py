"""The routes at a glance: the numbers ``starter.py report`` prints, from the same queries, as a page.

Coverage against delivered, the unknown share, duplicates sent, intents open and the oldest; the
providers the route rule skips (in outage since when, whether a probe is due) and the intents
waiting on an unreachable one; each event stream's last post and the e-mails waiting on its
silence; queue age by priority and by tenant, as figures over the report's window and as charts
over time; the recipients' requests. The report's own text is on the page too, so the two can be
held side by side: they are one reading (``herald.ledger.report.ledger_report``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from herald.console.chart import Point, Series, line_chart
from herald.console.markup import Markup, el, fragment
from herald.console.pages import delay, moment, page
from herald.ledger.report import QUEUE_WINDOW, TENANTS_SHOWN, LedgerReport, QueueAgePoint

# The windows the chart may span, in hours: each drawn in CHART_BUCKETS buckets.
CHART_HOURS = (1, 6, 24)
CHART_BUCKETS = 60
# Tenants drawn: the report's longest waits first; more lines than this is a tangle.
TENANTS_DRAWN = 5


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


def routes_page(
    report: LedgerReport, points: list[QueueAgePoint], *, hours: int, backlog: str, operator: str, now: datetime
) -> str:
    return page(
        "routes",
        operator,
        el("h1", "Routes"),
        el("p", f"read {moment(now)}; the numbers of starter.py report, from the same queries", class_="muted"),
        _cards(report),
        el("h2", "providers"),
        _providers(report, now),
        el("p", backlog, class_="backlog muted"),
        el("h2", "queue age over time"),
        _charts(report, points, hours, now),
        el("h2", "queue age by priority and tenant"),
        _queue_ages(report),
        el("p", el("a", "intents that expired", href="/intents?state=expired"), ": the list, newest first."),
        el("h2", "event streams"),
        _streams(report),
        el("h2", "recipients' requests"),
        _consent(report),
        el("details", el("summary", "as starter.py report prints it"), el("pre", report.render(), class_="report")),
    )
