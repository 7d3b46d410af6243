"""What every console page shares: the frame (header, search, navigation), times and delays as
operators read them, links into the Temporal Web UI, and the style sheet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

from herald.console.markup import Markup, el, raw
from herald.core.outcomes import Frozen

SEARCH_HINT = "business key, workflow id, provider message id, attempt reference, phone number or e-mail address"
# The longest thing the search box takes: a business key and channel, or an e-mail address (RFC 5321).
SEARCH_MAX = 320


def page(title: str, operator: str, *body: object) -> str:
    """A whole HTML document: the frame around `body`, titled `title`, saying whom it is shown to."""
    head = el(
        "head",
        el("meta", charset="utf-8"),
        el("meta", name="viewport", content="width=device-width, initial-scale=1"),
        el("title", f"{title} · Herald console"),
        el("link", rel="stylesheet", href="/console.css"),
    )
    header = el(
        "header",
        el("a", "Herald console", href="/", class_="brand"),
        el("nav", el("a", "Intents", href="/intents"), el("a", "Routes", href="/routes")),
        search_form(),
        el("span", "operator: ", el("strong", operator), class_="operator"),
    )
    return "<!doctype html>\n" + el("html", head, el("body", header, el("main", *body)), lang="en")


def search_form(value: str = "") -> Markup:
    """One box for everything an operator may hold; posted, so a number typed never lands in a URL."""
    return el(
        "form",
        el(
            "input",
            type="search",
            name="q",
            value=value or None,
            placeholder=SEARCH_HINT,
            required=True,
            maxlength=SEARCH_MAX,
            aria_label="find a notice or a person",
            autocomplete="off",
        ),  # fmt: skip
        el("button", "Find", type="submit"),
        method="post",
        action="/find",
        class_="search",
    )


def moment(at: datetime | None) -> str:
    """A time as the ledger holds it, in UTC to the millisecond (`-` for none)."""
    if at is None:
        return "-"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def clock(at: datetime) -> str:
    """A time of day in UTC to the millisecond, for rows whose date the page already says."""
    return at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]


def delay(between: timedelta | float | None) -> str:
    """A delay to a tenth of a second below a minute, then minutes and seconds, then hours."""
    if between is None:
        return "-"
    seconds = between.total_seconds() if isinstance(between, timedelta) else between
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{sign}{seconds / 3600:.1f} h"


def notice_href(business_key: str) -> str:
    return "/notice?" + urlencode({"key": business_key})


class WebUi(Frozen):
    """Addresses in the Temporal Web UI for one namespace."""

    base_url: str
    namespace: str

    def runs(self, workflow_id: str) -> str:
        """Every run of the workflow (continued-as-new ones too), as the UI's list filtered by its id."""
        query = f'WorkflowId="{workflow_id}"'
        return f"{self.base_url}/namespaces/{quote(self.namespace, safe='')}/workflows?" + urlencode({"query": query})

    def run(self, workflow_id: str, run_id: str) -> str:
        """One run's event history."""
        return (
            f"{self.base_url}/namespaces/{quote(self.namespace, safe='')}/workflows/"
            f"{quote(workflow_id, safe='')}/{quote(run_id, safe='')}/history"
        )


def refusal_page(operator: str, status: int, message: str) -> str:
    """A refused or failed request as a page: the parameter and the rule, or what did not answer."""
    title = {400: "Refused", 404: "Not found", 503: "Ledger unavailable"}.get(status, "Error")
    return page(title, operator, el("h1", title), el("p", message, class_="refusal"))


STYLE = raw(
    """
:root { --ink: #1d232b; --muted: #5b6673; --line: #d9dee4; --paper: #fbfcfd; --accent: #2456a6;
        --good: #1f7a3d; --bad: #a12b2b; --wait: #8a5a00; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: var(--paper); }
header { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; padding: .6rem 1.2rem; background: #fff; border-bottom: 1px solid var(--line); }
header .brand { font-weight: 700; color: var(--ink); text-decoration: none; }
header nav a { margin-right: .8rem; }
header .operator { margin-left: auto; color: var(--muted); }
form.search { display: flex; gap: .4rem; flex: 1 1 26rem; }
form.search input { flex: 1; padding: .35rem .5rem; border: 1px solid var(--line); border-radius: 4px; font: inherit; }
button { padding: .35rem .8rem; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 4px; font: inherit; cursor: pointer; }
main { padding: 1rem 1.2rem 3rem; }
a { color: var(--accent); }
h1 { font-size: 1.35rem; margin: .2rem 0 .8rem; word-break: break-all; }
h2 { font-size: 1.1rem; margin: 0 0 .5rem; }
h3 { font-size: .95rem; margin: 1rem 0 .3rem; color: var(--muted); text-transform: uppercase; letter-spacing: .03em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .25rem .45rem; border-bottom: 1px solid var(--line); }
th { color: var(--muted); font-weight: 600; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .92em; }
.muted { color: var(--muted); }
.refusal { padding: .6rem .8rem; border-left: 4px solid var(--bad); background: #fff; }
.channels { display: grid; gap: 1rem; grid-template-columns: repeat(auto-fit, minmax(30rem, 1fr)); align-items: start; }
/* A grid item is as wide as its widest cell unless told otherwise: long provider ids wrap inside the card. */
.channel { min-width: 0; }
table.events td.id { overflow-wrap: anywhere; }
table.events td.mono, table.transitions td.mono { white-space: nowrap; }
.channel { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .9rem 1rem; }
.state { display: inline-block; padding: .05rem .45rem; border-radius: 3px; font-size: .85rem; background: #eef1f4; }
.state.delivered, .state.relayed { background: #e3f3e8; color: var(--good); }
.state.undelivered, .state.permanent_failure, .state.expired, .state.unknown, .state.suppressed, .state.cancelled { background: #f8e6e6; color: var(--bad); }
.state.pending, .state.submitting, .state.accepted, .state.retryable_failure { background: #fbf0dc; color: var(--wait); }
dl.facts { display: grid; grid-template-columns: 9rem 1fr; gap: .15rem .6rem; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-all; }
ol.attempts { list-style: none; padding: 0; margin: 0; }
ol.attempts > li { border-left: 3px solid var(--accent); padding: .3rem 0 .3rem .7rem; margin: .5rem 0; }
.verdict { padding: .45rem .6rem; background: #f3f5f8; border-radius: 4px; }
.ignored td { color: var(--muted); }
.pager { margin-top: .8rem; display: flex; gap: 1rem; }
form.filters { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: end; margin-bottom: 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: .85rem; color: var(--muted); }
form.filters input, form.filters select { font: inherit; padding: .25rem .4rem; border: 1px solid var(--line); border-radius: 4px; }
main > h2 { margin-top: 1.4rem; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; margin-bottom: 1rem; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .6rem .9rem; min-width: 11rem; }
.card .figure { font-size: 1.4rem; font-weight: 700; }
.card.alarm { border-color: var(--bad); }
svg.chart { background: #fff; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; height: auto; }
"""
)
