"""Intents that operators filter: by state, channel, template, tenant, category, time and person, a page at a time.

Every parameter is read by one rule and refused by name (400, ``name: rule``), so no address can
make the ledger run an unbounded query: the time range is at most MAX_RANGE wide (a day back from
now when not given), a page at most MAX_PAGE rows, and the next page starts after the last row's
(created_at, workflow id), a keyset the page itself writes into its "older" link, never an OFFSET.

A person is never named in an address: their number or address is typed into the search form
(POST), and the person's page links its older notices here by keyed fingerprint (``person=``, the
HMACs under the keys held, never the bare SHA-256 a number could be recovered from), over up to a
year (PERSON_RANGE), as the fingerprint's index bounds that read.
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
from herald.privacy.masked import short_fingerprint

DEFAULT_RANGE = timedelta(days=1)
MAX_RANGE = timedelta(days=31)
DEFAULT_PAGE = 50
MAX_PAGE = 200
# A person's notices: this far back (the fingerprint's index bounds the read, not the range).
PERSON_RANGE = timedelta(days=366)
# One fingerprint per key held (rotation keeps a few keys, not dozens).
PERSON_KEYS_MAX = 8
PARAMETERS = ("state", "channel", "template", "tenant", "category", "since", "until", "limit", "after", "person")

_TEMPLATE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_TENANT = re.compile(TENANT_PATTERN)
# The keyset an "older" link carries: the last row's creation time, '~', its workflow id.
_AFTER = re.compile(r"(?P<at>[0-9T:.+\-Z ]{10,40})~(?P<workflow>[^\x00-\x1f\x7f]{1,300})")
# A keyed fingerprint (herald.privacy.fingerprints): a key id, ':', an HMAC-SHA-256 in hex.
_KEYED_FINGERPRINT = re.compile(r"[A-Za-z0-9._-]{1,64}:[0-9a-f]{64}")


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
    person = _person("person", given["person"]) if "person" in given else None
    widest = PERSON_RANGE if person else MAX_RANGE
    until = _moment("until", given["until"]) if "until" in given else now
    since = _moment("since", given["since"]) if "since" in given else until - (widest if person else DEFAULT_RANGE)
    if since >= until:
        raise ParameterRefused("since", "must be before until")
    if until - since > widest:
        raise ParameterRefused(
            "since",
            f"the range from since to until may span at most {widest.days} days"
            + ("" if person else f" ({PERSON_RANGE.days} for one person)"),
        )
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
                          category=category, recipient_fingerprints=person)  # fmt: skip
    return IntentQuery(chosen=chosen, limit=limit, after=after, given=given)


def _person(name: str, value: str) -> tuple[str, ...]:
    """A person's keyed fingerprints, as their page links them: 1 to PERSON_KEYS_MAX, ','-separated."""
    found = tuple(value.split(","))
    if not (len(found) <= PERSON_KEYS_MAX and all(_KEYED_FINGERPRINT.fullmatch(f) for f in found)):
        raise ParameterRefused(
            name, f"must be the keyed fingerprints a person's page links (a key id, ':', 64 hex digits; "
                  f"at most {PERSON_KEYS_MAX}, separated by ',')"
        )  # fmt: skip
    return found


def person_query(fingerprints: list[str], now: datetime, limit: int) -> IntentQuery:
    """The first page of a person's notices, found by `fingerprints` (only the keyed ones go in its links)."""
    keyed = [f for f in fingerprints if _KEYED_FINGERPRINT.fullmatch(f)][:PERSON_KEYS_MAX]
    until = now + timedelta(minutes=1)  # an intent recorded as the page is read, by a clock a little ahead
    chosen = IntentFilter(since=until - PERSON_RANGE, until=until, recipient_fingerprints=tuple(fingerprints))
    return IntentQuery(chosen=chosen, limit=limit, after=None, given={"person": ",".join(keyed), "limit": str(limit)})


def older_href(query: IntentQuery, next_page: Position) -> str:
    """The list's next (older) page: the same filters and range, starting after `next_page`."""
    after = f"{next_page.created_at.isoformat()}~{next_page.workflow_id}"
    return "/intents?" + urlencode({**_pinned(query), "after": after})


def _pinned(query: IntentQuery) -> dict[str, str]:
    # The range is fixed in the links, so a page reached by "older" lists what the first page's range held.
    pinned = {**query.given, "since": query.chosen.since.isoformat(), "until": query.chosen.until.isoformat()}
    pinned.pop("after", None)
    return pinned


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

    person = given.get("person")
    return el(
        "form",
        el("input", type="hidden", name="person", value=person) if person else None,
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
    links = [el("a", "newest", href="/intents?" + urlencode(_pinned(query)))] if query.after else []
    if next_page is not None:
        links.append(el("a", "older →", href=older_href(query, next_page), rel="next"))
    span = f"created {moment(query.chosen.since)} to {moment(query.chosen.until)}"
    if query.chosen.recipient_fingerprints:
        span += f"; one person's, fingerprint {short_fingerprint(query.chosen.recipient_fingerprints[0])}"
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
