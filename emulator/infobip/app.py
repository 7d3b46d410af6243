"""One Infobip emulator as a Starlette app: its state, Infobip's SMS routes (``emulator.infobip.api``)
and a loopback admin API, the Twilio emulator's in shape::

    GET    /_emulator/faults              armed faults
    PUT    /_emulator/faults/{to}         arm {"fault": name, "count": n|null, ...params}; 422 when invalid
    DELETE /_emulator/faults/{to}         disarm one number
    DELETE /_emulator/faults              disarm all
    GET    /_emulator/messages[?to=...]   every accepted message: history, reports and their posts
    GET    /_emulator/stats               counters
    POST   /_emulator/reset               forget messages, reports, faults, counters; stop lifecycles

The admin API is how tests arm faults and count what was really sent; it never takes part in what a
client of the SMS API sees. Test and demo use only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from emulator.armed_faults import fault_routes, refuse_foreign
from emulator.ratelimit import RequestWindow
from emulator.infobip.api import InfobipApi
from emulator.infobip.config import InfobipConfig
from emulator.infobip.faults import FAULT_ADAPTER, FaultRegistry, number_key
from emulator.infobip.lifecycle import Lifecycle
from emulator.infobip.messages import InfobipStats, MessageStore
from emulator.infobip.reports import ReportPoster

_WHAT = "infobip emulator"


@dataclass
class InfobipState:
    """Everything one emulator instance knows; built by ``build_state``, never module-global."""

    config: InfobipConfig
    store: MessageStore
    faults: FaultRegistry
    stats: InfobipStats
    poster: ReportPoster
    api: InfobipApi

    async def reset(self) -> None:
        await self.poster.reset()
        self.store.clear()
        self.faults.clear()
        self.stats.reset()
        self.api.logs_window = RequestWindow(self.config.logs_requests_per_minute)


def build_state(config: InfobipConfig) -> InfobipState:
    """A fresh emulator's state, its faults from the configuration armed."""
    stats = InfobipStats()
    store = MessageStore(config.retention_seconds)
    faults = FaultRegistry()
    poster = ReportPoster(config, store, stats)
    api = InfobipApi(config, store, faults, stats, Lifecycle(config, stats, poster))
    for assignment in config.initial_faults:
        faults.arm(assignment.to, assignment.fault)
    return InfobipState(config, store, faults, stats, poster, api)


def create_app(state: InfobipState, *, own_poster: bool = True) -> Starlette:
    """The emulator's routes over ``state``. With ``own_poster`` the app's lifespan starts and stops the
    report poster; ``InfobipServer`` keeps it running across restarts of the listener instead."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if own_poster:
            await state.poster.start()
        try:
            yield
        finally:
            if own_poster:
                await state.poster.aclose()

    async def list_messages(request: Request) -> Response:
        if denied := refuse_foreign(request, _WHAT):
            return denied
        to = request.query_params.get("to")
        records = [r for r in state.store.oldest_first() if to is None or number_key(r.to) == number_key(to)]
        return JSONResponse({"messages": [record.oracle() for record in records]})

    async def get_stats(request: Request) -> Response:
        if denied := refuse_foreign(request, _WHAT):
            return denied
        body = state.stats.as_json()
        body["stored_messages"] = len(state.store)
        body["running_tasks"] = state.poster.running
        return JSONResponse(body)

    async def reset(request: Request) -> Response:
        if denied := refuse_foreign(request, _WHAT):
            return denied
        await state.reset()
        return JSONResponse({"reset": True})

    routes = [
        Route("/sms/3/messages", state.api.send, methods=["POST"]),
        Route("/sms/3/logs", state.api.logs, methods=["GET"]),
        Route("/sms/3/reports", state.api.reports, methods=["GET"]),
        *fault_routes("/_emulator/faults", state.faults, FAULT_ADAPTER, _WHAT),
        Route("/_emulator/messages", list_messages, methods=["GET"]),
        Route("/_emulator/stats", get_stats, methods=["GET"]),
        Route("/_emulator/reset", reset, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.infobip = state
    return app
