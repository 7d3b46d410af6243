"""Infobip's SMS API v3, the part Herald uses, over HTTP::

    POST /sms/3/messages    send: 200 SmsResponseEnvelope, 400/401/500 ApiError
    GET  /sms/3/logs        the logs of the last 48 h (120 requests a minute, then 429)
    GET  /sms/3/reports     reports not pushed anywhere, each handed out once, kept 48 h

Every request authenticates with ``Authorization: App <api key>`` or, when the emulator is given an
account username and password, HTTP Basic (Infobip documents both; IBSSO and OAuth 2 are not
emulated and answer 401 like a wrong key).

A send is read whole before anything is accepted: one broken rule answers 400 naming every property
at fault, and nothing of that request exists. Each destination is one message, with the caller's
``messageId`` or a generated one, and its own fault (``emulator.infobip.faults`` says which fault of
a request decides its answer).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import math
import time
import uuid
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from emulator.ratelimit import RequestWindow
from emulator.infobip.config import MAX_VALIDITY_SECONDS, InfobipConfig
from emulator.infobip.faults import (
    REFUSALS,
    AcceptThenError,
    AcceptThenHang,
    Error503,
    Fault,
    FaultRegistry,
    HangWithoutAccept,
    RateLimit,
    ReportBeforeResponse,
)
from emulator.infobip.lifecycle import Lifecycle
from emulator.infobip.messages import InfobipStats, MessageRecord, MessageStore, now_utc
from emulator.infobip.send_request import Message, SmsRequest, read_request
from emulator.infobip.vocabulary import GENERAL_STATUS_NAMES, PENDING_ACCEPTED, Violation, api_error
from emulator.messages import count_segments

# Infobip: at most 1000 logs or reports per call, 50 unless asked.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 50
# Infobip: messageId and bulkId filters take "multiple comma-separated values. Maximum length 2048".
_MAX_FILTER_CHARS = 2048


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """JSON with every non-ASCII character escaped: a lone surrogate a client sent comes back as a
    valid escape instead of failing to encode."""
    return Response(json.dumps(body), status_code=status, headers=headers, media_type="application/json")


def error_response(
    status: int, violations: list[Violation] | None = None, headers: dict[str, str] | None = None
) -> Response:
    return json_response(api_error(status, violations), status, headers)


class InfobipApi:
    """The SMS API routes of one emulator, over its shared state."""

    def __init__(
        self,
        config: InfobipConfig,
        store: MessageStore,
        faults: FaultRegistry,
        stats: InfobipStats,
        lifecycle: Lifecycle,
    ) -> None:
        self._config = config
        self._store = store
        self._faults = faults
        self._stats = stats
        self._lifecycle = lifecycle
        self.logs_window = RequestWindow(config.logs_requests_per_minute)

    def _authenticated(self, request: Request) -> bool:
        config = self._config
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        scheme, credentials = scheme.lower(), credentials.strip()
        if scheme == "app":
            return hmac.compare_digest(credentials.encode(), config.api_key.encode())
        if scheme == "basic" and config.basic_username and config.basic_password:
            try:
                user, _, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # Both comparisons always run, so timing does not tell which part was wrong.
            user_ok = hmac.compare_digest(user.encode(), config.basic_username.encode())
            password_ok = hmac.compare_digest(password.encode(), config.basic_password.encode())
            return user_ok and password_ok
        return False

    def _refuse(
        self, status: int, violations: list[Violation] | None = None, headers: dict[str, str] | None = None
    ) -> Response:
        self._stats.refused_by_status[status] += 1
        return error_response(status, violations, headers)

    def _unauthorized(self) -> Response:
        self._stats.auth_failures += 1
        return self._refuse(401)

    # ---- POST /sms/3/messages ------------------------------------------------------------------

    async def send(self, request: Request) -> Response:
        if not self._authenticated(request):
            return self._unauthorized()
        try:
            body = json.loads(await request.body())
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser
            return self._refuse(400, [Violation("messages", "the request body must be a JSON object")])
        read = read_request(body)
        if not isinstance(read, SmsRequest):
            return self._refuse(400, read)
        destinations = [(message, destination) for message in read.messages for destination in message.destinations]
        if len(self._store) + len(destinations) > self._config.max_messages:
            return self._refuse(500)
        faults = [self._faults.take(destination.to) for _, destination in destinations]
        if refusal := next((fault for fault in faults if isinstance(fault, REFUSALS)), None):
            return await self._refused(refusal)

        schedule = read.options.schedule if read.options else None
        bulk_id = schedule.bulk_id if schedule and schedule.bulk_id is not None else str(uuid.uuid4())
        now = now_utc()
        records = [
            self._accept(message, destination.to, destination.message_id, bulk_id, fault, now)
            for (message, destination), fault in zip(destinations, faults)
        ]
        answer = self._answer(read, bulk_id, records)
        launched = [self._lifecycle.launch(record, fault) for record, fault in zip(records, faults)]
        early = {task for task, fault in zip(launched, faults) if isinstance(fault, ReportBeforeResponse)}
        if early:
            # Its lifecycle and reports run to their answers before the client hears of acceptance.
            await asyncio.wait(early)
        hang = max((fault.hang_seconds for fault in faults if isinstance(fault, AcceptThenHang)), default=0.0)
        if hang:
            self._stats.hangs += 1
            await asyncio.sleep(hang)
        if failure := next((fault for fault in faults if isinstance(fault, AcceptThenError)), None):
            self._stats.answered_5xx_after_accept += 1
            return error_response(failure.status)
        return json_response(answer)

    async def _refused(self, fault: Fault) -> Response:
        """The answer of a fault that refuses the request before anything is accepted."""
        if isinstance(fault, HangWithoutAccept):
            self._stats.hangs += 1
            await asyncio.sleep(fault.hang_seconds)
            return self._refuse(500)
        if isinstance(fault, RateLimit):
            headers = {"Retry-After": str(math.ceil(fault.retry_after))} if fault.retry_after is not None else None
            return self._refuse(429, headers=headers)
        return self._refuse(503 if isinstance(fault, Error503) else 500)

    def _accept(
        self, message: Message, to: str, message_id: str | None, bulk_id: str, fault: Fault | None, now: datetime
    ) -> MessageRecord:
        config = self._config
        content = message.content
        if content.text is not None:
            shown: dict[str, Any] = {"text": content.text}
            parts = count_segments(content.text)
        else:
            shown = {"hex": content.hex, "dataCoding": content.data_coding or 0, "esmClass": content.esm_class or 0}
            parts = 1
        options, webhooks = message.options, message.webhooks
        validity = options.validity_period.seconds if options and options.validity_period else MAX_VALIDITY_SECONDS
        delivery = webhooks.delivery if webhooks else None
        # notify false: "no DLR will be sent"; the report then waits for the pull API.
        url = None if delivery and delivery.notify is False else (message.report_url or config.subscription_url)
        duplicate_of = None
        if message_id is not None and config.idempotency_grace_seconds is not None:
            original = self._store.original_within(message_id, now, config.idempotency_grace_seconds)
            duplicate_of = original.seq if original is not None else None
        platform = options.platform if options else None
        record = MessageRecord(
            seq=self._store.next_seq(),
            message_id=message_id if message_id is not None else str(uuid.uuid4()),
            bulk_id=bulk_id,
            to=to,
            sender=message.sender,
            content=shown,
            message_count=parts,
            accepted_at=now,
            # Infobip: "Validity period longer than 48h is not supported ... automatically set to 48h".
            validity_seconds=min(validity, MAX_VALIDITY_SECONDS),
            report_url=url,
            intermediate_reports=bool(delivery and delivery.intermediate_report),
            price={"pricePerMessage": config.price_per_message * parts, "currency": config.currency},
            callback_data=webhooks.callback_data if webhooks else None,
            platform=platform.model_dump(by_alias=True, exclude_none=True) if platform else None,
            campaign_reference_id=options.campaign_reference_id if options else None,
            fault=fault.fault if fault else None,
            duplicate_of=duplicate_of,
            history=[(PENDING_ACCEPTED, now)],
        )
        self._store.add(record)
        self._stats.accepted += 1
        if duplicate_of is not None:
            self._stats.duplicates_rejected += 1
        return record

    def _answer(self, read: SmsRequest, bulk_id: str, records: list[MessageRecord]) -> dict[str, Any]:
        """The 200 body: every destination as freshly accepted (a duplicate too: it is rejected later,
        "during processing")."""
        with_count = bool(read.options and read.options.include_sms_count_in_response)
        messages = []
        for record in records:
            entry: dict[str, Any] = {
                "messageId": record.message_id,
                "status": PENDING_ACCEPTED.as_json(),
                "destination": record.to,
            }
            if with_count:
                entry["details"] = {"messageCount": record.message_count}
            messages.append(entry)
        return {"bulkId": bulk_id, "messages": messages}

    # ---- GET /sms/3/logs and /sms/3/reports -----------------------------------------------------------

    async def logs(self, request: Request) -> Response:
        if not self._authenticated(request):
            return self._unauthorized()
        self._stats.logs_requests += 1
        verdict = self.logs_window.admit(time.time())
        if verdict is not None and not verdict.admitted:
            self._stats.logs_rate_limited += 1
            return self._refuse(429)
        query = request.query_params
        problems: list[Violation] = []
        limit = _limit(query.get("limit"), problems)
        message_ids = _id_filter(query, "messageId", problems)
        bulk_ids = _id_filter(query, "bulkId", problems)
        general = query.get("generalStatus")
        if general is not None and general not in GENERAL_STATUS_NAMES:
            problems.append(Violation("generalStatus", f"must be one of {list(GENERAL_STATUS_NAMES)}"))
        since = _moment(query.get("sentSince"), "sentSince", problems)
        until = _moment(query.get("sentUntil"), "sentUntil", problems)
        if problems:
            return self._refuse(400, problems)
        results = []
        for record in self._store.kept(now_utc()):
            if len(results) >= limit:
                break
            if message_ids is not None and record.message_id not in message_ids:
                continue
            if bulk_ids is not None and record.bulk_id not in bulk_ids:
                continue
            if general is not None and record.status.group_name != general:
                continue
            if (since is not None and record.accepted_at < since) or (until is not None and record.accepted_at > until):
                continue
            if query.get("destination") is not None and record.to != query["destination"]:
                continue
            if query.get("sender") is not None and record.sender != query["sender"]:
                continue
            results.append(record.log())
        return json_response({"results": results})

    async def reports(self, request: Request) -> Response:
        if not self._authenticated(request):
            return self._unauthorized()
        self._stats.reports_requests += 1
        query = request.query_params
        problems: list[Violation] = []
        limit = _limit(query.get("limit"), problems)
        message_ids = _id_filter(query, "messageId", problems)
        bulk_ids = _id_filter(query, "bulkId", problems)
        if problems:
            return self._refuse(400, problems)
        results = self._store.pull_reports(now_utc(), limit, message_ids, bulk_ids)
        self._stats.reports_pulled += len(results)
        return json_response({"results": results})


def _limit(value: str | None, problems: list[Violation]) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_LIMIT:
        problems.append(Violation("limit", f"must be an integer from 1 to {MAX_LIMIT}"))
        return DEFAULT_LIMIT
    return int(value)


def _id_filter(query: Any, name: str, problems: list[Violation]) -> set[str] | None:
    """A messageId or bulkId filter: repeated parameters and comma-separated values, as Infobip takes both."""
    values = query.getlist(name)
    if not values:
        return None
    if sum(len(value) for value in values) > _MAX_FILTER_CHARS:
        problems.append(Violation(name, f"size must be between 0 and {_MAX_FILTER_CHARS}"))
        return None
    return {part for value in values for part in value.split(",") if part}


def _moment(value: str | None, name: str, problems: list[Violation]) -> datetime | None:
    """``yyyy-MM-dd'T'HH:mm:ss.SSSZ`` (and the ISO forms around it); a time without an offset is UTC."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace(" ", "+"))  # a '+' the client did not escape
    except ValueError:
        problems.append(Violation(name, "must be a date-time like 2019-11-09T16:00:00.000+0000"))
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=now_utc().tzinfo)
