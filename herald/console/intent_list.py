"""Intents that operators filter: by state, channel, template, tenant, category and time, a page at a time.

Every parameter is read by one rule and refused by name (400, ``name: rule``), so no address can
make the ledger run an unbounded query: the time range is at most MAX_RANGE wide (a day back from
now when not given), a page at most MAX_PAGE rows, and the next page starts after the last row's
(created_at, workflow id), a keyset the page itself writes into its "older" link, never an OFFSET.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from herald.console.markup import Markup, el
from herald.console.pages import moment, page
from herald.console.params import ParameterRefused, only
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.core.send_policy import TENANT_PATTERN, Category
from herald.ledger.intent_pages import IntentFilter, IntentLine, Position

DEFAULT_RANGE = timedelta(days=1)
MAX_RANGE = timedelta(days=31)
DEFAULT_PAGE = 50
MAX_PAGE = 200
PARAMETERS = ("state", "channel", "template", "tenant", "category", "since", "until", "limit", "after")

_TEMPLATE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_TENANT = re.compile(TENANT_PATTERN)
# The keyset an "older" link carries: the last row's creation time, '~', its workflow id.
_AFTER = re.compile(r"(?P<at>[0-9T:.+\-Z ]{10,40})~(?P<workflow>[^\x00-\x1f\x7f]{1,300})")


class IntentQuery(Frozen):
    """A list page's parameters, each checked: what the ledger is asked and how the page links on."""

    chosen: IntentFilter
    limit: int
    after: Position | None
    # The parameters as given (checked), for the links to the next page and to the first.
    given: dict[str, str]


def _one_of(name: str, value: str, allowed: list[str]) -> str:
    if value not in allowed:
        raise ParameterRefused(name, "must be one of " + ", ".join(allowed))
    return value


# The ledger's years, with room either side for a range's arithmetic (no overflow at datetime's ends).
_YEARS = (1971, 9998)


def _moment(name: str, value: str) -> datetime:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise ParameterRefused(
            name, "must be a date or a time in ISO 8601, like 2026-12-06 or 2026-12-06T10:30Z"
        ) from None
    if not _YEARS[0] <= at.year <= _YEARS[1]:
        raise ParameterRefused(name, f"must be a time in the years {_YEARS[0]} to {_YEARS[1]}")
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # a time without a zone is UTC, as pages show


def read_query(given_pairs: list[tuple[str, str]], now: datetime) -> IntentQuery:
    """The list's parameters, or ParameterRefused naming the first one that breaks its rule."""
    given = only(given_pairs, PARAMETERS)
    state = _one_of("state", given["state"], [s.value for s in IntentState]) if "state" in given else None
    channel = _one_of("channel", given["channel"], [c.value for c in Channel]) if "channel" in given else None
    category = _one_of("category", given["category"], [c.value for c in Category]) if "category" in given else None
    template = given.get("template")
    if template is not None and not _TEMPLATE.fullmatch(template):
        raise ParameterRefused("template", "must be a template id: 1 to 100 letters, digits, '_', '.' or '-'")
    tenant = given.get("tenant")
    if tenant is not None and not _TENANT.fullmatch(tenant):
        raise ParameterRefused(
            "tenant", "must be a tenant id: 1 to 48 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
        )
    until = _moment("until", given["until"]) if "until" in given else now
    since = _moment("since", given["since"]) if "since" in given else until - DEFAULT_RANGE
    if since >= until:
        raise ParameterRefused("since", "must be before until")
    if until - since > MAX_RANGE:
        raise ParameterRefused("since", f"the range from since to until may span at most {MAX_RANGE.days} days")
    limit = DEFAULT_PAGE
    if "limit" in given:
        text = given["limit"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PAGE):
            raise ParameterRefused("limit", f"must be a whole number from 1 to {MAX_PAGE}")
        limit = int(text)
    after = None
    if "after" in given:
        found = _AFTER.fullmatch(given["after"])
        try:
            at = datetime.fromisoformat(found["at"]) if found else None
        except ValueError:
            at = None
        if found is None or at is None or at.tzinfo is None:
            raise ParameterRefused(
                "after", "must be the position an older-page link gives (a time, '~', a workflow id)"
            )
        after = Position(created_at=at, workflow_id=found["workflow"])
    chosen = IntentFilter(since=since, until=until, state=state, channel=channel, template_id=template, tenant=tenant,
                          category=category)  # fmt: skip
    return IntentQuery(chosen=chosen, limit=limit, after=after, given=given)


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _filters(query: IntentQuery) -> Markup:
    given, chosen = query.given, query.chosen

    def choice(name: str, options: list[str]) -> Markup:
        return el("label", name, el("select", el("option", "any", value=""),
                                    *(el("option", o, value=o, selected=given.get(name) == o) for o in options),
                                    name=name))  # fmt: skip

    def text(name: str, value: str | None, hint: str) -> Markup:
        return el("label", name, el("input", type="text", name=name, value=value, placeholder=hint))

    return el(
        "form",
        choice("state", [s.value for s in IntentState]),
        choice("channel", [c.value for c in Channel]),
        text("template", given.get("template"), "template id"),
        text("tenant", given.get("tenant"), "tenant id"),
        choice("category", [c.value for c in Category]),
        text("since", _utc(chosen.since), "ISO 8601, UTC"),
        text("until", _utc(chosen.until), "ISO 8601, UTC"),
        el("label", "per page", el("input", type="number", name="limit", value=str(query.limit), min=1, max=MAX_PAGE)),
        el("button", "Filter", type="submit"),
        method="get",
        action="/intents",
        class_="filters",
    )


def intent_list_page(query: IntentQuery, lines: list[IntentLine], next_page: Position | None, operator: str,
                     table: Markup) -> str:  # fmt: skip
    """The filter form, the page of intents (`table`), and links to the first page and the next older one."""
    # The range is fixed in the links, so a page reached by "older" lists what the first page's range held.
    pinned = {**query.given, "since": query.chosen.since.isoformat(), "until": query.chosen.until.isoformat()}
    pinned.pop("after", None)
    links = [el("a", "newest", href="/intents?" + urlencode(pinned))] if query.after else []
    if next_page is not None:
        after = f"{next_page.created_at.isoformat()}~{next_page.workflow_id}"
        links.append(el("a", "older →", href="/intents?" + urlencode({**pinned, "after": after}), rel="next"))
    span = f"created {moment(query.chosen.since)} to {moment(query.chosen.until)}"
    return page(
        "intents",
        operator,
        el("h1", "Intents"),
        _filters(query),
        el(
            "p", f"{len(lines)} shown, newest first; {span}" + ("; more are older" if next_page else ""), class_="muted"
        ),
        table,
        el("p", *links, class_="pager"),
    )
