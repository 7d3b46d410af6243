"""The emulator's HTTP surface: a Twilio Messages API subset plus a loopback admin API.

Twilio subset (Basic auth: account SID / auth token)::

    POST /2010-04-01/Accounts/{AccountSid}/Messages.json          CreateMessage
    GET  /2010-04-01/Accounts/{AccountSid}/Messages.json          ListMessage
    GET  /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json    FetchMessage
    POST /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json    UpdateMessage

Admin API (no auth, loopback clients only)::

    GET    /_emulator/faults              armed faults
    PUT    /_emulator/faults/{to}         arm {"fault": name, "count": n|null, ...params}
    DELETE /_emulator/faults/{to}         disarm one number
    DELETE /_emulator/faults              disarm all
    GET    /_emulator/messages[?to=...]   every accepted message: history, callbacks and their results
    POST   /_emulator/callbacks/release?to=...   let held callbacks (fault lost_then_reported) go
    GET    /_emulator/stats               counters
    POST   /_emulator/reset               forget messages, faults, counters, opt-outs; stop lifecycles
    POST   /_emulator/inbound             a handset texts us {"from", "body", "to"?, "messaging_service_sid"?,
                                          "url"?, "message_sid"?, "advanced_opt_out"?}: its keyword blocks
                                          or unblocks the pair (creates then answer 21610), then a signed
                                          post to the incoming-message webhook (emulator.inbound)
    GET    /_emulator/opt-outs            the blocked (handset, sender) pairs

Test and demo use only: it never talks to anything but loopback callback URLs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import math
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from urllib.parse import urlsplit

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from emulator.armed_faults import fault_routes, refuse_foreign
from emulator.config import EmulatorConfig
from emulator.faults import (
    FAULT_ADAPTER,
    AcceptThenError,
    AcceptThenHang,
    CallbackBeforeResponse,
    Error500,
    Error503,
    Fault,
    FaultRegistry,
    HangWithoutAccept,
    LostThenReported,
    RateLimit,
    Reject,
)
from emulator.inbound import (
    OPT_OUT_TYPES,
    TWILIO_REPLIES,
    InboundRequest,
    OptOuts,
    inbound_params,
    keyword_of,
    post_inbound,
)
from emulator.lifecycle import Lifecycle
from emulator.listing import InvalidListQuery, list_page, parse_list_query
from emulator.messages import (
    API_VERSION,
    DEFAULT_VALIDITY_SECONDS,
    VALIDITY_RANGE,
    MessageRecord,
    MessageStore,
    StatusChange,
    count_segments,
    new_message_sid,
)
from emulator.ratelimit import SenderRateLimiter
from emulator.stats import EmulatorStats
from emulator.twilio_errors import error_response

# Matched whole (fullmatch): Python's `$` also matches before a final newline, which Twilio refuses (21211).
_E164 = re.compile(r"\+[1-9][0-9]{1,14}")
_MESSAGING_SERVICE_SID = re.compile(r"MG[0-9a-fA-F]{32}")
_MAX_BODY_CHARS = 1600
_MAX_CALLBACK_URL_CHARS = 4000


@dataclass
class EmulatorState:
    """Everything one emulator instance knows; created by ``create_app``, never module-global."""

    config: EmulatorConfig
    store: MessageStore
    faults: FaultRegistry
    limiter: SenderRateLimiter
    stats: EmulatorStats
    lifecycle: Lifecycle
    opt_outs: OptOuts

    async def reset(self) -> None:
        await self.lifecycle.cancel_all()
        self.store.clear()
        self.faults.clear()
        self.opt_outs.clear()
        self.limiter.clear()
        self.stats.reset()


def create_app(config: EmulatorConfig) -> Starlette:
    """Build one emulator: its own state, its Twilio routes and its admin routes."""
    stats = EmulatorStats()
    state = EmulatorState(
        config=config,
        store=MessageStore(),
        faults=FaultRegistry(),
        limiter=SenderRateLimiter(config.rate_limit_per_sender),
        stats=stats,
        lifecycle=Lifecycle(config, stats),
        opt_outs=OptOuts(),
    )
    for assignment in config.initial_faults:
        state.faults.arm(assignment.to, assignment.fault)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.lifecycle.start()
        try:
            yield
        finally:
            await state.lifecycle.aclose()

    twilio = _TwilioApi(state)
    admin = _AdminApi(state)
    base = f"/{API_VERSION}/Accounts/{{account_sid}}"
    routes = [
        Route(f"{base}/Messages.json", twilio.create_message, methods=["POST"]),
        Route(f"{base}/Messages.json", twilio.list_messages, methods=["GET"]),
        Route(f"{base}/Messages/{{sid}}.json", twilio.fetch_message, methods=["GET"]),
        Route(f"{base}/Messages/{{sid}}.json", twilio.update_message, methods=["POST"]),
        *fault_routes("/_emulator/faults", state.faults, FAULT_ADAPTER, "emulator"),
        Route("/_emulator/messages", admin.list_messages, methods=["GET"]),
        Route("/_emulator/callbacks/release", admin.release_callbacks, methods=["POST"]),
        Route("/_emulator/stats", admin.get_stats, methods=["GET"]),
        Route("/_emulator/reset", admin.reset, methods=["POST"]),
        Route("/_emulator/inbound", admin.inbound, methods=["POST"]),
        Route("/_emulator/opt-outs", admin.list_opt_outs, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.emulator = state
    return app


async def _form_fields(request: Request) -> dict[str, str]:
    """Form fields, first value of each name; file parts ignored (Twilio takes none here)."""
    fields: dict[str, str] = {}
    async with request.form() as form:
        for name, value in form.multi_items():
            if isinstance(value, str) and name not in fields:
                fields[name] = value
    return fields


class _TwilioApi:
    def __init__(self, state: EmulatorState) -> None:
        self._state = state

    def _authenticate(self, request: Request) -> Response | None:
        """None when the Basic credentials and the path's account SID are right, else the 401 answer."""
        config = self._state.config
        user, password = "", ""
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                pass
        # Both comparisons always run, in constant time, so timing says nothing about which part was wrong.
        user_ok = hmac.compare_digest(user.encode(), config.account_sid.encode())
        password_ok = hmac.compare_digest(password.encode(), config.auth_token.encode())
        if user_ok and password_ok and request.path_params["account_sid"] == config.account_sid:
            return None
        self._state.stats.auth_failures += 1
        return error_response(401, 20003, headers={"WWW-Authenticate": 'Basic realm="Twilio API"'})

    def _refuse(
        self, status: int, code: int, message: str | None = None, headers: dict[str, str] | None = None
    ) -> Response:
        self._state.stats.reject(code)
        return error_response(status, code, message, headers)

    def _too_many_requests(self, retry_after: str) -> Response:
        self._state.stats.rate_limited += 1
        return self._refuse(429, 20429, headers={"Retry-After": retry_after})

    async def create_message(self, request: Request) -> Response:
        if denied := self._authenticate(request):
            return denied
        state = self._state
        fields = await _form_fields(request)
        if problem := self._validate_create(fields):
            return self._refuse(400, *problem)
        if len(state.store) >= state.config.max_messages:
            return self._refuse(503, 20503, "Emulator message store is full; POST /_emulator/reset")
        sender = fields.get("From") or fields["MessagingServiceSid"]
        if state.opt_outs.blocks(
            fields["To"], [value for value in (fields.get("From"), fields.get("MessagingServiceSid")) if value]
        ):
            # The handset replied STOP to this sender: refused until it replies START (not billed).
            return self._refuse(400, 21610)
        wait = state.limiter.try_take(sender, time.monotonic())
        if wait is not None:
            return self._too_many_requests(str(wait))

        fault = state.faults.take(fields["To"])
        if isinstance(fault, (Error500, Error503)):
            status = 500 if isinstance(fault, Error500) else 503
            return self._refuse(status, 20000 + status)
        if isinstance(fault, RateLimit):
            return self._too_many_requests(_retry_after_header(fault))
        if isinstance(fault, Reject):
            return self._refuse(400, fault.code)
        if isinstance(fault, HangWithoutAccept):
            state.stats.hangs += 1
            await asyncio.sleep(fault.hang_seconds)
            return self._refuse(503, 20503)

        record = self._accept(fields, fault)
        # Held answers carry the resource as it was at acceptance, as if it had left the server then.
        accepted = record.resource()
        if isinstance(fault, CallbackBeforeResponse):
            await state.lifecycle.run_to_completion(record, fault)
            return JSONResponse(accepted, status_code=201)
        state.lifecycle.launch(record, fault)
        if isinstance(fault, AcceptThenError):
            return self._refuse(fault.status, 20000 + fault.status)
        if isinstance(fault, (AcceptThenHang, LostThenReported)):
            state.stats.hangs += 1
            await asyncio.sleep(fault.hang_seconds)
        return JSONResponse(accepted, status_code=201)

    def _validate_create(self, fields: dict[str, str]) -> tuple[int, str | None] | None:
        """The Twilio error (code, message) for an unacceptable create request, or None."""
        to = fields.get("To", "")
        if not to:
            return 21604, None
        if not _E164.fullmatch(to):
            return 21211, None
        if not fields.get("From") and not fields.get("MessagingServiceSid"):
            return 21603, None
        service_sid = fields.get("MessagingServiceSid")
        if service_sid and not _MESSAGING_SERVICE_SID.fullmatch(service_sid):
            return 20001, "Invalid parameter: MessagingServiceSid must be 'MG' followed by 32 hex digits"
        body = fields.get("Body", "")
        if not body:
            return 21602, None
        if len(body) > _MAX_BODY_CHARS:
            return 21617, None
        callback = fields.get("StatusCallback")
        if callback and not self._callback_url_allowed(callback):
            return 21609, None
        if "ValidityPeriod" in fields and _validity_seconds(fields["ValidityPeriod"]) is None:
            low, high = VALIDITY_RANGE
            return 20001, f"Invalid parameter: ValidityPeriod must be an integer from {low} to {high}"
        return None

    def _callback_url_allowed(self, url: str) -> bool:
        return _url_allowed(url, self._state.config)

    def _accept(self, fields: dict[str, str], fault: Fault | None) -> MessageRecord:
        state = self._state
        now = datetime.now(timezone.utc)
        sender = fields.get("From") or None
        service_sid = fields.get("MessagingServiceSid") or None
        body = fields["Body"]
        record = MessageRecord(
            seq=state.store.next_seq(),
            sid=new_message_sid(),
            account_sid=state.config.account_sid,
            to=fields["To"],
            from_=sender,
            messaging_service_sid=service_sid,
            body=body,
            status_callback=fields.get("StatusCallback") or None,
            fault=fault.fault if fault else None,
            date_created=now,
            date_updated=now,
            # Twilio reports 0 segments until a Messaging Service has picked the sender.
            num_segments="0" if sender is None else str(count_segments(body)),
            validity_seconds=_validity_seconds(fields.get("ValidityPeriod", "")) or DEFAULT_VALIDITY_SECONDS,
            history=[StatusChange("queued", now)],
        )
        if isinstance(fault, LostThenReported):
            record.unlisted = True
            record.callback_gate = asyncio.Event()
            record.callback_release_after = fault.release_after_seconds
        state.store.add(record)
        state.stats.accepted += 1
        return record

    async def fetch_message(self, request: Request) -> Response:
        if denied := self._authenticate(request):
            return denied
        record = self._state.store.get(request.path_params["sid"])
        if record is None:
            return _not_found(request)
        return JSONResponse(record.resource())

    async def update_message(self, request: Request) -> Response:
        if denied := self._authenticate(request):
            return denied
        record = self._state.store.get(request.path_params["sid"])
        if record is None:
            return _not_found(request)
        fields = await _form_fields(request)
        status, body = fields.get("Status"), fields.get("Body")
        if (status is None) == (body is None) or (status is not None and status != "canceled") or body:
            # Exactly one of Status=canceled or Body="" (redaction) is a valid update.
            return error_response(400, 30400)
        if status is not None:
            # Only a scheduled message can be canceled, and this emulator never schedules.
            if record.status != "scheduled":
                return error_response(400, 30409)
        else:
            record.body = ""
            record.date_updated = datetime.now(timezone.utc)
        return JSONResponse(record.resource())

    async def list_messages(self, request: Request) -> Response:
        if denied := self._authenticate(request):
            return denied
        try:
            query = parse_list_query(request.query_params)
        except InvalidListQuery as error:
            return error_response(400, 20001, f"Invalid parameter: {error}")
        list_path = f"/{API_VERSION}/Accounts/{self._state.config.account_sid}/Messages.json"
        self._state.stats.list_pages_by_to[query.list_filter.to or ""] += 1
        return JSONResponse(list_page(self._state.store, query, list_path))


def _url_allowed(url: str, config: EmulatorConfig) -> bool:
    """Whether the emulator may post to ``url`` (a status callback, a reply's webhook)."""
    if len(url) > _MAX_CALLBACK_URL_CHARS:
        return False
    try:
        parts = urlsplit(url)
        hostname, _ = parts.hostname, parts.port  # .port raises ValueError when malformed
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not hostname or "_" in hostname:
        return False
    # The emulator is a test tool: it posts only to hosts it was told are local.
    return hostname in config.allowed_callback_hosts


def _validity_seconds(value: str) -> int | None:
    """ValidityPeriod as Twilio takes it (whole seconds, 1 to 36,000), or None when it is not."""
    low, high = VALIDITY_RANGE
    value = value.strip()
    if not (value.isascii() and value.isdigit()):
        return None
    seconds = int(value)
    return seconds if low <= seconds <= high else None


def _retry_after_header(fault: RateLimit) -> str:
    if fault.retry_after_format == "http-date":
        moment = datetime.now(timezone.utc) + timedelta(seconds=fault.retry_after)
        return format_datetime(moment, usegmt=True)
    return str(math.ceil(fault.retry_after))


def _not_found(request: Request) -> Response:
    return error_response(404, 20404, f"The requested resource {request.url.path} was not found")


class _AdminApi:
    def __init__(self, state: EmulatorState) -> None:
        self._state = state

    async def list_messages(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "emulator"):
            return denied
        to = request.query_params.get("to")
        records = [record for record in self._state.store.oldest_first() if to is None or record.to == to]
        return JSONResponse({"messages": [record.oracle() for record in records]})

    async def release_callbacks(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "emulator"):
            return denied
        to = request.query_params.get("to")
        if not to:
            return JSONResponse({"error": "name the recipient: ?to=+1..."}, status_code=400)
        released = 0
        for record in self._state.store.by_recipient(to):
            if record.callback_gate is not None and not record.callback_gate.is_set():
                record.callback_gate.set()
                released += 1
        return JSONResponse({"to": to, "released": released})

    async def get_stats(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "emulator"):
            return denied
        body = self._state.stats.as_json()
        body["stored_messages"] = len(self._state.store)
        body["running_lifecycles"] = self._state.lifecycle.running
        return JSONResponse(body)

    async def reset(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "emulator"):
            return denied
        await self._state.reset()
        return JSONResponse({"reset": True})

    async def inbound(self, request: Request) -> Response:
        """A handset texts our number: Twilio's keyword handling, then one signed webhook post."""
        if denied := refuse_foreign(request, "emulator"):
            return denied
        state = self._state
        try:
            asked = InboundRequest.model_validate(await request.json())
        except ValidationError as error:
            details = error.errors(include_url=False, include_context=False, include_input=False)
            return JSONResponse({"error": "invalid inbound message", "details": details}, status_code=422)
        except ValueError:  # not JSON, or not UTF-8
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        url = asked.url or state.config.inbound_url
        if url is not None and not _url_allowed(url, state.config):
            return JSONResponse({"error": "url: must be http(s) on an allowed (loopback) host"}, status_code=422)
        to = asked.to or state.config.service_sender
        # The number texted, and its Messaging Service when it is in one: an opt-out covers both.
        senders = [to] + ([asked.messaging_service_sid] if asked.messaging_service_sid else [])
        kind, keyword = keyword_of(asked.body)
        # Blocked before the webhook is called, and whether or not there is one, as Twilio does.
        state.opt_outs.apply(kind, asked.from_, senders)
        state.stats.inbound_received += 1
        sid = asked.message_sid or new_message_sid()
        delivered = None
        if url is not None:
            opt_out_type = OPT_OUT_TYPES.get(kind) if asked.advanced_opt_out and kind else None
            params = inbound_params(
                asked, sid=sid, to=to, account_sid=state.config.account_sid, opt_out_type=opt_out_type
            )
            delivered = await post_inbound(state.lifecycle, url, params, state.config.auth_token)
            if delivered.http_status is not None and 200 <= delivered.http_status < 300:
                state.stats.inbound_posts_succeeded += 1
            else:
                state.stats.inbound_posts_failed += 1
        return JSONResponse(
            {
                "message_sid": sid,
                "keyword": keyword,
                "blocked": state.opt_outs.blocks(asked.from_, senders),
                "twilio_reply": TWILIO_REPLIES[kind] if kind else None,
                "webhook": delivered.as_json() if delivered else None,
            }
        )

    async def list_opt_outs(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "emulator"):
            return denied
        return JSONResponse({"opt_outs": self._state.opt_outs.describe()})
