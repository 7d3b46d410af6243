"""The Twilio emulator, tested as a real uvicorn server on 127.0.0.1.

Each emulator and the callback receiver run in their own thread with their own
event loop, on ports the OS picked. Tests talk to them over real HTTP, and the
receiver checks every callback's X-Twilio-Signature with ``is_valid_signature``.
Tests use fresh random recipient numbers so they never see each other's messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from emulator.app import create_app
from emulator.config import EmulatorConfig
from emulator.messages import count_segments
from herald.providers.twilio_signature import is_valid_signature
from tests import reads

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "emulator-test-auth-token"
SENDER = "+15017122661"
SERVICE_SID = "MG" + "fedcba9876543210" * 2
MESSAGES_PATH = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
STEP_MS = 20
CALLBACK_ATTEMPTS = 6
REPO_ROOT = Path(__file__).resolve().parents[2]
# The full description beside the repo when present, else the Messages extract the repo carries.
_FULL_SPEC = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "twilio_api_v2010.json"
_EXTRACT = Path(__file__).resolve().parents[1] / "providers" / "data" / "twilio_api_v2010_messages.json"
SPEC_PATH = _FULL_SPEC if _FULL_SPEC.exists() else _EXTRACT

# Properties of Twilio's `api.v2010.account.message` schema and of ListMessageResponse.
MESSAGE_KEYS = {
    "account_sid", "api_version", "body", "date_created", "date_sent", "date_updated", "direction",
    "error_code", "error_message", "from", "messaging_service_sid", "num_media", "num_segments",
    "price", "price_unit", "sid", "status", "subresource_uris", "to", "uri",
}  # fmt: skip
LIST_KEYS = {
    "messages", "uri", "first_page_uri", "next_page_uri", "previous_page_uri", "page", "page_size", "start", "end",
}  # fmt: skip
RFC2822 = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} \+0000$")
CALLBACK_KEYS = {"MessageSid", "SmsSid", "AccountSid", "From", "To", "MessageStatus", "SmsStatus", "ApiVersion"}

T = TypeVar("T")


# --- real servers in threads -------------------------------------------------------------------


class ServerThread:
    """A real uvicorn server on 127.0.0.1, on a port the OS chose, in a daemon thread."""

    def __init__(self, app: Any, name: str, sock: socket.socket | None = None) -> None:
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self.port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"server {self._thread.name} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
        self._socket.close()


@dataclass(frozen=True)
class Received:
    path: str
    params: dict[str, str]
    signature_ok: bool
    idempotency_token: str | None
    at: float  # time.monotonic() when the request arrived
    answered: int


class CallbackReceiver:
    """A tiny status-callback endpoint that verifies signatures and remembers every request."""

    def __init__(self, auth_token: str) -> None:
        self._auth_token = auth_token
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._failures: dict[str, int] = {}

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/cb/{name}", self._handle, methods=["POST"])])

    def fail_next(self, path: str, times: int) -> None:
        """Answer the next ``times`` requests to ``path`` with 500."""
        with self._lock:
            self._failures[path] = times

    def received(self, path: str) -> list[Received]:
        with self._lock:
            return [item for item in self._received if item.path == path]

    async def _handle(self, request: Request) -> Response:
        async with request.form() as form:
            pairs = [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
        signature_ok = is_valid_signature(
            self._auth_token, str(request.url), pairs, request.headers.get("X-Twilio-Signature")
        )
        path = request.url.path
        with self._lock:
            failing = self._failures.get(path, 0)
            if failing:
                self._failures[path] = failing - 1
            status = 500 if failing else 204
            self._received.append(
                Received(
                    path=path,
                    params=dict(pairs),
                    signature_ok=signature_ok,
                    idempotency_token=request.headers.get("I-Twilio-Idempotency-Token"),
                    at=time.monotonic(),
                    answered=status,
                )
            )
        return Response(status_code=status)


def _emulator_config(**overrides: Any) -> EmulatorConfig:
    settings: dict[str, Any] = {
        "account_sid": ACCOUNT_SID,
        "auth_token": AUTH_TOKEN,
        "step_ms": STEP_MS,
        "callback_max_attempts": CALLBACK_ATTEMPTS,
        "callback_first_retry_seconds": 0.05,
        "callback_timeout_seconds": 2.0,
    }
    settings.update(overrides)
    return EmulatorConfig(**settings)


@pytest.fixture(scope="module")
def receiver_server() -> Iterator[tuple[CallbackReceiver, ServerThread]]:
    receiver = CallbackReceiver(AUTH_TOKEN)
    server = ServerThread(receiver.app(), "callback-receiver").start()
    yield receiver, server
    server.stop()


@pytest.fixture(scope="module")
def emulator_server() -> Iterator[ServerThread]:
    server = ServerThread(create_app(_emulator_config()), "emulator").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def slow_emulator_server() -> Iterator[ServerThread]:
    """An emulator whose messages stay ``queued`` for the whole test module."""
    server = ServerThread(create_app(_emulator_config(step_ms=600_000)), "slow-emulator").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def limited_emulator_server() -> Iterator[ServerThread]:
    server = ServerThread(create_app(_emulator_config(rate_limit_per_sender=2)), "limited-emulator").start()
    yield server
    server.stop()


def _client(base_url: str, **kwargs: Any) -> httpx.AsyncClient:
    kwargs.setdefault("timeout", 5.0)
    return httpx.AsyncClient(base_url=base_url, auth=(ACCOUNT_SID, AUTH_TOKEN), trust_env=False, **kwargs)


@pytest.fixture
async def client(emulator_server: ServerThread) -> Any:
    async with _client(emulator_server.base_url) as http:
        yield http


@pytest.fixture
async def slow_client(slow_emulator_server: ServerThread) -> Any:
    async with _client(slow_emulator_server.base_url) as http:
        yield http


@pytest.fixture
def receiver(receiver_server: tuple[CallbackReceiver, ServerThread]) -> CallbackReceiver:
    return receiver_server[0]


@pytest.fixture
def callback_url(receiver_server: tuple[CallbackReceiver, ServerThread]) -> Callable[[], tuple[str, str]]:
    """Returns a fresh (url, path) on the receiver; the URL carries a query string, which is signed too."""

    def make() -> tuple[str, str]:
        name = secrets.token_hex(6)
        path = f"/cb/{name}"
        return f"{receiver_server[1].base_url}{path}?case={name}&n=1", path

    return make


# --- helpers ----------------------------------------------------------------------------------


def fresh_number() -> str:
    return f"+1555{secrets.randbelow(10**7):07d}"


async def send(http: httpx.AsyncClient, to: str, **params: str | None) -> httpx.Response:
    """Create a message; a parameter given as None is left out of the form."""
    form: dict[str, str | None] = {"To": to, "From": SENDER, "Body": "Your order #157 is confirmed."}
    form.update(params)
    return await http.post(MESSAGES_PATH, data={key: value for key, value in form.items() if value is not None})


async def wait_for(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 5.0) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout`` seconds."""
    return await reads.eventually(probe, what, timeout, every=0.02)  # type: ignore[arg-type]


async def oracle(http: httpx.AsyncClient, to: str) -> list[dict[str, Any]]:
    response = await http.get("/_emulator/messages", params={"to": to})
    assert response.status_code == 200
    return response.json()["messages"]


async def ended_callbacks(http: httpx.AsyncClient, to: str, count: int) -> list[dict[str, Any]]:
    """The emulator's record of ``count`` callback attempts to ``to``, once each has ended.

    The emulator lists an attempt when it starts and fills in its answer after the receiver's
    response reaches it, so a receiver can have answered before the record says so."""

    async def probe() -> list[dict[str, Any]] | None:
        attempts = (await oracle(http, to))[0]["callbacks"]
        ended = all(a["http_status"] is not None or a["error"] for a in attempts)
        return attempts if len(attempts) >= count and ended else None

    return await wait_for(probe, f"{count} ended callback attempts to {to}")


async def arm(http: httpx.AsyncClient, to: str, **fault: Any) -> None:
    response = await http.put(f"/_emulator/faults/{to}", json=fault)
    assert response.status_code == 200, response.text


async def fetch(http: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    response = await http.get(f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}.json")
    assert response.status_code == 200, response.text
    return response.json()


async def wait_for_status(http: httpx.AsyncClient, sid: str, status: str, timeout: float = 5.0) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        resource = await fetch(http, sid)
        return resource if resource["status"] == status else None

    return await wait_for(probe, f"{sid} to reach {status}", timeout)


async def wait_for_callbacks(receiver: CallbackReceiver, path: str, count: int, timeout: float = 5.0) -> list[Received]:
    async def probe() -> list[Received] | None:
        items = receiver.received(path)
        return items if len(items) >= count else None

    return await wait_for(probe, f"{count} callbacks at {path}", timeout)


def twilio_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"code", "message", "more_info", "status"}
    assert body["code"] == code
    assert body["status"] == status
    assert body["more_info"] == f"https://www.twilio.com/docs/errors/{code}"
    return body


# --- Twilio API shapes and auth ---------------------------------------------------------------


async def test_create_answers_twilio_message_resource(client: httpx.AsyncClient) -> None:
    """A valid create answers 201 with exactly Twilio's Message resource fields, queued and unsent."""
    to = fresh_number()
    response = await send(client, to, Body="Hello")
    assert response.status_code == 201
    resource = response.json()
    assert set(resource) == MESSAGE_KEYS
    assert re.fullmatch(r"SM[0-9a-f]{32}", resource["sid"])
    assert resource["account_sid"] == ACCOUNT_SID
    assert (resource["to"], resource["from"], resource["body"]) == (to, SENDER, "Hello")
    assert resource["status"] == "queued"
    assert resource["direction"] == "outbound-api"
    assert resource["api_version"] == "2010-04-01"
    assert (resource["num_segments"], resource["num_media"]) == ("1", "0")
    assert (resource["price"], resource["price_unit"]) == (None, "USD")
    assert (resource["error_code"], resource["error_message"]) == (None, None)
    assert resource["messaging_service_sid"] is None
    assert resource["date_sent"] is None
    assert RFC2822.match(resource["date_created"]) and RFC2822.match(resource["date_updated"])
    assert resource["uri"] == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{resource['sid']}.json"
    assert resource["subresource_uris"] == {
        "media": f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{resource['sid']}/Media.json"
    }


async def test_fetch_follows_the_lifecycle(client: httpx.AsyncClient) -> None:
    """Fetch returns the same resource shape and shows date_sent once the message has left the queue."""
    created = (await send(client, fresh_number())).json()
    delivered = await wait_for_status(client, created["sid"], "delivered")
    assert set(delivered) == MESSAGE_KEYS
    assert delivered["sid"] == created["sid"]
    assert RFC2822.match(delivered["date_sent"])
    assert parsedate_to_datetime(delivered["date_sent"]) >= parsedate_to_datetime(created["date_created"])
    history = (await oracle(client, created["to"]))[0]["history"]
    assert [change["status"] for change in history] == ["queued", "sending", "sent", "delivered"]
    times = [datetime.fromisoformat(change["at"]) for change in history]
    assert times == sorted(times)


async def test_messaging_service_message_gets_a_sender_when_sending(client: httpx.AsyncClient) -> None:
    """A message with only MessagingServiceSid has no from and 0 segments until the service picks a sender."""
    response = await send(client, fresh_number(), From=None, MessagingServiceSid=SERVICE_SID)
    assert response.status_code == 201
    created = response.json()
    assert (created["from"], created["messaging_service_sid"], created["num_segments"]) == (None, SERVICE_SID, "0")
    delivered = await wait_for_status(client, created["sid"], "delivered")
    assert delivered["from"] == "+15005550006"
    assert delivered["num_segments"] == "1"


def test_shapes_match_the_reference_spec() -> None:
    """The field sets these tests check are the ones Twilio's OpenAPI description defines."""
    spec = json.loads(SPEC_PATH.read_text())
    assert set(spec["components"]["schemas"]["api.v2010.account.message"]["properties"]) == MESSAGE_KEYS
    listing = spec["paths"]["/2010-04-01/Accounts/{AccountSid}/Messages.json"]["get"]
    envelope = listing["responses"]["200"]["content"]["application/json"]["schema"]["properties"]
    assert set(envelope) == LIST_KEYS


@pytest.mark.parametrize(
    "auth, account_sid",
    [
        ((ACCOUNT_SID, "wrong-token"), ACCOUNT_SID),
        (("AC" + "1" * 32, AUTH_TOKEN), ACCOUNT_SID),
        (None, ACCOUNT_SID),
        ((ACCOUNT_SID, AUTH_TOKEN), "AC" + "2" * 32),
    ],
    ids=["wrong-token", "wrong-user", "no-auth", "path-sid-mismatch"],
)
async def test_bad_credentials_answer_20003(
    emulator_server: ServerThread, auth: tuple[str, str] | None, account_sid: str
) -> None:
    """Wrong credentials or another account's path answer 401 with Twilio's 20003 body, on every endpoint."""
    async with httpx.AsyncClient(base_url=emulator_server.base_url, auth=auth, trust_env=False, timeout=5) as http:
        base = f"/2010-04-01/Accounts/{account_sid}/Messages"
        answers = [
            await http.post(f"{base}.json", data={"To": fresh_number(), "From": SENDER, "Body": "x"}),
            await http.get(f"{base}.json"),
            await http.get(f"{base}/SM{'0' * 32}.json"),
        ]
    for response in answers:
        assert response.json() == {
            "code": 20003,
            "message": "Authenticate",
            "more_info": "https://www.twilio.com/docs/errors/20003",
            "status": 401,
        }
        assert response.status_code == 401


@pytest.mark.parametrize(
    "params, code",
    [
        ({"To": ""}, 21604),
        ({"To": "5551234567"}, 21211),
        ({"To": "+1 555 123 4567"}, 21211),
        ({"From": None}, 21603),
        ({"Body": None}, 21602),
        ({"Body": "x" * 1601}, 21617),
        ({"StatusCallback": "https://example.com/status"}, 21609),
        ({"StatusCallback": "not a url"}, 21609),
    ],
    ids=[
        "missing-to", "to-not-e164", "to-with-spaces", "no-sender",
        "no-body", "body-too-long", "callback-not-local", "callback-garbage",
    ],  # fmt: skip
)
async def test_invalid_create_answers_400(
    client: httpx.AsyncClient, params: dict[str, str | None], code: int
) -> None:
    """Invalid create requests answer 400 with Twilio's error code and accept nothing."""
    to = fresh_number()
    form = {"To": to, "From": SENDER, "Body": "x", **params}
    response = await client.post(MESSAGES_PATH, data={key: value for key, value in form.items() if value is not None})
    twilio_error(response, 400, code)
    assert await oracle(client, to) == []


async def test_unknown_parameters_are_ignored(client: httpx.AsyncClient) -> None:
    """Parameters the emulator does not model are accepted and ignored, as Twilio does."""
    response = await send(client, fresh_number(), ProvideFeedback="true", ValidityPeriod="600", Whatever="1")
    assert response.status_code == 201


async def test_body_of_exactly_1600_chars_is_accepted(client: httpx.AsyncClient) -> None:
    """The 1600-character limit is inclusive and the segment count follows GSM-7 concatenation."""
    response = await send(client, fresh_number(), Body="x" * 1600)
    assert response.status_code == 201
    assert response.json()["num_segments"] == str(-(-1600 // 153))


def test_segment_counting() -> None:
    """Segments are 160/153 GSM-7 septets (extension chars count twice) or 70/67 UTF-16 units."""
    assert count_segments("a" * 160) == 1
    assert count_segments("a" * 161) == 2
    assert count_segments("€" * 80) == 1
    assert count_segments("€" * 81) == 2
    assert count_segments("ł" * 70) == 1
    assert count_segments("ł" * 71) == 2
    assert count_segments("👍" * 35) == 1
    assert count_segments("👍" * 36) == 2


async def test_unknown_message_answers_20404(client: httpx.AsyncClient) -> None:
    """Fetching a SID the emulator never issued answers 404 with code 20404."""
    response = await client.get(f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/SM{'0' * 32}.json")
    twilio_error(response, 404, 20404)


async def test_cancel_is_refused_and_redaction_works(client: httpx.AsyncClient) -> None:
    """Canceling a non-scheduled message answers 30409; Body="" redacts; other updates answer 30400."""
    sid = (await send(client, fresh_number())).json()["sid"]
    path = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}.json"
    twilio_error(await client.post(path, data={"Status": "canceled"}), 400, 30409)
    twilio_error(await client.post(path, data={"Status": "paused"}), 400, 30400)
    twilio_error(await client.post(path, data={"Body": "new text"}), 400, 30400)
    redacted = await client.post(path, data={"Body": ""})
    assert redacted.status_code == 200
    assert redacted.json()["body"] == ""
    assert (await fetch(client, sid))["status"] != "canceled"


# --- listing ----------------------------------------------------------------------------------


async def test_list_pages_newest_first(slow_client: httpx.AsyncClient) -> None:
    """ListMessage pages newest first with PageSize, and its next/previous URIs walk the pages."""
    to = fresh_number()
    created = [(await send(slow_client, to, Body=f"message {n}")).json()["sid"] for n in range(5)]
    first = await slow_client.get(MESSAGES_PATH, params={"To": to, "PageSize": 2})
    assert first.status_code == 200
    page = first.json()
    assert set(page) == LIST_KEYS
    assert all(set(message) == MESSAGE_KEYS for message in page["messages"])
    assert (page["page"], page["page_size"], page["start"], page["end"]) == (0, 2, 0, 1)
    assert page["previous_page_uri"] is None
    assert page["first_page_uri"].startswith(MESSAGES_PATH + "?To=%2B")
    seen, pages = [], [page]
    while True:
        seen += [message["sid"] for message in page["messages"]]
        if page["next_page_uri"] is None:
            break
        assert "PageToken=PA" in page["next_page_uri"]
        page = (await slow_client.get(page["next_page_uri"])).json()
        pages.append(page)
    assert seen == list(reversed(created))
    assert [(p["page"], p["start"], p["end"]) for p in pages] == [(0, 0, 1), (1, 2, 3), (2, 4, 4)]
    back = (await slow_client.get(pages[1]["previous_page_uri"])).json()
    assert [message["sid"] for message in back["messages"]] == [m["sid"] for m in pages[0]["messages"]]


async def test_list_page_size_default_and_cap(slow_client: httpx.AsyncClient) -> None:
    """PageSize defaults to 50, is capped at 1000, and a malformed PageSize answers 400."""
    assert (await slow_client.get(MESSAGES_PATH, params={"To": fresh_number()})).json()["page_size"] == 50
    assert (await slow_client.get(MESSAGES_PATH, params={"PageSize": 5000})).json()["page_size"] == 1000
    twilio_error(await slow_client.get(MESSAGES_PATH, params={"PageSize": "many"}), 400, 20001)


async def test_list_filters_by_date_sent(client: httpx.AsyncClient) -> None:
    """DateSent, DateSent< (on or before) and DateSent> (on or after) filter on date_sent, by day or instant."""
    # Two messages sent a moment apart can straddle midnight GMT once, never twice in a row.
    for _ in range(2):
        to = fresh_number()
        sids = [(await send(client, to)).json()["sid"] for _ in range(2)]
        sent = [parsedate_to_datetime((await wait_for_status(client, sid, "delivered"))["date_sent"]) for sid in sids]
        day = sent[0].date()
        if sent[1].date() == day:
            break
    assert sent[1].date() == day

    async def count(**params: str) -> int:
        response = await client.get(MESSAGES_PATH, params={"To": to, **params})
        assert response.status_code == 200, response.text
        return len(response.json()["messages"])

    one_day = timedelta(days=1)
    assert await count() == 2
    assert await count(DateSent=day.isoformat()) == 2
    assert await count(DateSent=(day - one_day).isoformat()) == 0
    assert await count(**{"DateSent<": day.isoformat()}) == 2
    assert await count(**{"DateSent<": (day - one_day).isoformat()}) == 0
    assert await count(**{"DateSent>": day.isoformat()}) == 2
    assert await count(**{"DateSent>": (day + one_day).isoformat()}) == 0
    earliest, latest = min(sent), max(sent)
    assert await count(**{"DateSent>": earliest.strftime("%Y-%m-%dT%H:%M:%SZ")}) == 2
    assert await count(**{"DateSent>": (latest + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}) == 0
    assert await count(**{"DateSent<": format_datetime(latest)}) == 2
    assert await count(**{"DateSent<": (earliest - timedelta(hours=1)).isoformat()}) == 0
    assert await count(From=SENDER) == 2
    assert await count(From="+15550000000") == 0
    echoed = (await client.get(MESSAGES_PATH, params={"To": to, "DateSent>": day.isoformat()})).json()["uri"]
    assert f"DateSent%3E={day.isoformat()}" in echoed
    twilio_error(await client.get(MESSAGES_PATH, params={"DateSent": "yesterday"}), 400, 20001)


async def test_queued_messages_match_no_date_sent_filter(slow_client: httpx.AsyncClient) -> None:
    """A message still queued has no date_sent, so any DateSent filter leaves it out, as on Twilio."""
    to = fresh_number()
    await send(slow_client, to)
    listed = (await slow_client.get(MESSAGES_PATH, params={"To": to})).json()["messages"]
    assert [(m["status"], m["date_sent"]) for m in listed] == [("queued", None)]
    today = datetime.now(timezone.utc).date().isoformat()
    for params in ({"DateSent": today}, {"DateSent>": "2000-01-01"}, {"DateSent<": "2999-01-01"}):
        assert (await slow_client.get(MESSAGES_PATH, params={"To": to, **params})).json()["messages"] == []


async def test_list_is_by_date_sent_with_unsent_messages_first(client: httpx.AsyncClient) -> None:
    """ListMessage orders by date_sent, most recent first; a message still queued (no date_sent) is listed above them."""
    to = fresh_number()
    sent = [(await send(client, to, Body=f"sent {n}")).json()["sid"] for n in range(2)]
    for sid in sent:
        await wait_for_status(client, sid, "delivered")
    await arm(client, to, fault="accept_then_hang", hang_seconds=0.05, queue_seconds=5, count=1)
    held = (await send(client, to, Body="held in the queue")).json()["sid"]
    listed = (await client.get(MESSAGES_PATH, params={"To": to})).json()["messages"]
    assert [m["sid"] for m in listed] == [held, *reversed(sent)]
    assert listed[0]["status"] == "queued" and listed[0]["date_sent"] is None


async def test_validity_period_is_taken_and_checked(client: httpx.AsyncClient) -> None:
    """ValidityPeriod is stored when it is whole seconds from 1 to 36,000; anything else answers 400."""
    to = fresh_number()
    assert (await send(client, to, ValidityPeriod="600")).status_code == 201
    assert (await oracle(client, to))[0]["validity_seconds"] == 600
    assert (await send(client, to)).status_code == 201
    assert (await oracle(client, to))[1]["validity_seconds"] == 36_000
    for bad in ("0", "36001", "1.5", "ten", "٣"):
        twilio_error(await send(client, to, ValidityPeriod=bad), 400, 20001)
    assert len(await oracle(client, to)) == 2


async def test_queue_seconds_hold_the_message_queued_without_date_sent(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """accept_then_hang with queue_seconds: the message waits `queued`, with no date_sent and no callback, then goes out."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="accept_then_hang", hang_seconds=0.05, queue_seconds=0.8, count=1)
    started = time.monotonic()
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    await asyncio.sleep(0.4)
    resource = await fetch(client, sid)
    assert (resource["status"], resource["date_sent"]) == ("queued", None)
    assert receiver.received(path) == []
    await wait_for_status(client, sid, "delivered")
    assert time.monotonic() - started >= 0.8
    assert [c.params["MessageStatus"] for c in await wait_for_callbacks(receiver, path, 2)] == ["sent", "delivered"]


async def test_a_message_that_outstays_its_validity_period_fails_unsent(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """Held in the queue past its ValidityPeriod, a message is dropped: failed with 30036, never sent, one failed callback."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="accept_then_hang", hang_seconds=0.05, queue_seconds=30, count=1)
    started = time.monotonic()
    sid = (await send(client, to, StatusCallback=url, ValidityPeriod="1")).json()["sid"]
    failed = await wait_for_status(client, sid, "failed", timeout=5)
    assert time.monotonic() - started >= 1.0
    assert failed["error_code"] == 30036 and failed["date_sent"] is None
    (callback,) = await wait_for_callbacks(receiver, path, 1)
    assert (callback.params["MessageStatus"], callback.params["ErrorCode"]) == ("failed", "30036")
    assert [change["status"] for change in (await oracle(client, to))[0]["history"]] == ["queued", "failed"]


async def test_lost_then_reported_hides_the_message_and_holds_its_reports(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """lost_then_reported: the message is delivered but never listed, and its callbacks wait for the admin release."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="lost_then_reported", hang_seconds=0.05, count=1)
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    await wait_for_status(client, sid, "delivered")
    assert (await client.get(MESSAGES_PATH, params={"To": to})).json()["messages"] == []
    await asyncio.sleep(0.2)
    assert receiver.received(path) == []
    released = await client.post("/_emulator/callbacks/release", params={"to": to})
    assert released.json() == {"to": to, "released": 1}
    assert sorted(c.params["MessageStatus"] for c in await wait_for_callbacks(receiver, path, 2)) == ["delivered", "sent"]
    assert (await oracle(client, to))[0]["unlisted"] is True
    assert (await client.post("/_emulator/callbacks/release")).status_code == 400


async def test_list_pages_are_counted_per_recipient(client: httpx.AsyncClient) -> None:
    """The stats count ListMessage pages by the To they filtered on, so a test can see how deep a search went."""
    to = fresh_number()
    for _ in range(3):
        await client.get(MESSAGES_PATH, params={"To": to})
    assert (await client.get("/_emulator/stats")).json()["list_pages_by_to"][to] == 3


# --- callbacks --------------------------------------------------------------------------------


async def test_signed_callbacks_for_sent_and_delivered(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """A message with StatusCallback reports sent then delivered, signed so the receiver's check passes."""
    url, path = callback_url()
    to = fresh_number()
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    callbacks = await wait_for_callbacks(receiver, path, 2)
    await asyncio.sleep(0.1)
    assert len(receiver.received(path)) == 2
    assert [c.params["MessageStatus"] for c in callbacks] == ["sent", "delivered"]
    assert all(c.signature_ok for c in callbacks)
    sent, delivered = (c.params for c in callbacks)
    assert set(sent) == CALLBACK_KEYS
    assert set(delivered) == CALLBACK_KEYS | {"RawDlrDoneDate"}
    assert re.fullmatch(r"\d{10}", delivered["RawDlrDoneDate"])
    for params, status in ((sent, "sent"), (delivered, "delivered")):
        expected = {
            "MessageSid": sid,
            "SmsSid": sid,
            "AccountSid": ACCOUNT_SID,
            "From": SENDER,
            "To": to,
            "MessageStatus": status,
            "SmsStatus": status,
            "ApiVersion": "2010-04-01",
        }
        assert {key: params[key] for key in expected} == expected
    assert not is_valid_signature("another-token", url, list(sent.items()), "x")
    recorded = (await oracle(client, to))[0]
    assert recorded["status_callback"] == url
    assert [(c["status"], c["attempt"], c["http_status"]) for c in await ended_callbacks(client, to, 2)] == [
        ("sent", 1, 204),
        ("delivered", 1, 204),
    ]


async def test_callback_redelivered_after_receiver_errors(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """Callbacks the receiver answers with 500 are retried until it answers 2xx, and every attempt is recorded."""
    url, path = callback_url()
    receiver.fail_next(path, 3)
    to = fresh_number()
    await send(client, to, StatusCallback=url)

    async def both_succeeded() -> list[Received] | None:
        ok = [c for c in receiver.received(path) if c.answered == 204]
        return ok if {c.params["MessageStatus"] for c in ok} == {"sent", "delivered"} else None

    await wait_for(both_succeeded, "both callbacks to succeed")
    received = receiver.received(path)
    assert len(received) == 5
    assert [c.answered for c in received].count(500) == 3
    assert all(c.signature_ok for c in received)
    tokens: dict[str, set[str | None]] = {}
    for c in received:
        tokens.setdefault(c.params["MessageStatus"], set()).add(c.idempotency_token)
    assert all(len(found) == 1 for found in tokens.values()), "a retry must keep its idempotency token"
    attempts = await ended_callbacks(client, to, 5)
    assert sorted(a["http_status"] for a in attempts) == [204, 204, 500, 500, 500]
    for status in ("sent", "delivered"):
        mine = [a for a in attempts if a["status"] == status]
        assert [a["attempt"] for a in mine] == list(range(1, len(mine) + 1))
        assert mine[-1]["http_status"] == 204


async def test_receiver_that_was_down_gets_every_report(
    client: httpx.AsyncClient, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """A receiver that refuses connections at first still gets both callbacks once it comes up."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
    late = CallbackReceiver(AUTH_TOKEN)
    server = ServerThread(late.app(), "late-receiver", sock=sock)
    url = f"{server.base_url}/cb/late"
    to = fresh_number()
    try:
        await send(client, to, StatusCallback=url)

        async def refused() -> bool:
            attempts = (await oracle(client, to))[0]["callbacks"]
            return any(a["error"] for a in attempts)

        await wait_for(refused, "a refused callback attempt")
        await asyncio.to_thread(server.start)
        await wait_for_callbacks(late, "/cb/late", 2)
        assert {c.params["MessageStatus"] for c in late.received("/cb/late")} == {"sent", "delivered"}
        assert all(c.signature_ok for c in late.received("/cb/late"))
    finally:
        await asyncio.to_thread(server.stop)


async def test_callback_retries_are_bounded(client: httpx.AsyncClient) -> None:
    """A callback URL that never answers is tried the configured number of times, then abandoned."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}/never"
    to = fresh_number()
    try:
        await send(client, to, StatusCallback=url)

        async def exhausted() -> list[dict[str, Any]] | None:
            # An attempt is listed when it starts: wait until every one has also ended.
            attempts = (await oracle(client, to))[0]["callbacks"]
            ended = all(a["http_status"] is not None or a["error"] for a in attempts)
            return attempts if len(attempts) == 2 * CALLBACK_ATTEMPTS and ended else None

        attempts = await wait_for(exhausted, "all callback attempts")
        await asyncio.sleep(0.3)
        assert len((await oracle(client, to))[0]["callbacks"]) == 2 * CALLBACK_ATTEMPTS
        assert all(a["http_status"] is None and a["error"] for a in attempts)
    finally:
        probe.close()


# --- faults -----------------------------------------------------------------------------------


async def test_accept_then_hang(
    emulator_server: ServerThread, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """accept_then_hang: the client's read timeout fires, yet the message was accepted and is delivered."""
    url, path = callback_url()
    to = fresh_number()
    async with _client(emulator_server.base_url, timeout=httpx.Timeout(5.0, read=0.3)) as impatient:
        await arm(impatient, to, fault="accept_then_hang", hang_seconds=1.5, count=2)
        with pytest.raises(httpx.ReadTimeout):
            await send(impatient, to, StatusCallback=url)
        recorded = await oracle(impatient, to)
        assert len(recorded) == 1 and recorded[0]["fault"] == "accept_then_hang"
        await wait_for_status(impatient, recorded[0]["sid"], "delivered")
        await wait_for_callbacks(receiver, path, 2)
    async with _client(emulator_server.base_url) as patient:
        started = time.monotonic()
        late = await send(patient, to)
        assert time.monotonic() - started >= 1.4
        assert late.status_code == 201 and late.json()["status"] == "queued"
        assert len(await oracle(patient, to)) == 2


@pytest.mark.parametrize("status", [500, 503])
async def test_accept_then_error(
    emulator_server: ServerThread, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]], status: int
) -> None:
    """accept_then_error: the answer is a 5xx with Twilio's error body, yet the message was created, is
    listed and is delivered with its callbacks."""
    url, path = callback_url()
    to = fresh_number()
    async with _client(emulator_server.base_url) as client:
        await arm(client, to, fault="accept_then_error", status=status, count=1)
        answer = await send(client, to, StatusCallback=url)
        assert answer.status_code == status and answer.json()["code"] == 20000 + status
        recorded = await oracle(client, to)
        assert len(recorded) == 1 and recorded[0]["fault"] == "accept_then_error"
        await wait_for_status(client, recorded[0]["sid"], "delivered")
        await wait_for_callbacks(receiver, path, 2)


async def test_hang_without_accept(emulator_server: ServerThread) -> None:
    """hang_without_accept: the client times out or gets 503 after the hang, and no message ever exists."""
    to = fresh_number()
    async with _client(emulator_server.base_url, timeout=httpx.Timeout(5.0, read=0.3)) as impatient:
        await arm(impatient, to, fault="hang_without_accept", hang_seconds=1.0, count=2)
        with pytest.raises(httpx.ReadTimeout):
            await send(impatient, to)
    async with _client(emulator_server.base_url) as patient:
        started = time.monotonic()
        twilio_error(await send(patient, to), 503, 20503)
        assert time.monotonic() - started >= 0.9
        assert await oracle(patient, to) == []
        assert (await send(patient, to)).status_code == 201


@pytest.mark.parametrize("fault, status, code", [("error_500", 500, 20500), ("error_503", 503, 20503)])
async def test_server_error_faults(client: httpx.AsyncClient, fault: str, status: int, code: int) -> None:
    """error_500/error_503 answer that status with Twilio's body, accept nothing, and stop after count."""
    to = fresh_number()
    await arm(client, to, fault=fault, count=1)
    twilio_error(await send(client, to), status, code)
    assert await oracle(client, to) == []
    assert (await send(client, to)).status_code == 201
    assert len(await oracle(client, to)) == 1


async def test_rate_limit_fault_retry_after_seconds(client: httpx.AsyncClient) -> None:
    """rate_limit answers 429 code 20429 with Retry-After in whole seconds and accepts nothing."""
    to = fresh_number()
    await arm(client, to, fault="rate_limit", retry_after=7, retry_after_format="seconds", count=1)
    response = await send(client, to)
    twilio_error(response, 429, 20429)
    assert response.headers["Retry-After"] == "7"
    assert await oracle(client, to) == []


async def test_rate_limit_fault_retry_after_http_date(client: httpx.AsyncClient) -> None:
    """rate_limit with http-date answers Retry-After as an HTTP date retry_after seconds ahead."""
    to = fresh_number()
    await arm(client, to, fault="rate_limit", retry_after=120, retry_after_format="http-date")
    response = await send(client, to)
    twilio_error(response, 429, 20429)
    header = response.headers["Retry-After"]
    assert header.endswith(" GMT")
    ahead = (parsedate_to_datetime(header) - datetime.now(timezone.utc)).total_seconds()
    assert 110 <= ahead <= 121
    assert await oracle(client, to) == []


@pytest.mark.parametrize("code", [21610, 21211, 21614])
async def test_reject_fault(client: httpx.AsyncClient, code: int) -> None:
    """reject answers 400 with the configured Twilio code and accepts nothing."""
    to = fresh_number()
    await arm(client, to, fault="reject", code=code)
    body = twilio_error(await send(client, to), 400, code)
    assert body["message"]
    assert await oracle(client, to) == []


async def test_undelivered_fault(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """undelivered ends the lifecycle undelivered with the error code, reported in the final callback."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="undelivered", code=30003)
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    final = await wait_for_status(client, sid, "undelivered")
    assert final["error_code"] == 30003 and final["error_message"]
    callbacks = await wait_for_callbacks(receiver, path, 2)
    assert [c.params["MessageStatus"] for c in callbacks] == ["sent", "undelivered"]
    assert "ErrorCode" not in callbacks[0].params
    assert callbacks[1].params["ErrorCode"] == "30003"
    assert re.fullmatch(r"\d{10}", callbacks[1].params["RawDlrDoneDate"])
    assert all(c.signature_ok for c in callbacks)


async def test_failed_fault(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """failed ends the lifecycle failed without ever being sent, with one failed callback carrying ErrorCode."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="failed", code=30001)
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    final = await wait_for_status(client, sid, "failed")
    assert final["error_code"] == 30001
    (callback,) = await wait_for_callbacks(receiver, path, 1)
    await asyncio.sleep(0.1)
    assert len(receiver.received(path)) == 1
    assert callback.params["MessageStatus"] == "failed" and callback.params["ErrorCode"] == "30001"
    assert "RawDlrDoneDate" not in callback.params
    history = (await oracle(client, to))[0]["history"]
    assert [change["status"] for change in history] == ["queued", "sending", "failed"]


async def test_callback_before_response(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """callback_before_response: the receiver has answered both callbacks before the client gets its 201."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="callback_before_response")
    response = await send(client, to, StatusCallback=url)
    answered_at = time.monotonic()
    assert response.status_code == 201
    assert response.json()["status"] == "queued"
    callbacks = receiver.received(path)
    assert [c.params["MessageStatus"] for c in callbacks] == ["sent", "delivered"]
    assert all(c.at < answered_at and c.signature_ok for c in callbacks)
    recorded = (await oracle(client, to))[0]
    assert recorded["status"] == "delivered"
    assert [c["http_status"] for c in await ended_callbacks(client, to, 2)] == [204, 204]


async def test_duplicate_callbacks(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """duplicate_callbacks delivers every callback the configured number of times."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="duplicate_callbacks", copies=3)
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    callbacks = await wait_for_callbacks(receiver, path, 6)
    await asyncio.sleep(0.1)
    statuses = [c.params["MessageStatus"] for c in receiver.received(path)]
    assert sorted(statuses) == ["delivered"] * 3 + ["sent"] * 3
    assert all(c.params["MessageSid"] == sid and c.signature_ok for c in callbacks)


async def test_out_of_order_callbacks(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """out_of_order_callbacks delivers the final callback before the sent one."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="out_of_order_callbacks")
    await send(client, to, StatusCallback=url)
    callbacks = await wait_for_callbacks(receiver, path, 2)
    assert [c.params["MessageStatus"] for c in callbacks] == ["delivered", "sent"]
    assert all(c.signature_ok for c in callbacks)


async def test_no_callback(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """no_callback: the message is delivered, but only polling can tell; no callback is sent."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="no_callback")
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    await wait_for_status(client, sid, "delivered")
    await asyncio.sleep(0.2)
    assert receiver.received(path) == []
    assert (await oracle(client, to))[0]["callbacks"] == []


async def test_silent(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """silent: the message stops at sent for good and no callback is ever sent."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="silent")
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    await wait_for_status(client, sid, "sent")
    await asyncio.sleep(10 * STEP_MS / 1000)
    assert (await fetch(client, sid))["status"] == "sent"
    assert receiver.received(path) == []
    history = (await oracle(client, to))[0]["history"]
    assert [change["status"] for change in history] == ["queued", "sending", "sent"]


async def test_delayed_callback(
    client: httpx.AsyncClient, receiver: CallbackReceiver, callback_url: Callable[[], tuple[str, str]]
) -> None:
    """delayed_callback holds each callback for delay_seconds before sending it."""
    url, path = callback_url()
    to = fresh_number()
    await arm(client, to, fault="delayed_callback", delay_seconds=0.6)
    started = time.monotonic()
    sid = (await send(client, to, StatusCallback=url)).json()["sid"]
    await wait_for_status(client, sid, "delivered")
    assert receiver.received(path) == []
    callbacks = await wait_for_callbacks(receiver, path, 2)
    assert all(c.at - started >= 0.6 for c in callbacks)
    assert sorted(c.params["MessageStatus"] for c in callbacks) == ["delivered", "sent"]


async def test_fault_count_is_consumed_per_request(client: httpx.AsyncClient) -> None:
    """A fault with count n applies to the next n creates to that number only, then the number is normal."""
    to, other = fresh_number(), fresh_number()
    await arm(client, to, fault="reject", code=21614, count=2)
    listed = {f["to"]: f for f in (await client.get("/_emulator/faults")).json()["faults"]}
    assert listed[to]["remaining"] == 2 and listed[to]["code"] == 21614
    assert (await send(client, other)).status_code == 201
    twilio_error(await send(client, to), 400, 21614)
    listed = {f["to"]: f for f in (await client.get("/_emulator/faults")).json()["faults"]}
    assert (listed[to]["remaining"], listed[to]["used"]) == (1, 1)
    twilio_error(await send(client, to), 400, 21614)
    assert to not in {f["to"] for f in (await client.get("/_emulator/faults")).json()["faults"]}
    assert (await send(client, to)).status_code == 201


# --- rate limit, admin API, CLI ---------------------------------------------------------------


async def test_rate_limit_per_sender(limited_emulator_server: ServerThread) -> None:
    """Over the per-sender limit a create answers 429 code 20429 with Retry-After and accepts nothing."""
    async with _client(limited_emulator_server.base_url) as http:
        numbers = [fresh_number() for _ in range(4)]
        answers = [await send(http, to, From="+15017120001") for to in numbers[:3]]
        assert [a.status_code for a in answers] == [201, 201, 429]
        twilio_error(answers[2], 429, 20429)
        assert int(answers[2].headers["Retry-After"]) >= 1
        assert await oracle(http, numbers[2]) == []
        assert (await send(http, numbers[3], From="+15017120002")).status_code == 201
        stats = (await http.get("/_emulator/stats")).json()
        assert stats["rate_limited"] >= 1 and stats["rejected_by_code"]["20429"] >= 1


async def test_admin_faults_validation_and_removal(client: httpx.AsyncClient) -> None:
    """The admin API refuses unknown faults and parameters, and removes faults one by one or all at once."""
    to = fresh_number()
    assert (await client.put(f"/_emulator/faults/{to}", json={"fault": "explode"})).status_code == 422
    assert (await client.put(f"/_emulator/faults/{to}", json={"fault": "silent", "colour": "red"})).status_code == 422
    assert (await client.put(f"/_emulator/faults/{to}", json={"fault": "reject", "count": 0})).status_code == 422
    assert (await client.put(f"/_emulator/faults/{to}", content=b"not json")).status_code == 400
    await arm(client, to, fault="silent")
    assert (await client.delete(f"/_emulator/faults/{to}")).status_code == 204
    assert (await client.delete(f"/_emulator/faults/{to}")).status_code == 404
    await arm(client, to, fault="silent")
    assert (await client.delete("/_emulator/faults")).status_code == 204
    assert (await client.get("/_emulator/faults")).json() == {"faults": []}


async def test_stats_and_reset(emulator_server: ServerThread) -> None:
    """Stats count accepted, rejected-by-code, hangs and callbacks; reset clears messages, faults and counters."""
    async with _client(emulator_server.base_url) as http:
        assert (await http.post("/_emulator/reset")).status_code == 200
        to, rejected = fresh_number(), fresh_number()
        await arm(http, rejected, fault="reject", code=21610)
        await send(http, to)
        await send(http, rejected)
        await send(http, fresh_number(), Body=None)
        stats = (await http.get("/_emulator/stats")).json()
        assert stats["accepted"] == 1
        assert stats["rejected_by_code"] == {"21602": 1, "21610": 1}
        assert stats["rejected"] == 2
        assert stats["stored_messages"] == 1
        assert (await http.post("/_emulator/reset")).json() == {"reset": True}
        stats = (await http.get("/_emulator/stats")).json()
        counters = (stats["accepted"], stats["rejected"], stats["stored_messages"], stats["running_lifecycles"])
        assert counters == (0, 0, 0, 0)
        assert (await http.get("/_emulator/messages")).json() == {"messages": []}
        assert (await http.get("/_emulator/faults")).json() == {"faults": []}


async def test_admin_api_refuses_non_loopback_clients() -> None:
    """The admin API answers 403 to a client that is not on the loopback interface."""
    app = create_app(_emulator_config())
    transport = httpx.ASGITransport(app=app, client=("192.0.2.10", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://emulator", timeout=5) as http:
        assert (await http.get("/_emulator/messages")).status_code == 403
        assert (await http.put("/_emulator/faults/+15550001111", json={"fault": "silent"})).status_code == 403
        assert (await http.post("/_emulator/reset")).status_code == 403


async def test_command_line_runs_the_emulator_with_a_faults_file(tmp_path: Path) -> None:
    """`python -m emulator` serves the API on 127.0.0.1 and arms the faults from --faults-file."""
    armed = fresh_number()
    faults_file = tmp_path / "faults.json"
    faults_file.write_text(json.dumps([{"to": armed, "fault": "reject", "code": 21610, "count": None}]))
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    command = [
        sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", str(port),
        "--account-sid", ACCOUNT_SID, "--auth-token", AUTH_TOKEN, "--step-ms", "10",
        "--faults-file", str(faults_file), "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async with _client(f"http://127.0.0.1:{port}", timeout=2) as http:

            async def ready() -> bool:
                if process.poll() is not None:
                    raise AssertionError(f"emulator exited: {process.stdout.read().decode() if process.stdout else ''}")
                try:
                    return (await http.get("/_emulator/stats")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_for(ready, "the emulator process to listen", timeout=15)
            faults = (await http.get("/_emulator/faults")).json()["faults"]
            assert [(f["to"], f["fault"], f["code"]) for f in faults] == [(armed, "reject", 21610)]
            twilio_error(await send(http, armed), 400, 21610)
            sid = (await send(http, fresh_number())).json()["sid"]
            await wait_for_status(http, sid, "delivered")
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 10)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait, 5)
        if process.stdout:
            process.stdout.close()
