"""Infobip's delivery reports (``POST /infobip/reports``): authenticated, parsed, verified per result, stored, routed.

Infobip posts ``{"results": [...]}``, up to 100 reports a post by default (``maxBucketSize``, up to
2,000), each about one message, each echoing the ``callbackData`` the message was sent with. The
route answers by the first rule that applies::

    HERALD_INFOBIP_WEBHOOK_BASIC set, and the request's Basic credentials are not those ..... 401
    no webhook key configured (HERALD_INFOBIP_WEBHOOK_KEYS) ................................... 403
    body larger than MAX_INFOBIP_BODY_BYTES (read no further, parse nothing) .................. 413
    not JSON, not an object with a list ``results`` of at most MAX_RESULTS ..................... 400
    results, and not one whose callbackData verifies for its own messageId ...................... 403
    not committed within the store deadline, or the database away ............................. 503
    otherwise: every verified result committed (the readable ones to the inbox, the others to
      receipt_rejections with their rule), the refused ones counted and named by index ........ 200

Authentication (herald/providers/infobip_signature.py): each result is accepted only when its
``callbackData`` is Herald's HMAC of that result's own ``messageId``; a result made up without the
key, or carrying another message's callbackData, is refused and counted, never stored, not even as a
rejection (an attacker's bytes are not evidence of anything). Basic credentials, when configured, are
for a subscription profile with security type BASIC (Infobip's per-message webhook URL has none).

A post with some results refused stores the verified ones and answers 200, naming the refused ones by
index. Why: Infobip batches reports about many messages into one post, and the result that fails is
not ours (a message sent from the same account by something else, without our callbackData) or is
forged; a 4xx for the post would make Infobip redeliver the whole post on its retry cycle for hours,
delaying every good report in it, and the refused result would fail the same way every time. Only a
post of which no result verifies is refused as a whole (403): it is not Infobip reporting on our
messages, or our keys do not match (a key dropped too early), and then Infobip's retries give an
operator time to restore the key.

Stored first, as Twilio's and SendGrid's reports: each report is committed before the answer, with
``attempt_ref`` = its messageId (Herald's own id, so exact), and the message claimed for that attempt
in the statement that stores it (``store.store_reports``). A report about an id the ledger does not
know yet is stored and answered 200 all the same: the delivery path defers it until the attempt row
appears (the drainer offers it again), as the other routes do; Infobip would otherwise retry for hours.
What is stored of a result: its ids, status and error objects without their sentences, times, count,
network, price and platform; never ``to`` and never the callbackData (whoever reads it could make
up a report for that message).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from temporalio.client import Client

from herald.core.rows import InboxReport
from herald.ledger import store
from herald.providers.infobip import REPORTS_ROUTE
from herald.providers.infobip_codes import error_code_of
from herald.providers.infobip_signature import CallbackKeys
from herald.receipts.delivery import StoredReport
from herald.receipts.rejections import cut_short, kept_fields
from herald.receipts.routing import ReportRouter
from herald.runtime.http_bodies import read_bounded
from herald.settings import ReceiptSettings

log = logging.getLogger("herald.receipts")

INFOBIP_PROVIDER = "infobip"
ROUTE = REPORTS_ROUTE
# Up to 2,000 reports a post (maxBucketSize), each well under 1 KiB as Infobip sends them.
MAX_RESULTS = 2000
MAX_INFOBIP_BODY_BYTES = 2 * 1024 * 1024
# Reports per transaction when a post is stored (as SendGrid's posts, and for the same reason).
STORE_BATCH = 500
# The route's shares of the receipt server's pool: storing one post at a time, and its routing.
STORE_CONNECTIONS = 1
ROUTING_CONNECTIONS = 2
CONNECTIONS = STORE_CONNECTIONS + ROUTING_CONNECTIONS
# Reports the router may hold waiting to be signalled: four full posts (past it, the drainer's).
MAX_ROUTING_BACKLOG = 4 * MAX_RESULTS
# What the inbox's columns hold, as rules a reason names.
MAX_ID_CHARS = 128
MAX_STATUS_CHARS = 64
MAX_ERROR_ID = 2**31 - 1
# Refused results named in an answer; the rest are counted.
MAX_NAMED_REFUSALS = 10
_REFUSED = "callbackData: missing, or not Herald's for this result's messageId"


class _Lenient(BaseModel):
    # Infobip adds fields over time: a field Herald does not read is ignored, never a refusal. The
    # fields it declares have the official client's types (infobip_api_client SmsDeliveryReport, strict),
    # so a result stored as a report is one Infobip's own model reads (tests/providers/
    # test_infobip_spec_conformance.py); a verified result that is not becomes a rejection.
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


_Text = Annotated[StrictStr, Field(max_length=255)]


class ReportStatus(_Lenient):
    group_id: StrictInt | None = Field(None, alias="groupId")
    group_name: Literal["ACCEPTED", "PENDING", "UNDELIVERABLE", "DELIVERED", "EXPIRED", "REJECTED"] | None = Field(
        None, alias="groupName"
    )
    id: StrictInt | None = None
    name: Annotated[StrictStr, Field(max_length=MAX_STATUS_CHARS)] | None = None
    description: StrictStr | None = None
    action: StrictStr | None = None


class ReportError(_Lenient):
    group_id: StrictInt | None = Field(None, alias="groupId")
    group_name: Literal["OK", "HANDSET_ERRORS", "USER_ERRORS", "OPERATOR_ERRORS"] | None = Field(
        None, alias="groupName"
    )
    id: Annotated[StrictInt, Field(ge=0, le=MAX_ERROR_ID)] | None = None
    name: StrictStr | None = None
    description: StrictStr | None = None
    permanent: StrictBool | None = None


class ReportPrice(_Lenient):
    price_per_message: StrictFloat | StrictInt | None = Field(None, alias="pricePerMessage")
    currency: StrictStr | None = None


class ReportPlatform(_Lenient):
    entity_id: _Text | None = Field(None, alias="entityId")
    application_id: _Text | None = Field(None, alias="applicationId")


class DeliveryResult(_Lenient):
    """One report as Infobip's v3 webhook documents it (``DeliveryReport``), status required."""

    message_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[\x21-\x7e]+$")] = Field(
        alias="messageId"
    )
    callback_data: Annotated[StrictStr, Field(max_length=4000)] | None = Field(None, alias="callbackData")
    status: ReportStatus
    error: ReportError | None = None
    bulk_id: _Text | None = Field(None, alias="bulkId")
    to: StrictStr | None = None
    sender: StrictStr | None = None
    price: ReportPrice | None = None
    sent_at: datetime | None = Field(None, alias="sentAt")
    done_at: datetime | None = Field(None, alias="doneAt")
    message_count: StrictInt | None = Field(None, alias="messageCount")
    mcc_mnc: _Text | None = Field(None, alias="mccMnc")
    platform: ReportPlatform | None = None
    campaign_reference_id: _Text | None = Field(None, alias="campaignReferenceId")

    @property
    def label(self) -> str | None:
        """The status's name (its group's name when it has none); None when neither is readable."""
        for value in (self.status.name, self.status.group_name):
            if value and value.isascii() and value.replace("_", "").isalnum():
                return value
        return None


# What the inbox keeps of a result, named one by one; never `to`, `callbackData` or the sentences.
_KEPT = (
    "messageId", "bulkId", "sentAt", "doneAt", "messageCount", "mccMnc", "campaignReferenceId", "price", "platform",
)  # fmt: skip
_KEPT_STATUS = ("groupId", "groupName", "id", "name")
_KEPT_ERROR = ("groupId", "groupName", "id", "name", "permanent")


def kept_payload(result: dict[str, Any]) -> dict[str, Any]:
    """The stored part of a verified result; NUL, which jsonb cannot hold, spelled out as \\u0000."""
    kept = {key: result[key] for key in _KEPT if key in result}
    for name, keys in (("status", _KEPT_STATUS), ("error", _KEPT_ERROR)):
        if isinstance(result.get(name), dict):
            kept[name] = {key: result[name][key] for key in keys if key in result[name]}
    return _without_nul(kept)


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000")
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    return value


@dataclass
class VerifiedPost:
    """A post's results sorted: the reports to store, the verified ones that cannot be, and the refused."""

    reports: list[InboxReport] = field(default_factory=list)
    rejections: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)  # reason, fields, ref
    refused: list[int] = field(default_factory=list)  # indices of results whose callbackData does not verify


class BodyRefused(ValueError):
    """A post the route cannot read at all; the message names the field and the rule."""


def sort_results(keys: CallbackKeys, body: bytes) -> VerifiedPost:
    """Parse a post and sort its results (CPU only).

    Raises:
        BodyRefused: not JSON, or not an object whose ``results`` is a list of at most MAX_RESULTS.
    """
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise BodyRefused("request body: must be JSON, as Infobip posts its reports") from None
    results = document.get("results") if isinstance(document, dict) else None
    if not isinstance(results, list):
        raise BodyRefused("results: required, a list of delivery reports")
    if len(results) > MAX_RESULTS:
        raise BodyRefused(f"results: at most {MAX_RESULTS} reports in one post (Infobip's largest bucket)")
    post = VerifiedPost()
    for index, result in enumerate(results):
        message_id = result.get("messageId") if isinstance(result, dict) else None
        callback_data = result.get("callbackData") if isinstance(result, dict) else None
        if isinstance(message_id, str) and isinstance(callback_data, str) and keys.verify(message_id, callback_data):
            assert isinstance(result, dict)
            _sort_verified(post, result, message_id)
        else:
            post.refused.append(index)
    return post


def _sort_verified(post: VerifiedPost, result: dict[str, Any], message_id: str) -> None:
    """A verified result becomes an inbox report, or a rejection naming the rule it breaks."""
    ref = message_id if len(message_id) <= MAX_ID_CHARS and message_id.isascii() and message_id.isprintable() else None
    try:
        parsed = DeliveryResult.model_validate(result)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "result"
        post.rejections.append((f"{cut_short(where, 64)}: {first['msg']}", kept_payload(result), ref))
        return
    label = parsed.label
    if label is None:
        post.rejections.append(("status: a name of letters, digits and '_' is required", kept_payload(result), ref))
        return
    post.reports.append(
        InboxReport(
            provider=INFOBIP_PROVIDER,
            provider_message_id=parsed.message_id,
            provider_status=label,
            attempt_ref=parsed.message_id,
            error_code=error_code_of(parsed.error.id if parsed.error is not None else None),
            provider_event_at=parsed.done_at if parsed.done_at and parsed.done_at.tzinfo else None,
            payload=kept_payload(result),
        )
    )


class InfobipReports:
    """The route's state: its keys and credentials, its share of the pool, its router."""

    def __init__(self, settings: ReceiptSettings, *, pool: AsyncConnectionPool, client: Client) -> None:
        webhook = settings.infobip_webhook
        self._keys = CallbackKeys.from_settings(webhook)
        self._basic = webhook.basic.get_secret_value().encode("utf-8") if webhook.basic is not None else None
        self._pool = pool
        self._stores = asyncio.Semaphore(STORE_CONNECTIONS)
        self.router = ReportRouter(
            route=INFOBIP_PROVIDER, pool=pool, client=client, hold_seconds=settings.hold_seconds,
            concurrency=ROUTING_CONNECTIONS, max_backlog=MAX_ROUTING_BACKLOG,
        )  # fmt: skip
        # Results refused since the process started (their callbackData did not verify).
        self.refused_results = 0

    async def read(self, request: Request) -> VerifiedPost | Response:
        """The post's results sorted, or the refusal (401, 403, 413, 400) with its rule."""
        if self._basic is not None and not self._basic_matches(request.headers.get("authorization")):
            return PlainTextResponse(
                "Authorization: Basic credentials required (HERALD_INFOBIP_WEBHOOK_BASIC)",
                status_code=401, headers={"WWW-Authenticate": 'Basic realm="herald-infobip"'},
            )  # fmt: skip
        if self._keys is None:
            return PlainTextResponse("Infobip reports are not accepted: no webhook key configured", status_code=403)
        body = await read_bounded(request, MAX_INFOBIP_BODY_BYTES)
        if body is None:
            limit = f"request body: larger than {MAX_INFOBIP_BODY_BYTES} bytes, the limit for one report post"
            return PlainTextResponse(limit, status_code=413)
        try:
            post = sort_results(self._keys, body)
        except BodyRefused as error:
            return PlainTextResponse(str(error), status_code=400)
        if post.refused:
            self.refused_results += len(post.refused)
            named = post.refused[:MAX_NAMED_REFUSALS]
            log.warning("refused %d Infobip results (%s) at indices %s", len(post.refused), _REFUSED, named)
            if not post.reports and not post.rejections:
                return PlainTextResponse(f"no result verified; {_refusals(post)}", status_code=403)
        return post

    async def store(self, post: VerifiedPost) -> list[dict[str, Any]]:
        """Commit the post's reports (transactions of STORE_BATCH) and, with the last, its rejections;
        each report's inbox row, in order. One post at a time, on the route's share of the pool."""
        chunks = [post.reports[i : i + STORE_BATCH] for i in range(0, len(post.reports), STORE_BATCH)] or [[]]
        rows: list[dict[str, Any]] = []
        async with self._stores, self._pool.connection() as conn:
            for index, chunk in enumerate(chunks):
                async with conn.pipeline(), conn.transaction():
                    if chunk:
                        rows.extend(await store.store_reports(conn, chunk))
                    if index == len(chunks) - 1:
                        await self._record_rejections(conn, post)
        return rows

    def answer(self, post: VerifiedPost, rows: list[dict[str, Any]]) -> Response:
        """200 once committed: what was stored, what refused; the reports routed after the answer."""
        new = sum(1 for row in rows if row["new"])
        text = f"stored {len(rows)} reports ({new} new)"
        if post.rejections:
            text += f"; recorded {len(post.rejections)} unreadable verified results as rejections"
        if post.refused:
            text += f"; {_refusals(post)}"
        return PlainTextResponse(
            text + "\n", background=BackgroundTask(self.router.route, [StoredReport(row) for row in rows])
        )

    async def close(self) -> None:
        await self.router.close()

    def _basic_matches(self, header: str | None) -> bool:
        scheme, _, encoded = (header or "").partition(" ")
        if scheme.lower() != "basic" or not encoded or len(encoded) > 1024:
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        assert self._basic is not None
        return hmac.compare_digest(given, self._basic)

    async def _record_rejections(self, conn: AsyncConnection, post: VerifiedPost) -> None:
        for reason, fields, ref in post.rejections:
            await store.store_rejection(
                conn, provider=INFOBIP_PROVIDER, reason=reason, fields=kept_fields(fields), attempt_ref=ref
            )
        for reason, _, _ in post.rejections:
            log.warning("recorded a verified Infobip result as a rejection: %s", reason)


def _refusals(post: VerifiedPost) -> str:
    named = ", ".join(f"results[{index}]" for index in post.refused[:MAX_NAMED_REFUSALS])
    more = f" and {len(post.refused) - MAX_NAMED_REFUSALS} more" if len(post.refused) > MAX_NAMED_REFUSALS else ""
    return f"refused {len(post.refused)} results ({named}{more}): {_REFUSED}"
