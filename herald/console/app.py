"""The console's HTTP side: its pages as routes, behind the access gate, over a read-only pool.

Every page is a GET (HEAD too) that reads the ledger afresh, except two POSTs. The search box's
reads too: a number or an address typed there travels in the body, is fingerprinted here with the
keyed fingerprint and never appears in an address, a log line or a page in clear. Opening a sent
text (herald.console.sent_text) goes through a second pool, the opener's, whose one grant records
the opening before it returns the text; it is there only when the deployment configured it. Every answer
carries headers that keep it out of caches, frames and other origins' reach; a ledger that does
not answer within the query timeout makes one page say so (503), never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from herald.console.access import AccessGate, AccessRules
from herald.console.markup import el
from herald.console.pages import SEARCH_MAX, STYLE, WebUi, moment, notice_href, page, refusal_page
from herald.console.intent_list import PERSON_RANGE, intent_list_page, older_href, person_query, read_query
from herald.console.params import ParameterRefused, one_line, only
from herald.console.sent_text import MAX_FORM_BYTES as OPENING_FORM_BYTES
from herald.console.sent_text import NOT_ENABLED, opened_body, operator_recordable, read_opening_form, text_section
from herald.console.outbox_backlog import OutboxBacklog
from herald.console.routes_page import CHART_BUCKETS, CHART_HOURS, RouteQueue, routes_page
from herald.console.single_flight import FRESH_FOR, SingleFlight
from herald.console.story import story_page
from herald.core.recipients import RecipientRefused
from herald.ledger.intent_pages import IntentLine, intent_page
from herald.ledger.notices import find_business_keys, notice_story
from herald.ledger.text_openings import OpeningOutcome, open_sent_text, openings_of
from herald.ledger.report import LedgerReport, ledger_report, queue_age_series, recent_expired_in_queue
from herald.outbox.relay import describe
from herald.privacy.fingerprints import Keyring
from herald.privacy.masked import masked_recipient, short_fingerprint
from herald.runtime.http_bodies import read_bounded
from herald.settings import ConsoleSettings, InvalidSetting
from herald.temporal.route_backlog import RouteBacklog

log = logging.getLogger("herald.console")

# The search form's body: one field of at most SEARCH_MAX characters, percent-encoded (x3), and its name.
MAX_FORM_BYTES = 4096
# A person's notices a page: the newest first, older ones by the page's link (herald.console.intent_list).
PERSON_SHOWN = 50
# The routes page's recent intents expired in the route queue: the newest this many, of this far back.
EXPIRED_SHOWN = 20
EXPIRED_RANGE = timedelta(hours=24)
# Sent with every answer: no script runs (there is none), nothing loads from elsewhere, no page
# may frame it, no address leaks to a link's target, nothing is cached.
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
]  # fmt: skip


def operator_of(request: Request) -> str:
    return request.scope["state"]["operator"]


def html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status)


def refused(request: Request, error: ParameterRefused | str, status: int = 400) -> HTMLResponse:
    return html(refusal_page(operator_of(request), status, str(error)), status)


# A route's backlog, by the route's workflow task queue (its submits wait on that queue's submit queue).
ReadBacklog = Callable[[str], Awaitable[RouteBacklog]]


class ConsolePages:
    """The handlers, over one read-only pool and the keyring that names a person (and, when
    configured, the opener's pool: herald_text_opener, migration 024)."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        keyring: Keyring,
        web_ui: WebUi,
        read_backlog: ReadBacklog | None,
        deadline: float,
        opener: AsyncConnectionPool | None = None,
        *,
        routes: tuple[str, ...] = (),
        outbox: OutboxBacklog | None = None,
        report_fresh_for: float = FRESH_FOR,
    ) -> None:
        self._pool = pool
        self._opener = opener
        self._keyring = keyring
        self._web_ui = web_ui
        self._read_backlog = read_backlog
        self._deadline = deadline
        self._routes = routes
        self._outbox = outbox
        # The whole-ledger report, computed once for every reader within report_fresh_for seconds.
        self._report: SingleFlight[LedgerReport] = SingleFlight(lambda: ledger_report(self._pool), report_fresh_for)

    async def home(self, request: Request) -> Response:
        try:
            only(request.query_params.multi_items(), ())
        except ParameterRefused as error:
            return refused(request, error)
        return html(
            page(
                "Herald console",
                operator_of(request),
                el("h1", "Find a notice"),
                el(
                    "p",
                    "In the box above: a business key, a workflow id, a provider's message id or our attempt "
                    "reference opens the notice's story; a phone number or an e-mail address lists that person's "
                    "notices (the server fingerprints it; it is never shown in clear).",
                    class_="muted",
                ),  # fmt: skip
                el(
                    "p",
                    el("a", "Intents", href="/intents"),
                    ": filtered lists. ",
                    el("a", "Routes", href="/routes"),
                    ": the numbers of starter.py report, providers in outage, queue age.",
                ),  # fmt: skip
            )
        )

    async def find(self, request: Request) -> Response:
        """The search box: GET ?q= for what may sit in an address, POST for anything, a person included."""
        try:
            if request.method == "POST":
                body = await read_bounded(request, MAX_FORM_BYTES)
                if body is None:
                    return refused(request, f"request body: larger than {MAX_FORM_BYTES} bytes", 413)
                try:
                    fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=4)
                except (UnicodeDecodeError, ValueError):
                    return refused(request, "request body: must be a form (application/x-www-form-urlencoded, UTF-8)")
                given = only(fields, ("q",))
            else:
                given = only(request.query_params.multi_items(), ("q",))
            q = one_line("q", given.get("q", ""), SEARCH_MAX)
        except ParameterRefused as error:
            return refused(request, error)
        if q[0] in "+＋" or "@" in q:
            if request.method != "POST":
                return refused(request, ParameterRefused(
                    "q", "a phone number or an e-mail address is looked up with the search form (POST): "
                         "in an address it would reach logs and browser history"))  # fmt: skip
            return await self._person(request, q)
        async with self._pool.connection() as conn:
            keys = await find_business_keys(conn, q)
        if len(keys) == 1:
            return RedirectResponse(notice_href(keys[0]), status_code=303)
        if not keys:
            return refused(
                request, "no notice has that business key, workflow id, provider message id or attempt reference", 404
            )
        return html(page("found", operator_of(request), el("h1", f"{len(keys)} notices"),
                         el("ul", *(el("li", el("a", key, href=notice_href(key))) for key in keys))))  # fmt: skip

    async def _person(self, request: Request, typed: str) -> Response:
        try:
            fingerprints = tuple(self._keyring.recipient_candidates(typed))
            shown = masked_recipient(typed)
        except RecipientRefused as error:
            return refused(request, ParameterRefused("q", f"not a recipient Herald accepts: {error.rule}"))
        query = person_query(list(fingerprints), datetime.now(UTC), PERSON_SHOWN)
        async with self._pool.connection() as conn:
            lines, more = await intent_page(conn, query.chosen, after=None, limit=PERSON_SHOWN)
        return html(
            page(
                "a person's notices",
                operator_of(request),
                el("h1", "notices for ", el("span", shown, class_="masked")),
                el(
                    "p",
                    "fingerprint ",
                    el("code", short_fingerprint(fingerprints[0])),
                    f" · the newest {PERSON_SHOWN} of the last {PERSON_RANGE.days} days"
                    if more
                    else f" · {len(lines)} in the last {PERSON_RANGE.days} days",
                    class_="muted",
                ),  # fmt: skip
                intent_table(lines),
                # Older notices by the keyed fingerprint: the person's number never goes in an address.
                el("p", el("a", "older →", href=older_href(query, more), rel="next"), class_="pager") if more else None,
            )
        )

    async def notice(self, request: Request) -> Response:
        try:
            key = one_line("key", only(request.query_params.multi_items(), ("key",)).get("key", ""), SEARCH_MAX)
        except ParameterRefused as error:
            return refused(request, error)
        story = await notice_story(self._pool, key)
        if story is None:
            return refused(request, "key: no notice has this business key in the ledger", 404)
        workflows = [c.history.workflow_id for c in story.channels]
        async with self._pool.connection() as conn:
            openings = await openings_of(conn, workflows)
        texts = {w: text_section(w, [o for o in openings if o.workflow_id == w], self._opener is not None)
                 for w in workflows}  # fmt: skip
        return html(story_page(story, operator_of(request), self._web_ui, texts))

    async def open_text(self, request: Request) -> Response:
        """POST only (a link, a prefetch or a checker never opens a text): the opening is recorded
        first, by the opener's login, and the text shown only once that row is committed."""
        if self._opener is None:
            return refused(request, NOT_ENABLED, 403)
        body = await read_bounded(request, OPENING_FORM_BYTES)
        if body is None:
            return refused(request, f"request body: larger than {OPENING_FORM_BYTES} bytes", 413)
        try:
            form = read_opening_form(body)
        except ParameterRefused as error:
            return refused(request, error)
        operator = operator_recordable(operator_of(request))
        sent = await open_sent_text(self._opener, workflow_id=form.workflow_id, operator=operator, reason=form.reason)
        # Which opening and its outcome: the text, the reason and the operator's words stay out of logs.
        log.info("text opening %d recorded: %s", sent.opening_id, sent.outcome.value)
        if sent.outcome is OpeningOutcome.REFUSED:
            return refused(request, "workflow: no intent has this workflow id (the attempt is recorded)", 404)
        return html(page("text as sent", operator_of(request), *opened_body(sent, form, operator)))

    async def intents(self, request: Request) -> Response:
        """Intents filtered by the page's parameters, a bounded page at a time (herald.console.intent_list)."""
        try:
            query = read_query(request.query_params.multi_items(), datetime.now(UTC))
        except ParameterRefused as error:
            return refused(request, error)
        async with self._pool.connection() as conn:
            lines, next_page = await intent_page(conn, query.chosen, after=query.after, limit=query.limit)
        return html(intent_list_page(query, lines, next_page, operator_of(request), intent_table(lines)))

    async def routes(self, request: Request) -> Response:
        """The report's numbers and the queue-age charts over the last ?hours= (1 by default)."""
        try:
            hours_given = only(request.query_params.multi_items(), ("hours",)).get("hours", str(CHART_HOURS[0]))
            if hours_given not in {str(h) for h in CHART_HOURS}:
                raise ParameterRefused("hours", "must be one of " + ", ".join(str(h) for h in CHART_HOURS))
        except ParameterRefused as error:
            return refused(request, error)
        hours = int(hours_given)
        report = await self._report.get()
        window = timedelta(hours=hours)
        points = await queue_age_series(self._pool, window=window, bucket=window / CHART_BUCKETS)
        expired = await recent_expired_in_queue(self._pool, within=EXPIRED_RANGE, limit=EXPIRED_SHOWN)
        backlogs, outbox = await asyncio.gather(self._backlogs(), self._outbox_line())
        body = routes_page(report, points, hours=hours, backlogs=backlogs, outbox=outbox, expired=expired,
                           expired_within=f"{EXPIRED_RANGE.total_seconds() / 3600:g} h", operator=operator_of(request),
                           now=datetime.now(UTC))  # fmt: skip
        return html(body)

    async def _backlogs(self) -> list[RouteQueue] | None:
        """Each route's submit queue now, from the Temporal server, asked at once; a queue the server
        does not answer for within the page's deadline is unknown, not fatal."""
        if self._read_backlog is None:
            return None  # no Temporal connection: the page says so
        read = self._read_backlog

        async def one(route: str) -> RouteQueue:
            try:
                return RouteQueue(route=route, backlog=await asyncio.wait_for(read(route), self._deadline))
            except (RPCError, RuntimeError, TimeoutError) as error:  # RuntimeError: the lazy client's failed connect
                return RouteQueue(route=route, unknown=f"the Temporal server did not answer: {type(error).__name__}")

        return list(await asyncio.gather(*(one(route) for route in self._routes)))

    async def _outbox_line(self) -> str:
        """The outbox relay's backlog as starter.py report prints it; unknown, not fatal, when the
        services' database does not answer within the page's deadline."""
        if self._outbox is None:
            return "outbox: not configured (HERALD_CONSOLE_OUTBOX_DATABASE_URL unset)"
        try:
            return describe(await asyncio.wait_for(self._outbox.read(), self._deadline))
        except InvalidSetting as error:
            return f"outbox: not read ({error})"
        except (DatabaseError, PoolTimeout, OSError, TimeoutError) as error:
            return f"outbox backlog: unknown ({type(error).__name__}: the outbox database did not answer)"

    async def style(self, request: Request) -> Response:
        return Response(STYLE, media_type="text/css")


def intent_table(lines: list[IntentLine]) -> object:
    """Intents as rows, newest first, each linking to its notice's story."""
    if not lines:
        return el("p", "none", class_="muted")
    head = el("tr", *(el("th", h) for h in ("created", "notice", "channel", "state", "template", "tenant", "category")))
    rows = [
        el(
            "tr",
            el("td", moment(line.created_at), class_="mono"),
            el("td", el("a", line.business_key, href=notice_href(line.business_key))),
            el("td", line.channel),
            el("td", el("span", line.state, class_=f"state {line.state}")),
            el("td", f"{line.template_id} v{line.template_version}"),
            el("td", line.tenant),
            el("td", line.category or "-"),
            data_workflow=line.workflow_id,
        )
        for line in lines
    ]
    return el("table", el("thead", head), el("tbody", *rows), class_="intents")


class SecurityHeaders:
    """ASGI middleware: SECURITY_HEADERS on every answer, refusals included."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self._app(scope, receive, sending if scope["type"] == "http" else send)


def build_console(
    pool: AsyncConnectionPool,
    keyring: Keyring,
    settings: ConsoleSettings,
    namespace: str,
    *,
    read_backlog: ReadBacklog | None = None,
    opener: AsyncConnectionPool | None = None,
    routes: tuple[str, ...] = (),
    outbox: OutboxBacklog | None = None,
    report_fresh_for: float = FRESH_FOR,
) -> ASGIApp:
    """The console over `pool` (a read-only login's, with a statement timeout), naming people with
    `keyring`, linking workflows into the Web UI's `namespace`, let in by `settings`' access rules;
    with `read_backlog`, the routes page asks the Temporal server for each of `routes`' submit queue
    (the routes' workflow task queues); with `outbox`, it reads the outbox's backlog; with `opener`
    (a herald_text_opener login's pool), an operator may open a notice's sent text. The report is
    computed at most once per `report_fresh_for` seconds, whoever asks."""
    web_ui = WebUi(base_url=settings.temporal_ui_url, namespace=namespace)
    pages = ConsolePages(pool, keyring, web_ui, read_backlog, settings.query_timeout, opener, routes=routes,
                         outbox=outbox, report_fresh_for=report_fresh_for)  # fmt: skip

    async def unavailable(request: Request, error: Exception) -> Response:
        # The class only: a database error's text may quote row values.
        log.warning("a console page could not read the ledger (%s)", type(error).__name__)
        return refused(request, "the ledger did not answer in time; try again", 503)

    app = Starlette(
        routes=[
            Route("/", pages.home, methods=["GET"]),
            Route("/find", pages.find, methods=["GET", "POST"]),
            Route("/notice", pages.notice, methods=["GET"]),
            Route("/notice/text", pages.open_text, methods=["POST"]),
            Route("/routes", pages.routes, methods=["GET"]),
            Route("/intents", pages.intents, methods=["GET"]),
            Route("/console.css", pages.style, methods=["GET"]),
        ],
        exception_handlers={DatabaseError: unavailable, PoolTimeout: unavailable, TimeoutError: unavailable},
    )
    return SecurityHeaders(AccessGate(app, AccessRules.of(settings)))
