"""The status-callback endpoint: verify, store, commit, answer 2xx, then signal.

The order is the contract. A report is a durable fact to be stored first and
interpreted second: nothing is signalled before its inbox row is committed, and
nothing is answered 2xx unless it was committed, so a provider that redelivers
on failure never loses a report to us.
"""

from __future__ import annotations

import asyncio
import logging
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
from herald.providers.twilio_signature import is_valid_signature
from herald.receipts.delivery import StoredReport, deliver

log = logging.getLogger("herald.receipts")

PROVIDER = "twilio"
# Recipient, sender and body are personal data; the inbox keeps what identifies the fact.
_PII_FIELDS = frozenset({"To", "From", "Body"})


class ReceiptEndpoint:
    def __init__(
        self, *, auth_token: str, public_url: str, pool: AsyncConnectionPool, client: Client, hold_seconds: float = 0.0
    ) -> None:
        self._auth_token = auth_token
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
        except (DatabaseError, PoolTimeout, OSError):
            # Not committed, so not acknowledged: the provider redelivers and nothing is lost.
            log.warning("could not store a %s report; answering 503", PROVIDER)
            return PlainTextResponse("report not stored; retry later", status_code=503)
        report = StoredReport(row)
        return Response(status_code=200, background=BackgroundTask(self._route, report))

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
            Route("/healthz", health, methods=["GET"]),
        ],
        **starlette_options,
    )


def build_receipt_server(endpoint: ReceiptEndpoint, host: str, port: int) -> uvicorn.Server:
    """The uvicorn server for the receipt app, as the receipt process and the tests run it."""
    return uvicorn.Server(
        uvicorn.Config(create_receipt_app(endpoint), host=host, port=port, log_level="warning", access_log=False)
    )
