"""ListMessage: filters, paging, and Twilio's list envelope.

Twilio names its date filters ``DateSent``, ``DateSent<`` and ``DateSent>``
(the operator is part of the parameter name, URL-encoded as ``DateSent%3C``),
with ``<`` meaning "on or before" and ``>`` "on or after". Values may be a GMT
day (``2019-06-11``) or an instant (ISO 8601 or RFC 2822).

Pages are newest first. ``PageToken`` is ``PA<sid>`` (the page after message
``sid``) or ``PB<sid>`` (the page before it), so paging stays stable while new
messages arrive at the front of the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from emulator.messages import DateBound, ListFilter, MessageRecord, MessageStore

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_PARAMS = (("DateSent", "="), ("DateSent<", "<"), ("DateSent>", ">"))


class InvalidListQuery(ValueError):
    """A list parameter Twilio would refuse; the message names the parameter."""


def parse_date_bound(value: str) -> DateBound:
    """Parse one DateSent value: ``YYYY-MM-DD``, ISO 8601, or RFC 2822 (naive means GMT)."""
    value = value.strip()
    if _DAY.match(value):
        return DateBound(day=date.fromisoformat(value))
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        try:
            instant = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            raise InvalidListQuery(f"unsupported date format: {value!r}") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    return DateBound(instant=instant.astimezone(timezone.utc))


@dataclass(frozen=True)
class ListQuery:
    list_filter: ListFilter
    # Filter parameters as the client named them, echoed into every page URI.
    filter_params: tuple[tuple[str, str], ...]
    page_size: int
    page: int
    page_token: str | None


def parse_list_query(params: QueryParams) -> ListQuery:
    """Read filters and paging from the query string.

    Raises:
        InvalidListQuery: A value is malformed.
    """
    filter_params: list[tuple[str, str]] = []
    for name in ("To", "From"):
        if name in params:
            filter_params.append((name, params[name]))
    bounds: list[tuple[str, DateBound]] = []
    for name, relation in _DATE_PARAMS:
        if name in params:
            bounds.append((relation, parse_date_bound(params[name])))
            filter_params.append((name, params[name]))
    page_size = _int_param(params, "PageSize", DEFAULT_PAGE_SIZE, minimum=1)
    page = _int_param(params, "Page", 0, minimum=0)
    return ListQuery(
        list_filter=ListFilter(to=params.get("To"), from_=params.get("From"), date_sent=tuple(bounds)),
        filter_params=tuple(filter_params),
        page_size=min(page_size, MAX_PAGE_SIZE),
        page=page,
        page_token=params.get("PageToken") or None,
    )


def _int_param(params: QueryParams, name: str, default: int, minimum: int) -> int:
    if name not in params:
        return default
    try:
        value = int(params[name])
    except ValueError:
        raise InvalidListQuery(f"{name} must be an integer") from None
    if value < minimum:
        raise InvalidListQuery(f"{name} must be at least {minimum}")
    return value


def list_page(store: MessageStore, query: ListQuery, list_path: str) -> dict[str, Any]:
    """One page of the ListMessage answer, in Twilio's envelope."""
    matching = store.newest_first(query.list_filter)
    start = _page_start(matching, query)
    items = matching[start : start + query.page_size]

    def uri(page: int, token: str | None) -> str:
        params = [*query.filter_params, ("PageSize", str(query.page_size)), ("Page", str(page))]
        if token:
            params.append(("PageToken", token))
        return f"{list_path}?{urlencode(params)}"

    has_next = start + len(items) < len(matching)
    return {
        "messages": [record.resource() for record in items],
        "uri": uri(query.page, query.page_token),
        "first_page_uri": uri(0, None),
        "next_page_uri": uri(query.page + 1, "PA" + items[-1].sid) if has_next and items else None,
        "previous_page_uri": uri(max(query.page - 1, 0), "PB" + items[0].sid) if start > 0 and items else None,
        "page": query.page,
        "page_size": query.page_size,
        "start": start,
        "end": start + len(items) - 1 if items else start,
    }


def _page_start(matching: list[MessageRecord], query: ListQuery) -> int:
    token = query.page_token
    if token and token[:2] in ("PA", "PB"):
        index = next((i for i, record in enumerate(matching) if record.sid == token[2:]), None)
        if index is not None:
            return index + 1 if token.startswith("PA") else max(index - query.page_size, 0)
    # No usable token: Page is a plain page index.
    return query.page * query.page_size
