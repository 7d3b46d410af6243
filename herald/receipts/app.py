"""The status-callback endpoints, and the inbound-message one: verify, store, commit, answer 2xx, then signal.

The order is the contract. A report is a durable fact to be stored first and
interpreted second: nothing is signalled before its inbox row is committed, and
nothing is answered 2xx unless it was committed, so a provider that redelivers
on failure never loses a report to us. A recipient's reply is a fact of the same
kind: its request is committed before Twilio is answered.

``POST /twilio/status`` takes one Twilio status callback (form, X-Twilio-Signature)::

    body larger than MAX_TWILIO_BODY_BYTES (read no further, parse nothing) .... 413
    not an urlencoded form ....................................................... 400
    signature missing or not over this URL (default port either way) and form ... 403
    signed, but a field the ledger cannot hold (``twilio_form.unstorable_reason``):
      recorded in receipt_rejections with the rule, logged .................... 200
    not committed within the store deadline, or the database away ............. 503
    otherwise: committed to the inbox ........................................... 200

``POST /twilio/inbound`` takes one incoming message, a person's reply to our number (Twilio's
"A message comes in" webhook: a form signed like the status callback); ``twilio_inbound`` holds
its rules. Answered by the first rule that applies::

    body larger than MAX_TWILIO_INBOUND_BYTES (read no further, parse nothing) ... 413
    not an urlencoded form ....................................................... 400
    signature missing or not over this URL ...................................... 403
    signed, but for another account, number or Messaging Service than ours
      (``foreign_reason``; checked when the receipt server knows ours) ......... 403
    signed and ours, but no MessageSid or a From that is no E.164 number
      (``unusable_reason``) ..................................................... 400
    not committed within the store deadline, or the database away ............. 503
    otherwise: the request committed to recipient_requests (STOP, START, HELP or
      a reply without a keyword; once per MessageSid however often it is posted),
      answered with TwiML: empty, or with HERALD_TWILIO_INBOUND_REPLIES a short
      <Message> for STOP, START and HELP ........................................ 200

Only the sender's keyed fingerprint and the classification are stored; the body and the
numbers are neither stored nor logged. Nothing is signalled: the policy gate reads the
request at the next attempt to that recipient.

``POST /sendgrid/events`` takes one SendGrid Signed Event Webhook post, answered by
the first rule that applies, in this order::

    body larger than MAX_SENDGRID_BODY_BYTES (read no further) ........... 413
    no verification key configured ........................................ 403
    signature or timestamp header missing ................................. 403
    timestamp not whole seconds, more than SENDGRID_MAX_AGE_SECONDS old or
      more than SENDGRID_MAX_LEAD_SECONDS ahead (a replayed signed post) .. 403
    signature does not sign timestamp + body .............................. 403
    correctly signed but malformed (a ``BodyRule``) ....................... 400
    our events not all committed within the store deadline, or the
      database away (some batches may have committed: see below) ......... 503
    otherwise: every event of ours committed, in transactions of at most
      SENDGRID_STORE_BATCH events, the last of them with a mark of the post
      in event_stream_marks (when it arrived, which event times and
      submissions it covered: what the e-mail silence rule reads) ......... 200

Nothing is stored for any refusal. SendGrid retries every non-2xx answer for up to
24 hours, so a 503 loses nothing, and a 400 for a signed body (SendGrid's bytes, not
an attacker's) is a loud refusal rather than a silent 200: if the rule is ours and
wrong, a fix deployed within the day still receives the whole batch.

A post is stored in batches, not in one transaction: one transaction of 5,000 events held its
connection and the loop for seconds, and its per-row results stayed in memory together. Storing
in several transactions is safe because the post is answered 2xx only after all of them have
committed, SendGrid redelivers the whole post on anything else, and the inbox is idempotent (a
redelivered post finds the rows its first try committed and adds the rest). The post's mark is
written in the transaction of its last batch, so a mark exists only for a post whose every event
is committed, as the silence rule assumes; rejections (events the ledger cannot hold) are recorded
there too, once per stored post rather than once per try.

``POST /infobip/reports`` takes one Infobip report post: ``infobip_reports`` holds its rules.

``GET /unsubscribe/<token>`` and ``POST /unsubscribe/<token>``: the one-click unsubscribe link every
marketing e-mail carries (``herald.privacy.unsubscribe`` reads the token, ``unsubscribe_pages`` is what a
person sees). GET changes nothing, whatever the token: a mail scanner that fetches every link in a
message must not unsubscribe anyone. POST is a mail client's RFC 8058 one-click request or the
confirmation page's button, which posts the same pair: the body must be exactly the field
``List-Unsubscribe=One-Click``, urlencoded or multipart (``herald.privacy.unsubscribe.is_one_click``); the
token alone says who and from what. Answered by the first rule that applies::

    POST body larger than MAX_UNSUBSCRIBE_BODY_BYTES (read no further) ......... 413
    POST body not the one field List-Unsubscribe=One-Click, in either encoding  400
    no unsubscribe key configured (HERALD_UNSUBSCRIBE_KEYS) ..................... 403
    token too long, not base64url, not the layout, or of an unknown version ... 400
    token signed with a key we do not hold, or its signature does not match ... 403
    token for transactional or account mail (no such link is ever made) ....... 403
    token expired ............................................................... 410
    GET: the confirmation page, a button that POSTs to the same URL ........... 200
    POST not committed within the store deadline, or the database away ........ 503
    POST: the unsubscribe committed to recipient_requests (source one_click,
      once per token: the same link posted again finds its row) ............... 200

A refused link stores nothing and is logged with its rule only: no page and no log line holds the
token, the address or the fingerprint. A link posted again is answered 200 with the same page (RFC
8058 clients may post twice, and the request was the person's); its row keeps its first time, so an
opt-in or a lift recorded in between is not undone by it.

How the routes are isolated (issue 21: one signed 5,000-event post made a quarter of the Twilio
callbacks arriving 2 s later answer 503). The cause, measured: every non-final report of the post
was held for the 2 s hold in its own task, and all of them were released at the same moment, so
1,700 to 2,500 deliveries queued in the pool (8 connections) at once; a Twilio callback's store
queued behind them for up to 2.7 s, or past the pool's 1 s wait was answered 503, and each of those
deliveries that timed out logged its own traceback (1,100 to 1,700 of them, 20,000 to 30,000 log
lines). The post itself was one transaction of 5,000 round trips: 1.6 to 1.9 s, and on a busy host
more than the 5 s store deadline, so SendGrid got a 503 too. Now every kind of work takes its
connections from its own bounded share, and the shares add up to the pool
(POOL_CONNECTIONS_NEEDED, 13: ``python -m herald.receipts`` opens its pool that size):

    Twilio: the group commit's one transaction at a time ..................... 1
            recording rejections (TWILIO_REJECTION_CONNECTIONS) ............... 1
            routing: signalling stored reports (ROUTING_CONNECTIONS) .......... 2
            incoming messages, one at a time (TWILIO_INBOUND_CONNECTIONS) ..... 1
    SendGrid: storing posts, one at a time (SENDGRID_STORE_CONNECTIONS) ....... 1
              routing (ROUTING_CONNECTIONS) ................................... 2
    unsubscribe links, one at a time (UNSUBSCRIBE_CONNECTIONS) ............... 1
    Infobip: storing posts, one at a time, and routing (infobip_reports) ..... 3
    the drainer, one pass at a time ........................................... 1

Work beyond a share waits on that share's semaphore, never in the pool's queue, so a request of
one route never waits for a connection behind the other route's work; each route's routing also
keeps its own bounded backlog and hold (``herald.receipts.routing``). The CPU-heavy step of a post
(parsing up to 5,000 events and building their rows, about 110 ms) runs in a worker thread, and a
batch's rows are read between two waits for the database, so the loop keeps answering callbacks
meanwhile. Measured after the change, same post: answered in 1.0-1.3 s, at most 5 connections in
use, Twilio callbacks answered in at most 70 ms, and nothing logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import uvicorn
from psycopg import AsyncConnection
from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from temporalio.client import Client

from herald.core.reply_keywords import classify_reply
from herald.core.rows import InboxReport
from herald.ledger import event_streams, store
from herald.ledger.esp_unsubscribes import record_event_unsubscribes
from herald.ledger.group_commit import GroupCommit
from herald.ledger.recipient_requests import RecipientRequest, record_requests
from herald.privacy.fingerprints import Keyring
from herald.privacy.unsubscribe import TokenKeys, TokenRefused, UnsubscribeToken, is_one_click
from herald.privacy.unsubscribe import read as read_token
from herald.providers import sendgrid_signature
from herald.providers.sendgrid_events import MAX_EVENTS, EventBatch, EventBodyError, unsubscribes
from herald.providers.twilio_signature import is_valid_signature
from herald.receipts import infobip_reports, unsubscribe_pages
from herald.receipts.delivery import StoredReport
from herald.receipts.rejections import kept_fields
from herald.receipts.routing import ReportRouter, error_kind
from herald.receipts.sendgrid_posts import (
    MAX_SENDGRID_BODY_BYTES,
    SENDGRID_PROVIDER,
    PreparedPost,
    log_rejections,
    prepare_post,
    signed_post_refusal,
    stored_summary,
)
from herald.receipts.twilio_form import (
    MAX_TWILIO_BODY_BYTES,
    NotAForm,
    is_storable_attempt_ref,
    parse_form,
    unstorable_reason,
)
from herald.receipts.twilio_inbound import (
    MAX_TWILIO_INBOUND_BYTES,
    foreign_reason,
    recipient_request,
    twiml_answer,
    unusable_reason,
)
from herald.runtime.http_bodies import read_bounded
from herald.settings import ReceiptSettings, TwilioSettings

log = logging.getLogger("herald.receipts")
_T = TypeVar("_T")

PROVIDER = "twilio"
# What the inbox keeps of a Twilio status callback: the fields that identify the fact and explain
# its verdict, named one by one (Twilio's status callback parameters). Everything else is dropped:
# To, From and Body, and whatever a channel adds or Twilio adds later (ChannelToAddress holds the
# recipient on some channels; location fields describe the person): a drop-list misses those.
_STORED_TWILIO_FIELDS = frozenset({
    "MessageSid", "SmsSid", "SmsMessageSid", "AccountSid", "MessagingServiceSid",
    "MessageStatus", "SmsStatus", "ErrorCode", "ApiVersion", "RawDlrDoneDate", "NumSegments", "NumMedia",
})  # fmt: skip


def _stored_twilio_fields(fields: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in fields.items() if key in _STORED_TWILIO_FIELDS}
# Events per transaction when a post is stored: one pipelined round trip and a few milliseconds of
# reading results each (5,000 events in one transaction took 1.6 s and stalled the loop 0.2 s).
SENDGRID_STORE_BATCH = 500
# The routes' shares of the pool (see the module docstring); the receipt server's pool is their sum.
TWILIO_REJECTION_CONNECTIONS = 1
SENDGRID_STORE_CONNECTIONS = 1
ROUTING_CONNECTIONS = 2
# Replies come a few at a time (a STOP is one short INSERT), and a burst of them after a marketing
# send must not take the connections the status callbacks store with, nor wait behind them.
TWILIO_INBOUND_CONNECTIONS = 1
# One-click unsubscribes come in bursts after a marketing send (a mail client posts the moment its
# button is pressed): one short INSERT each, on a connection of their own, so a burst neither takes
# the callbacks' connections nor waits behind them.
UNSUBSCRIBE_CONNECTIONS = 1
# RFC 8058's body is "List-Unsubscribe=One-Click" (26 bytes, a few hundred as multipart): 4 KiB
# holds any real one, and nothing past it is read.
MAX_UNSUBSCRIBE_BODY_BYTES = 4096
_GROUP_COMMIT_CONNECTIONS = 1
_DRAINER_CONNECTIONS = 1
POOL_CONNECTIONS_NEEDED = (
    _GROUP_COMMIT_CONNECTIONS + TWILIO_REJECTION_CONNECTIONS + TWILIO_INBOUND_CONNECTIONS
    + SENDGRID_STORE_CONNECTIONS + 2 * ROUTING_CONNECTIONS + _DRAINER_CONNECTIONS + UNSUBSCRIBE_CONNECTIONS
    + infobip_reports.CONNECTIONS
)  # fmt: skip
# Reports a route's router may hold waiting to be signalled: four full posts. Past it a post's
# reports are left to the drainer (committed, offered after its grace), so memory stays bounded
# when posts arrive faster than they can be signalled.
MAX_ROUTING_BACKLOG = 4 * MAX_EVENTS


class ReceiptEndpoint:
    def __init__(
        self,
        settings: ReceiptSettings,
        *,
        auth_token: str,
        pool: AsyncConnectionPool,
        client: Client,
        keyring: Keyring,
        twilio: TwilioSettings | None = None,
    ) -> None:
        """The receipt server's section of the settings, and Twilio's auth token (the key its
        signatures are made with). ``keyring`` names a reply's sender as their intents name them.
        ``twilio``, when given, says whose replies are ours (its account and sender,
        ``twilio_inbound.foreign_reason``); without it every signed reply is. Raises ValueError
        when the section's ``sendgrid_public_key`` is not a P-256 public key."""
        self._auth_token = auth_token
        self._keyring = keyring
        self._twilio = twilio
        self._inbound_replies = settings.inbound_replies
        self._inbound_stores = asyncio.Semaphore(TWILIO_INBOUND_CONNECTIONS)
        # The keys unsubscribe links are verified with (None: every link is refused).
        self._unsubscribe_keys = TokenKeys.from_settings(settings.unsubscribe)
        self._unsubscribe_stores = asyncio.Semaphore(UNSUBSCRIBE_CONNECTIONS)
        # Loaded once: a malformed key stops the server at start instead of refusing every post.
        self._sendgrid_key = (
            sendgrid_signature.load_public_key(settings.sendgrid_public_key)
            if settings.sendgrid_public_key is not None
            else None
        )
        self._public_url = settings.public_url.rstrip("/")
        self._pool = pool
        # Twilio posts one report per request: concurrent ones share a transaction (group commit),
        # and one that arrives alone is a single autocommitted INSERT.
        self._inbox: GroupCommit[InboxReport, dict[str, Any]] = GroupCommit(
            pool, store.store_reports, alone_in_autocommit=True
        )
        self._store_timeout = settings.store_timeout
        self._twilio_rejections = asyncio.Semaphore(TWILIO_REJECTION_CONNECTIONS)
        self._sendgrid_stores = asyncio.Semaphore(SENDGRID_STORE_CONNECTIONS)
        # One router per route: its own connections, backlog and held reports, so a post's
        # thousands of reports queue behind each other and never in front of a callback's.
        self._twilio_router, self._sendgrid_router = (
            ReportRouter(
                route=route,
                pool=pool,
                client=client,
                hold_seconds=settings.hold_seconds,
                concurrency=ROUTING_CONNECTIONS,
                max_backlog=MAX_ROUTING_BACKLOG,
            )
            for route in (PROVIDER, SENDGRID_PROVIDER)
        )
        self.infobip = infobip_reports.InfobipReports(settings, pool=pool, client=client)
        max_size = getattr(pool, "max_size", None)
        if isinstance(max_size, int) and max_size < POOL_CONNECTIONS_NEEDED:
            log.warning(
                "the ledger pool has %d connections, fewer than the %d the receipt routes' shares add up "
                "to: a busy route can make the other wait for a connection",
                max_size, POOL_CONNECTIONS_NEEDED,
            )  # fmt: skip

    async def close(self) -> None:
        """Stop routing (at server shutdown): reports not signalled yet are committed, and the drainer offers them."""
        await asyncio.gather(self._twilio_router.close(), self._sendgrid_router.close(), self.infobip.close())

    def signed_url(self, request: Request) -> str:
        """The URL the provider called, as it signed it: our public base, the path and the query."""
        query = request.url.query
        return f"{self._public_url}{request.url.path}" + (f"?{query}" if query else "")

    async def _signed_twilio_form(self, request: Request, limit: int, what: str) -> dict[str, str] | Response:
        """The form Twilio posted and signed, or the refusal: 413 past `limit` bytes (read no further),
        400 when it is not a form, 403 when X-Twilio-Signature does not sign this URL and form."""
        body = await read_bounded(request, limit)
        if body is None:
            return PlainTextResponse(f"request body: larger than {limit} bytes, the limit for {what}", status_code=413)
        try:
            params = parse_form(body, request.headers.get("content-type"))
        except NotAForm as error:
            return PlainTextResponse(str(error), status_code=400)
        signature = request.headers.get("X-Twilio-Signature")
        if not signature or not is_valid_signature(self._auth_token, self.signed_url(request), params, signature):
            return PlainTextResponse("X-Twilio-Signature: missing or does not match this request", status_code=403)
        return dict(params)

    async def twilio_status(self, request: Request) -> Response:
        """One Twilio status callback: bound, parse, verify, then store it (or its rejection) and answer."""
        fields = await self._signed_twilio_form(request, MAX_TWILIO_BODY_BYTES, "one status callback")
        if isinstance(fields, Response):
            return fields
        attempt_ref = request.query_params.get("attempt")
        reason = unstorable_reason(fields, attempt_ref)
        if reason is not None:
            return await self._reject(PROVIDER, reason, fields, attempt_ref)
        try:
            row = await self._within_deadline(self._store_twilio(fields, attempt_ref))
        except _STORE_ERRORS as error:
            return _not_stored(PROVIDER, error)
        return Response(status_code=200, background=BackgroundTask(self._twilio_router.route, [StoredReport(row)]))

    async def _store_twilio(self, fields: dict[str, str], attempt_ref: str | None) -> dict[str, Any]:
        return await self._inbox.write(
            InboxReport(
                provider=PROVIDER,
                provider_message_id=fields["MessageSid"],
                provider_status=fields["MessageStatus"],
                attempt_ref=attempt_ref,
                error_code=int(fields["ErrorCode"]) if fields.get("ErrorCode") else None,
                provider_event_at=_dlr_done_date(fields.get("RawDlrDoneDate")),
                payload=_stored_twilio_fields(fields),
            )
        )

    async def twilio_inbound(self, request: Request) -> Response:
        """One incoming message: bound, parse, verify, check it is ours, record its request, answer TwiML."""
        fields = await self._signed_twilio_form(request, MAX_TWILIO_INBOUND_BYTES, "one incoming message")
        if isinstance(fields, Response):
            return fields
        foreign = foreign_reason(fields, self._twilio)
        if foreign is not None:
            log.warning("refused a signed incoming message: %s", foreign)
            return PlainTextResponse(foreign, status_code=403)
        unusable = unusable_reason(fields)
        if unusable is not None:
            log.warning("refused a signed incoming message: %s", unusable)
            return PlainTextResponse(unusable, status_code=400)
        kind, keyword = classify_reply(fields.get("Body", ""), fields.get("OptOutType"))
        asked = recipient_request(fields, kind, keyword, datetime.now(UTC), self._keyring)
        try:
            await self._within_deadline(self._store_inbound(asked))
        except _STORE_ERRORS as error:
            return _not_stored(PROVIDER, error, what="incoming message")
        return Response(twiml_answer(kind, replies=self._inbound_replies), media_type="text/xml")

    async def _store_inbound(self, asked: RecipientRequest) -> int:
        # One at a time on the inbound share; a MessageSid posted again finds its row (no new one).
        async with self._inbound_stores, self._pool.connection() as conn, conn.transaction():
            return await record_requests(conn, [asked])

    async def unsubscribe_page(self, request: Request) -> Response:
        """GET /unsubscribe/<token>: the confirmation page for a link of ours; changes nothing."""
        token = self._unsubscribe_token(request)
        if isinstance(token, Response):
            return token
        return unsubscribe_pages.confirmation(token.category)

    async def unsubscribe(self, request: Request) -> Response:
        """POST /unsubscribe/<token>: bound the body, verify the token, record the unsubscribe, answer."""
        body = await read_bounded(request, MAX_UNSUBSCRIBE_BODY_BYTES)
        if body is None:
            return unsubscribe_pages.refused(f"request body: larger than {MAX_UNSUBSCRIBE_BODY_BYTES} bytes", 413)
        if not is_one_click(request.headers.get("content-type"), body):
            # A scanner's or a script's POST: RFC 8058 asks the exact pair, so nobody is unsubscribed by accident.
            log.info("refused an unsubscribe POST: %s", unsubscribe_pages.NOT_ONE_CLICK)
            return unsubscribe_pages.not_one_click()
        token = self._unsubscribe_token(request)
        if isinstance(token, Response):
            return token
        asked = RecipientRequest(
            fingerprint=token.fingerprint, channel="email", request="unsubscribe", category=token.category,
            source="one_click", detail="one-click unsubscribe link", source_ref=token.reference,
            requested_at=datetime.now(UTC),
        )  # fmt: skip
        try:
            await self._within_deadline(self._store_unsubscribe(asked))
        except _STORE_ERRORS as error:
            log.warning("could not store an unsubscribe (%s); answering 503", _error_kind(error))
            return unsubscribe_pages.not_recorded()
        return unsubscribe_pages.unsubscribed(token.category)

    def _unsubscribe_token(self, request: Request) -> UnsubscribeToken | Response:
        """The link's verified token, or the refusal page (its rule logged, never the token)."""
        if self._unsubscribe_keys is None:
            return unsubscribe_pages.refused("unsubscribe links are not accepted here: no key is configured", 403)
        try:
            return read_token(self._unsubscribe_keys, request.path_params["token"], now=datetime.now(UTC))
        except TokenRefused as refused:
            log.info("refused an unsubscribe link: %s", refused.rule.value)
            return unsubscribe_pages.refused(refused.rule.value, refused.rule.status_code)

    async def _store_unsubscribe(self, asked: RecipientRequest) -> int:
        # One at a time on the unsubscribe share; the same link posted again finds its row (no new one).
        async with self._unsubscribe_stores, self._pool.connection() as conn, conn.transaction():
            return await record_requests(conn, [asked])

    async def _reject(self, provider: str, reason: str, fields: dict[str, str], attempt_ref: str | None) -> Response:
        """Record a signed report that can never be stored, with its rule, and answer 2xx so it stops."""
        kept = kept_fields(_stored_twilio_fields(fields))
        ref = attempt_ref if attempt_ref is not None and is_storable_attempt_ref(attempt_ref) else None

        async def record() -> int:
            async with self._twilio_rejections, self._pool.connection() as conn, conn.transaction():
                return await store.store_rejection(conn, provider=provider, reason=reason, fields=kept, attempt_ref=ref)

        try:
            rejection_id = await self._within_deadline(record())
        except _STORE_ERRORS as error:
            return _not_stored(provider, error)
        log.warning("recorded a signed %s report as rejection %d: %s", provider, rejection_id, reason)
        return PlainTextResponse(f"not stored as a report: {reason}; recorded as rejection {rejection_id}\n")

    async def _within_deadline(self, storing: Coroutine[Any, Any, _T]) -> _T:
        """The store's result, or StoreDeadline once ``store_timeout`` passes (a hung database).

        The store runs in its own task and is abandoned, not awaited, at the deadline: cancelling a
        query on a hung server can itself take psycopg ten seconds, and the provider is owed a 503
        well inside its own timeout. Nothing was committed unless the commit had returned; if it
        had, the provider's redelivery finds the same row (the inbox is idempotent).
        """
        task = asyncio.ensure_future(storing)
        done, _ = await asyncio.wait({task}, timeout=self._store_timeout)
        if not done:
            task.cancel()
            task.add_done_callback(_consume_outcome)
            raise StoreDeadline(f"the ledger did not answer within {self._store_timeout:g} s")
        return task.result()

    async def infobip_post(self, request: Request) -> Response:
        """Infobip's delivery reports: authenticate, verify each result, store the verified, answer, route."""
        post = await self.infobip.read(request)
        if isinstance(post, Response):
            return post
        try:
            rows = await self._within_deadline(self.infobip.store(post))
        except _STORE_ERRORS as error:
            return _not_stored(infobip_reports.INFOBIP_PROVIDER, error)
        return self.infobip.answer(post, rows)

    async def sendgrid_events(self, request: Request) -> Response:
        """SendGrid's Signed Event Webhook: bound, verify, parse, store every event of ours in batches."""
        body = await read_bounded(request, MAX_SENDGRID_BODY_BYTES)
        if body is None:
            return PlainTextResponse(
                f"request body: larger than {MAX_SENDGRID_BODY_BYTES} bytes (1 MiB), the limit for one event post",
                status_code=413,
            )
        refusal = signed_post_refusal(self._sendgrid_key, request.headers, body)
        if refusal is not None:
            return PlainTextResponse(refusal, status_code=403)
        try:
            # Up to 5,000 events parsed and turned into rows: tens of milliseconds of pure CPU (more
            # on a slow host), spent off the loop so callbacks of both routes are answered meanwhile.
            post = await asyncio.to_thread(prepare_post, body)
        except EventBodyError as error:
            log.warning("refused a signed %s post: %s", SENDGRID_PROVIDER, error.rule.value)
            return PlainTextResponse(str(error), status_code=400)
        try:
            rows = await self._within_deadline(self._store_events(post))
        except _STORE_ERRORS as error:
            return _not_stored(SENDGRID_PROVIDER, error)
        log_rejections(post.batch)
        return PlainTextResponse(
            stored_summary(post.batch, len(rows)),
            status_code=200,
            background=BackgroundTask(self._sendgrid_router.route, [StoredReport(row) for row in rows]),
        )

    async def _store_events(self, post: PreparedPost) -> list[dict[str, Any]]:
        """Insert every event in transactions of at most SENDGRID_STORE_BATCH, the last one with the
        post's rejections and its mark; returns each event's inbox row, in the prepared order.

        One post is stored at a time, on one connection (the SendGrid route's store share).
        """
        batch = post.batch
        if not post.reports and not batch.unstorable:
            return []
        chunks = [post.reports[i : i + SENDGRID_STORE_BATCH] for i in range(0, len(post.reports), SENDGRID_STORE_BATCH)]
        rows: list[dict[str, Any]] = []
        async with self._sendgrid_stores, self._pool.connection() as conn:
            for index, chunk in enumerate(chunks or [[]]):
                # Pipelined: a batch's INSERTs cost one round trip together.
                async with conn.pipeline(), conn.transaction():
                    if chunk:
                        rows.extend(await store.store_reports(conn, chunk))
                    if index == max(len(chunks) - 1, 0):
                        await self._finish_post(conn, batch)
        return rows

    async def _finish_post(self, conn: AsyncConnection, batch: EventBatch) -> None:
        """The post's rejections and mark, in the transaction of its last batch: they commit only
        once every event of the post has."""
        for rejected in batch.unstorable:
            await store.store_rejection(
                conn, provider=SENDGRID_PROVIDER, reason=rejected.reason, fields=kept_fields(rejected.payload),
                attempt_ref=rejected.attempt_ref,
            )  # fmt: skip
        # What people asked through SendGrid's own unsubscribe links, committed with the events.
        await record_event_unsubscribes(conn, unsubscribes(batch.events, datetime.now(UTC)))
        # The stream's liveness: what the silence rule reads (herald.core.silence).
        await event_streams.record_mark(
            conn,
            provider=SENDGRID_PROVIDER,
            event_times=[event.occurred_at for event in batch.events if event.occurred_at is not None],
            attempt_refs=[event.attempt_ref for event in batch.events],
        )


class StoreDeadline(Exception):
    """The ledger did not answer in time; whatever it was doing is abandoned."""


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    # An abandoned store's late error is expected (its connection was cancelled); it is read here
    # so asyncio does not log it as never retrieved.
    if not task.cancelled():
        task.exception()


# Storing failed and nothing was committed: answer 5xx so the provider redelivers.
_STORE_ERRORS = (DatabaseError, PoolTimeout, OSError, StoreDeadline)


def _not_stored(provider: str, error: BaseException, *, what: str = "report") -> Response:
    # Not committed, so not acknowledged: the provider redelivers and nothing is lost.
    log.warning("could not store a %s %s (%s); answering 503", provider, what, _error_kind(error))
    return PlainTextResponse(f"{what} not stored; retry later", status_code=503)


def _error_kind(error: BaseException) -> str:
    # A deadline's message is ours (no values in it); any other error is named by its kind only.
    return str(error) if isinstance(error, StoreDeadline) else error_kind(error)


def _dlr_done_date(value: str | None) -> datetime | None:
    """Twilio's RawDlrDoneDate is the carrier's YYMMDDhhmm (UTC); anything else is ignored."""
    if not value or len(value) != 10 or not value.isdigit():
        return None
    try:
        return datetime.strptime(value, "%y%m%d%H%M").replace(tzinfo=UTC)
    except ValueError:
        return None


async def health(_: Request) -> Response:
    return PlainTextResponse("ok")


def create_receipt_app(endpoint: ReceiptEndpoint, **starlette_options: Any) -> Starlette:
    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await endpoint.close()  # routing runs detached from requests: stopped with the server

    return Starlette(
        routes=[
            Route("/twilio/status", endpoint.twilio_status, methods=["POST"]),
            Route("/twilio/inbound", endpoint.twilio_inbound, methods=["POST"]),
            Route("/sendgrid/events", endpoint.sendgrid_events, methods=["POST"]),
            Route(infobip_reports.ROUTE, endpoint.infobip_post, methods=["POST"]),
            Route("/unsubscribe/{token}", endpoint.unsubscribe_page, methods=["GET"]),
            Route("/unsubscribe/{token}", endpoint.unsubscribe, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        **{"lifespan": lifespan, **starlette_options},
    )


def build_receipt_server(endpoint: ReceiptEndpoint, host: str, port: int) -> uvicorn.Server:
    """The uvicorn server for the receipt app, as the receipt process and the tests run it."""
    return uvicorn.Server(
        uvicorn.Config(create_receipt_app(endpoint), host=host, port=port, log_level="warning", access_log=False)
    )
