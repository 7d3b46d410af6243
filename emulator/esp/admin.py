"""The ESP emulator's admin HTTP API and its HTML page (no auth, loopback clients only)::

    GET    /                          HTML list of received messages (everything escaped; an HTML part
                                      shown in a sandboxed iframe, never live in the page)
    GET    /_esp/faults               armed faults
    PUT    /_esp/faults/{address}     arm {"fault": name, "count": n|null, ...params}; 422 when invalid
    DELETE /_esp/faults/{address}     disarm one address
    DELETE /_esp/faults               disarm all
    GET    /_esp/messages[?to=...]    every accepted message, its recipients, events and webhook attempts
    GET    /_esp/stats                counters
    GET    /_esp/public-key           {"public_key": "<base64 DER>"}: what verifies the event signatures
    GET    /_esp/activity             the Email Activity API's lag, rate limit, armed fault and rate window
    PUT    /_esp/activity             {"lag_ms": int, "requests_per_minute": int|null}; 422 when invalid
    PUT    /_esp/activity-fault       {"status": 429|500|502|503, "count": n|null}; 422 when invalid
    DELETE /_esp/activity-fault       disarm the Activity API fault
    POST   /_esp/reset                forget messages, faults, counters; stop pending events; the Activity
                                      API back to its configured lag and rate, its fault disarmed
    PUT    /_esp/outage               {"seconds": s}: the SMTP relay refuses connections for s seconds (at
                                      most 600), open connections cut; 422 when invalid
    DELETE /_esp/outage               end the relay's outage now

The admin API is how tests arm faults and count what was really accepted; it
never takes part in what a client of the SMTP side sees.

The same server also answers SendGrid's Email Activity API (``GET /v3/messages``,
``GET /v3/messages/{msg_id}``, Bearer key, from any client): see ``emulator.esp.activity_api``.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from emulator.armed_faults import fault_routes, refuse_foreign
from emulator.esp.activity_api import ActivityApi
from emulator.esp.config import EspConfig
from emulator.esp.events import EventPoster
from emulator.esp.faults import FAULT_ADAPTER, FaultRegistry
from emulator.esp.listener import MAX_OUTAGE_SECONDS, SmtpListener
from emulator.esp.messages import EspStats, MessageRecord, MessageStore

_MAX_ADDRESS_CHARS = 320


@dataclass
class EspState:
    """Everything one ESP emulator instance knows; built by ``EspServer``, never module-global."""

    config: EspConfig
    store: MessageStore
    faults: FaultRegistry
    stats: EspStats
    poster: EventPoster
    public_key: str
    activity: ActivityApi
    listener: SmtpListener

    async def reset(self) -> None:
        await self.poster.cancel_all()
        self.store.clear()
        self.faults.clear()
        self.stats.reset()
        self.activity.reset()


def _email_address_problem(address: str) -> str | None:
    if not 3 <= len(address) <= _MAX_ADDRESS_CHARS or "@" not in address:
        return "address must be an e-mail address (local@domain)"
    return None


def create_admin_app(state: EspState) -> Starlette:
    """The admin API over ``state``."""
    admin = _AdminApi(state)
    routes = [
        Route("/", admin.page, methods=["GET"]),
        *fault_routes("/_esp/faults", state.faults, FAULT_ADAPTER, "ESP emulator", _email_address_problem),
        Route("/_esp/messages", admin.list_messages, methods=["GET"]),
        Route("/_esp/stats", admin.get_stats, methods=["GET"]),
        Route("/_esp/public-key", admin.public_key, methods=["GET"]),
        Route("/_esp/reset", admin.reset, methods=["POST"]),
        Route("/_esp/outage", admin.start_outage, methods=["PUT"]),
        Route("/_esp/outage", admin.end_outage, methods=["DELETE"]),
        *state.activity.routes(),
    ]
    app = Starlette(routes=routes)
    app.state.esp = state
    return app


class _AdminApi:
    def __init__(self, state: EspState) -> None:
        self._state = state

    async def list_messages(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        records = self._state.store.oldest_first(request.query_params.get("to"))
        return JSONResponse({"messages": [record.oracle() for record in records]})

    async def get_stats(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        body = self._state.stats.as_json()
        body["stored_messages"] = len(self._state.store)
        body["running_event_tasks"] = self._state.poster.running
        return JSONResponse(body)

    async def public_key(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        return JSONResponse({"public_key": self._state.public_key})

    async def reset(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        await self._state.reset()
        return JSONResponse({"reset": True})

    async def start_outage(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        try:
            body = await request.json()
            seconds = body["seconds"] if isinstance(body, dict) else None
            until = self._state.listener.refuse_for(float(seconds))
        except (ValueError, KeyError, TypeError):
            return JSONResponse(
                {"error": f"seconds: must be a number above 0 and at most {MAX_OUTAGE_SECONDS:g}"}, status_code=422
            )
        return JSONResponse({"refusing_until": until.isoformat()})

    async def end_outage(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        await self._state.listener.resume()
        return JSONResponse({"refusing_until": None})

    async def page(self, request: Request) -> Response:
        if denied := refuse_foreign(request, "ESP emulator"):
            return denied
        return HTMLResponse(render_page(self._state.store.oldest_first()), headers={"Content-Security-Policy": PAGE_CSP})


# The page runs no script and loads nothing; an HTML part's srcdoc frame inherits this too, so its
# scripts, forms and remote images stay off even if a browser ignored the sandbox.
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-src 'self'; img-src data:"


def render_page(records: list[MessageRecord]) -> str:
    """An HTML list of received messages, newest first. Every value is escaped: subjects, headers
    and both parts come from whoever sent the mail. An HTML part is shown twice, neither live in the
    page: rendered in an iframe with ``sandbox=""`` (no script, no forms, no same origin) from an
    escaped ``srcdoc``, and as escaped source."""
    rows = "\n".join(_render_message(record) for record in reversed(records)) or "<p>No messages yet.</p>"
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>ESP emulator: received messages</title>"
        "<style>body{font-family:sans-serif;margin:2em}section{border-top:1px solid #ccc;padding:.5em 0}"
        "td,th{text-align:left;padding:0 1em 0 0;vertical-align:top}code{font-size:.9em}</style></head>"
        f"<body><h1>ESP emulator (SendGrid stand-in, test use only)</h1><p>{len(records)} message(s)</p>\n"
        f"{rows}\n</body></html>\n"
    )


def _render_message(record: MessageRecord) -> str:
    parsed = record.parsed
    recipients = ", ".join(
        f"{escape(r.email)} (<code>{escape(r.sg_message_id)}</code>: "
        f"{escape(' → '.join(e.body['event'] for e in r.events) or 'no events yet')})"
        for r in record.recipients
    )
    headers = "".join(
        f"<tr><th>{escape(name)}</th><td><code>{escape(value)}</code></td></tr>" for name, value in parsed.headers
    )
    attachments = "".join(
        f"<li>{escape(a.filename or '(no name)')}: {escape(a.content_type)}, {a.size} bytes, "
        f"sha256 <code>{escape(a.sha256)}</code></li>"
        for a in parsed.attachments
    )
    truncated = " (truncated)"
    text = (
        f"<h3>Text part{truncated if parsed.text_body_truncated else ''}</h3><pre>{escape(parsed.text_body)}</pre>"
        if parsed.text_body is not None
        else "<p>No text part.</p>"
    )
    html = (
        f"<h3>HTML part{truncated if parsed.html_body_truncated else ''}</h3>"
        f'<iframe sandbox="" referrerpolicy="no-referrer" title="HTML part" style="width:100%;height:20em" '
        f'srcdoc="{escape(parsed.html_body, quote=True)}"></iframe>'
        f"<details><summary>HTML source</summary><pre>{escape(parsed.html_body)}</pre></details>"
        if parsed.html_body is not None
        else ""
    )
    return (
        f"<section><h2>{escape(parsed.subject or '(no subject)')}</h2>"
        f"<p>To: {recipients}<br>Message-ID: <code>{escape(parsed.message_id)}</code><br>"
        f"Accepted: {escape(record.accepted_at.isoformat())}, {parsed.size} bytes, "
        f"<code>{escape(parsed.structure)}</code></p>"
        f"<details><summary>Headers</summary><table>{headers}</table></details>"
        f"{text}{html}<ul>{attachments}</ul></section>"
    )
