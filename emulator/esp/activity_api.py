"""SendGrid's Email Activity API on the admin port, and the admin routes that steer it::

    GET    /v3/messages?query=...&limit=N    "Filter all messages": newest first, at most limit (1..1000, default 10)
    GET    /v3/messages/{msg_id}             "Filter messages by message ID": one message with its events
    GET    /_esp/activity                    lag, rate, armed fault and the current rate window
    PUT    /_esp/activity                    {"lag_ms": int, "requests_per_minute": int|null}; 422 when invalid
    PUT    /_esp/activity-fault              {"status": 429|500|502|503, "count": n|null}; 422 when invalid
    DELETE /_esp/activity-fault              disarm (404 when nothing was armed)

The ``/v3`` paths are SendGrid's own (base URL https://api.sendgrid.com), so a client pointed at this
server sends exactly what it would send to SendGrid. There is no paging: SendGrid's list has no cursor
or offset, only ``limit`` over the newest matches. A request is judged in this order, each step
answering when it refuses:

    not purchased (activity_api_key None) .... 403 {"errors":[{"field":null,"message":"access forbidden"}]}
    no or wrong "Authorization: Bearer" ...... 401 {"errors":[{"field":null,"message":"authorization required"}]}
    armed fault .............................. 429 "too many requests", or 500/502/503 "internal error"
    over requests_per_minute ................. 429 {"errors":[{"message":"too many requests"}]}
    bad query or limit ....................... 400 {"errors":[{"message":"invalid syntax: ..."}]}
    msg_id not (yet) in the feed ............. 404 {"errors":[{"message":"not found","field":"message_id"}]}

The rate limit is SendGrid's documented "6 requests per minute" by default, counted over a fixed 60 s
window that opens with the first request after the last window closed, across both endpoints. Every
answer that reached the limiter carries ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
``X-RateLimit-Reset`` (unix seconds when the window closes); with no limit configured there is
nothing to report and the headers are left out. Requests refused before the limiter (403, 401, an
armed fault) do not count against it.
"""

from __future__ import annotations

import hmac
import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from emulator.armed_faults import refuse_foreign
from emulator.ratelimit import RequestWindow, WindowVerdict
from emulator.esp.activity_feed import ActivityFeed, api_key_id
from emulator.esp.activity_query import QuerySyntaxError, parse_query
from emulator.esp.config import MAX_ACTIVITY_LAG_MS, MAX_ACTIVITY_REQUESTS_PER_MINUTE, EspConfig
from emulator.esp.messages import EspStats, MessageStore

DEFAULT_LIMIT = 10
MAX_LIMIT = 1000
# Digits only: int() would also take " 5", "+5" and "5_0", which SendGrid's number parameter would not.
_LIMIT_TEXT = re.compile(r"[0-9]{1,7}")
_BEARER = "bearer "

M = TypeVar("M", bound=BaseModel)


class ActivitySettings(BaseModel):
    """The Activity API's run-time knobs; PUT replaces both (requests_per_minute null = unlimited)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lag_ms: int = Field(ge=0, le=MAX_ACTIVITY_LAG_MS)
    requests_per_minute: int | None = Field(ge=1, le=MAX_ACTIVITY_REQUESTS_PER_MINUTE)


class ActivityFault(BaseModel):
    """The next ``count`` Activity requests (None = all, until disarmed) answer ``status``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal[429, 500, 502, 503]
    count: int | None = Field(default=None, ge=1)


class ActivityApi:
    """The Email Activity API of one emulator: its settings, fault, rate window and routes."""

    def __init__(self, config: EspConfig, store: MessageStore, stats: EspStats) -> None:
        self._config = config
        self._stats = stats
        self._feed = ActivityFeed(store, api_key_id(config.password))
        self._settings = self._configured()
        self._window = RequestWindow(self._settings.requests_per_minute)
        self._fault: ActivityFault | None = None
        self._fault_remaining: int | None = None

    def _configured(self) -> ActivitySettings:
        return ActivitySettings(
            lag_ms=self._config.activity_lag_ms, requests_per_minute=self._config.activity_requests_per_minute
        )

    def reset(self) -> None:
        """Back to the configured lag and rate, a fresh window, no fault (the admin reset)."""
        self._apply(self._configured())
        self._fault = None
        self._fault_remaining = None

    def _apply(self, settings: ActivitySettings) -> None:
        self._settings = settings
        # A new rate starts a new window: counts made under the old limit say nothing about the new one.
        self._window = RequestWindow(settings.requests_per_minute)

    def routes(self) -> list[Route]:
        return [
            Route("/v3/messages", self.list_messages, methods=["GET"]),
            Route("/v3/messages/{msg_id}", self.get_message, methods=["GET"]),
            Route("/_esp/activity", self.get_settings, methods=["GET"]),
            Route("/_esp/activity", self.put_settings, methods=["PUT"]),
            Route("/_esp/activity-fault", self.arm_fault, methods=["PUT"]),
            Route("/_esp/activity-fault", self.disarm_fault, methods=["DELETE"]),
        ]

    # --- SendGrid's endpoints -------------------------------------------------------------------------

    async def list_messages(self, request: Request) -> Response:
        return self._serve(request, self._list)

    async def get_message(self, request: Request) -> Response:
        return self._serve(request, self._detail)

    def _serve(self, request: Request, answer: Callable[[Request], Response]) -> Response:
        self._stats.activity_requests += 1
        refusal, verdict = self._admit(request)
        response = refusal if refusal is not None else answer(request)
        if verdict is not None:
            response.headers.update(verdict.headers())
        self._stats.activity_answers_by_code[response.status_code] += 1
        return response

    def _admit(self, request: Request) -> tuple[Response | None, WindowVerdict | None]:
        """A refusal (403, 401, an armed fault, 429) or None, and the rate window's verdict to report."""
        key = self._config.activity_api_key
        if key is None:
            return _errors(403, "access forbidden", field=None), None
        if not _bearer_matches(request.headers.get("authorization", ""), key):
            return _errors(401, "authorization required", field=None), None
        now = time.time()
        if (status := self._take_fault()) is not None:
            if status == 429:
                return _errors(429, "too many requests"), self._window.exhausted(now)
            return _errors(status, "internal error"), None
        verdict = self._window.admit(now)
        if verdict is not None and not verdict.admitted:
            return _errors(429, "too many requests"), verdict
        return None, verdict

    def _take_fault(self) -> int | None:
        if self._fault is None:
            return None
        status = self._fault.status
        if self._fault_remaining is not None:
            self._fault_remaining -= 1
            if self._fault_remaining <= 0:
                self._fault, self._fault_remaining = None, None
        return status

    def _list(self, request: Request) -> Response:
        params = request.query_params
        query = params.get("query")
        if query is None:
            return _errors(400, "query is required", field="query")
        limit_text = params.get("limit")
        limit = DEFAULT_LIMIT
        if limit_text is not None:
            if not _LIMIT_TEXT.fullmatch(limit_text) or not 1 <= int(limit_text) <= MAX_LIMIT:
                return _errors(400, f"limit must be a whole number from 1 to {MAX_LIMIT}", field="limit")
            limit = int(limit_text)
        try:
            condition = parse_query(query)
        except QuerySyntaxError as error:
            return _errors(400, f"invalid syntax: {error}")
        matches = [message for message in self._feed.visible(*self._clock()) if condition.matches(message)]
        return JSONResponse({"messages": [message.summary_json() for message in matches[:limit]]})

    def _detail(self, request: Request) -> Response:
        message = self._feed.find(request.path_params["msg_id"], *self._clock())
        if message is None:
            return _errors(404, "not found", field="message_id")
        return JSONResponse(message.detail_json())

    def _clock(self) -> tuple[datetime, timedelta]:
        return datetime.now(timezone.utc), timedelta(milliseconds=self._settings.lag_ms)

    # --- the admin side -------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        fault = None
        if self._fault is not None:
            fault = {**self._fault.model_dump(), "remaining": self._fault_remaining}
        return {
            **self._settings.model_dump(),
            "api_purchased": self._config.activity_api_key is not None,
            "fault": fault,
            "window": self._window.describe(time.time()),
        }

    async def get_settings(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        return JSONResponse(self.describe())

    async def put_settings(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        settings = await _validated(request, ActivitySettings, "invalid activity settings")
        if isinstance(settings, Response):
            return settings
        self._apply(settings)
        return JSONResponse(self.describe())

    async def arm_fault(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        fault = await _validated(request, ActivityFault, "invalid activity fault")
        if isinstance(fault, Response):
            return fault
        self._fault, self._fault_remaining = fault, fault.count
        return JSONResponse(self.describe())

    async def disarm_fault(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        armed = self._fault is not None
        self._fault, self._fault_remaining = None, None
        return Response(status_code=204 if armed else 404)


def _errors(status: int, message: str, **field: str | None) -> JSONResponse:
    """SendGrid's error envelope; ``field`` only where SendGrid's own answer carries one."""
    return JSONResponse({"errors": [{**field, "message": message}]}, status_code=status)


def _bearer_matches(header: str, key: str) -> bool:
    # The scheme is case-insensitive (RFC 9110); the key is compared in constant time.
    if header[: len(_BEARER)].lower() != _BEARER:
        return False
    return hmac.compare_digest(header[len(_BEARER) :].strip().encode("utf-8"), key.encode("utf-8"))


async def _validated(request: Request, model: type[M], what: str) -> M | Response:
    """The request body as ``model``, or the 400/422 answer naming each field and its rule."""
    try:
        return model.model_validate(await request.json())
    except json.JSONDecodeError:
        return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
    except ValidationError as error:
        details = error.errors(include_url=False, include_context=False, include_input=False)
        problems = "; ".join(f"{'.'.join(str(p) for p in d['loc']) or 'body'}: {d['msg']}" for d in details)
        return JSONResponse({"error": f"{what}: {problems}", "details": details}, status_code=422)
