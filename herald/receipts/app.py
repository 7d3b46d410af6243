"""The status-callback endpoints: verify, store, commit, answer 2xx, then signal.

The order is the contract. A report is a durable fact to be stored first and
interpreted second: nothing is signalled before its inbox row is committed, and
nothing is answered 2xx unless it was committed, so a provider that redelivers
on failure never loses a report to us.

``POST /twilio/status`` takes one Twilio status callback (form, X-Twilio-Signature).
``POST /sendgrid/events`` takes one SendGrid Signed Event Webhook post, answered by
the first rule that applies, in this order::

    body larger than MAX_SENDGRID_BODY_BYTES (read no further) ........... 413
    no verification key configured ........................................ 403
    signature or timestamp header missing ................................. 403
    timestamp not whole seconds, more than SENDGRID_MAX_AGE_SECONDS old or
      more than SENDGRID_MAX_LEAD_SECONDS ahead (a replayed signed post) .. 403
    signature does not sign timestamp + body .............................. 403
    correctly signed but malformed (a ``BodyRule``) ....................... 400
    our events could not be committed (database away) ..................... 503
    otherwise: our events committed in one transaction .................... 200

Nothing is stored for any refusal. SendGrid retries every non-2xx answer for up to
24 hours, so a 503 loses nothing, and a 400 for a signed body (SendGrid's bytes, not
an attacker's) is a loud refusal rather than a silent 200: if the rule is ours and
wrong, a fix deployed within the day still receives the whole batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

import uvicorn
from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from temporalio.client import Client

from herald.ledger import store
from herald.providers import sendgrid_signature
from herald.providers.sendgrid_events import EventBatch, EventBodyError, SendGridEvent, map_status, parse_events
from herald.providers.twilio_signature import is_valid_signature
from herald.receipts.delivery import StoredReport, deliver

log = logging.getLogger("herald.receipts")

PROVIDER = "twilio"
SENDGRID_PROVIDER = "sendgrid"
# Recipient, sender and body are personal data; the inbox keeps what identifies the fact.
_PII_FIELDS = frozenset({"To", "From", "Body"})
# SendGrid posts a batch once it reaches 768 kilobytes: 1 MiB holds any real batch, and no body
# is read past it, so an endless or huge post costs at most this much memory before it is refused.
MAX_SENDGRID_BODY_BYTES = 1024 * 1024
# A signed post is a replay once its timestamp is this old, or a forgery of the future once it is
# this far ahead of our clock (a minute of skew between NTP-synchronised clocks is generous). This
# assumes SendGrid signs each delivery try when it sends it, as webhook senders with a signed
# timestamp do and as the ESP emulator does; SendGrid's documentation does not say. Were a retry
# to carry its first try's timestamp, it would be refused here after five minutes.
SENDGRID_MAX_AGE_SECONDS = 300
SENDGRID_MAX_LEAD_SECONDS = 60
# Whole seconds since the epoch; more digits than this is no time SendGrid could send.
_MAX_TIMESTAMP_DIGITS = 12


class ReceiptEndpoint:
    def __init__(
        self,
        *,
        auth_token: str,
        public_url: str,
        pool: AsyncConnectionPool,
        client: Client,
        hold_seconds: float = 0.0,
        sendgrid_public_key: str | None = None,
    ) -> None:
        """Raises ValueError when ``sendgrid_public_key`` is given but is not a P-256 public key."""
        self._auth_token = auth_token
        # Loaded once: a malformed key stops the server at start instead of refusing every post.
        self._sendgrid_key = (
            sendgrid_signature.load_public_key(sendgrid_public_key) if sendgrid_public_key is not None else None
        )
        self._public_url = public_url.rstrip("/")
        self._pool = pool
        self._client = client
        self._hold_seconds = hold_seconds
        # Non-final reports waiting (in this process only) for their attempt's final report. A
        # crash loses nothing: the rows are committed and the drainer offers them after its grace.
        self._held: dict[str, list[StoredReport]] = {}
        self._releases: dict[str, asyncio.Task[None]] = {}

    def signed_url(self, request: Request) -> str:
        """The URL the provider called, as it signed it: our public base, the path and the query."""
        query = request.url.query
        return f"{self._public_url}{request.url.path}" + (f"?{query}" if query else "")

    async def twilio_status(self, request: Request) -> Response:
        form = await request.form()
        params = list(form.multi_items())
        signature = request.headers.get("X-Twilio-Signature")
        if not signature or not is_valid_signature(self._auth_token, self.signed_url(request), params, signature):
            return PlainTextResponse("X-Twilio-Signature: missing or does not match this request", status_code=403)
        fields = {key: str(value) for key, value in params}
        for required in ("MessageSid", "MessageStatus"):
            if not fields.get(required):
                return PlainTextResponse(f"{required}: required in a status callback", status_code=400)
        try:
            error_code = int(fields["ErrorCode"]) if fields.get("ErrorCode") else None
        except ValueError:
            return PlainTextResponse("ErrorCode: must be a whole number", status_code=400)
        try:
            async with self._pool.connection() as conn, conn.transaction():
                row = await store.store_report(
                    conn,
                    provider=PROVIDER,
                    provider_message_id=fields["MessageSid"],
                    provider_status=fields["MessageStatus"],
                    attempt_ref=request.query_params.get("attempt"),
                    error_code=error_code,
                    provider_event_at=_dlr_done_date(fields.get("RawDlrDoneDate")),
                    payload={key: value for key, value in fields.items() if key not in _PII_FIELDS},
                )
        except _STORE_ERRORS:
            return _not_stored(PROVIDER)
        report = StoredReport(row)
        return Response(status_code=200, background=BackgroundTask(self._route, report))

    async def sendgrid_events(self, request: Request) -> Response:
        """SendGrid's Signed Event Webhook: bound, verify, parse, store every event of ours at once."""
        body = await _read_bounded(request, MAX_SENDGRID_BODY_BYTES)
        if body is None:
            return PlainTextResponse(
                f"request body: larger than {MAX_SENDGRID_BODY_BYTES} bytes (1 MiB), the limit for one event post",
                status_code=413,
            )
        refusal = self._sendgrid_refusal(request, body)
        if refusal is not None:
            return PlainTextResponse(refusal, status_code=403)
        try:
            batch = parse_events(body)
        except EventBodyError as error:
            log.warning("refused a signed %s post: %s", SENDGRID_PROVIDER, error.rule.value)
            return PlainTextResponse(str(error), status_code=400)
        if batch.unstorable_event_ids:
            log.warning(
                "skipped %d %s event(s) holding values the ledger cannot store; sg_event_id: %r",
                len(batch.unstorable_event_ids), SENDGRID_PROVIDER, batch.unstorable_event_ids,
            )  # fmt: skip
        try:
            rows = await self._store_events(batch.events)
        except _STORE_ERRORS:
            return _not_stored(SENDGRID_PROVIDER)
        reports = _routing_order([StoredReport(row) for row in rows])
        return PlainTextResponse(
            _stored_summary(batch, len(rows)),
            status_code=200,
            background=BackgroundTask(self._route_each, reports),
        )

    def _sendgrid_refusal(self, request: Request, body: bytes) -> str | None:
        """Why this post is not SendGrid's, fresh and signed over exactly this body; None when it is."""
        if self._sendgrid_key is None:
            return "SendGrid events are not accepted: no verification key configured"
        signature = request.headers.get(sendgrid_signature.SIGNATURE_HEADER)
        timestamp = request.headers.get(sendgrid_signature.TIMESTAMP_HEADER)
        if not signature or not timestamp:
            return (
                f"{sendgrid_signature.SIGNATURE_HEADER} and {sendgrid_signature.TIMESTAMP_HEADER}: "
                "both required on a signed event post"
            )
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS):
            return f"{sendgrid_signature.TIMESTAMP_HEADER}: must be whole seconds since the epoch"
        age = time.time() - int(timestamp)
        if age > SENDGRID_MAX_AGE_SECONDS:
            return (
                f"{sendgrid_signature.TIMESTAMP_HEADER}: more than {SENDGRID_MAX_AGE_SECONDS} s old; "
                "a replayed post is refused"
            )
        if -age > SENDGRID_MAX_LEAD_SECONDS:
            return f"{sendgrid_signature.TIMESTAMP_HEADER}: more than {SENDGRID_MAX_LEAD_SECONDS} s ahead of our clock"
        if not sendgrid_signature.is_valid_signature(self._sendgrid_key, body, signature, timestamp):
            return f"{sendgrid_signature.SIGNATURE_HEADER}: does not sign this timestamp and body"
        return None

    async def _store_events(self, events: list[SendGridEvent]) -> list[dict[str, Any]]:
        """Insert every event in one transaction: all of them are committed, or none is."""
        if not events:
            return []
        rows = []
        async with self._pool.connection() as conn, conn.transaction():
            # One order for every post, so two posts holding the same facts take their row locks in
            # the same order and cannot deadlock each other; within an attempt, lifecycle order.
            for event in sorted(events, key=lambda e: (e.message_id, e.attempt_ref, map_status(e.event).rank, e.event)):
                rows.append(
                    await store.store_report(
                        conn,
                        provider=SENDGRID_PROVIDER,
                        provider_message_id=event.message_id,
                        provider_status=event.event,
                        attempt_ref=event.attempt_ref,
                        error_code=event.error_code,
                        provider_event_at=event.occurred_at,
                        payload=event.payload,
                    )
                )
        return rows

    async def _route_each(self, reports: list[StoredReport]) -> None:
        for report in reports:
            await self._route(report)

    async def _route(self, report: StoredReport) -> None:
        """Signal a final report at once, with any held report of its attempt; hold a non-final one."""
        ref = report.attempt_ref
        if ref is None or self._hold_seconds <= 0:
            await self._deliver_quietly([report])
        elif report.is_final:
            release = self._releases.pop(ref, None)
            if release is not None:
                release.cancel()
            await self._deliver_quietly([*self._held.pop(ref, []), report])
        else:
            self._held.setdefault(ref, []).append(report)
            if ref not in self._releases:
                self._releases[ref] = asyncio.create_task(self._release_after_hold(ref))

    async def _release_after_hold(self, ref: str) -> None:
        await asyncio.sleep(self._hold_seconds)
        # Popped before delivering, so a final report arriving meanwhile cannot cancel this send.
        self._releases.pop(ref, None)
        held = self._held.pop(ref, [])
        if held:
            await self._deliver_quietly(held)

    async def _deliver_quietly(self, reports: list[StoredReport]) -> None:
        try:
            await deliver(self._pool, self._client, reports, first_delivery=True)
        except Exception:  # the rows are committed; the drainer will offer them again
            log.exception("direct delivery of inbox rows %s failed; the drainer will retry", [r.inbox_id for r in reports])


# Storing failed and nothing was committed: answer 5xx so the provider redelivers.
_STORE_ERRORS = (DatabaseError, PoolTimeout, OSError)


def _not_stored(provider: str) -> Response:
    # Not committed, so not acknowledged: the provider redelivers and nothing is lost.
    log.warning("could not store a %s report; answering 503", provider)
    return PlainTextResponse("report not stored; retry later", status_code=503)


async def _read_bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is known to exceed ``limit`` bytes (nothing past it is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _routing_order(reports: list[StoredReport]) -> list[StoredReport]:
    """Each inbox row once (a post may repeat an event), non-final reports before final ones: a held
    non-final report then travels in the signal of its attempt's final report from the same post."""
    unique = list({report.inbox_id: report for report in reports}.values())
    return sorted(unique, key=lambda report: report.is_final)


def _stored_summary(batch: EventBatch, stored: int) -> str:
    return f"stored {stored}; skipped {batch.not_ours} not ours, {batch.not_applicable} not applicable\n"


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
    return Starlette(
        routes=[
            Route("/twilio/status", endpoint.twilio_status, methods=["POST"]),
            Route("/sendgrid/events", endpoint.sendgrid_events, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ],
        **starlette_options,
    )


def build_receipt_server(endpoint: ReceiptEndpoint, host: str, port: int) -> uvicorn.Server:
    """The uvicorn server for the receipt app, as the receipt process and the tests run it."""
    return uvicorn.Server(
        uvicorn.Config(create_receipt_app(endpoint), host=host, port=port, log_level="warning", access_log=False)
    )
