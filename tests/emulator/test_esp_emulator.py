"""The ESP emulator (SendGrid stand-in), tested as real SMTP and HTTP servers on 127.0.0.1.

The emulator runs in its own thread with its own event loop, on ports the OS
picked; tests speak SMTP to it with aiosmtplib over TCP and read its admin API
and its Email Activity API over HTTP. A webhook receiver (a real uvicorn server in another thread) checks
every event POST with ``is_valid_signature`` under the key the emulator
publishes. Tests use fresh random addresses so they never see each other's mail.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any, TypeVar

import aiosmtplib
import httpx
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from emulator.esp.__main__ import build_config, parse_args
from emulator.esp.activity_query import QuerySyntaxError, parse_query
from emulator.esp.admin import create_admin_app
from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer
from herald.providers.sendgrid_signature import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    is_valid_signature,
    load_public_key,
    new_private_key,
    public_key_text,
)
from tests import reads

USERNAME = "apikey"
PASSWORD = "SG.esp-emulator-test-key"
SENDER = "receipts@herald.test"
STEP_MS = 20
WEBHOOK_ATTEMPTS = 4
MAX_MESSAGE_BYTES = 64 * 1024
SMTP_TIMEOUT = 5.0
REPO_ROOT = Path(__file__).resolve().parents[2]
# The fields SendGrid sets on every delivery event; the rest are per event or the message's unique_args.
COMMON_EVENT_KEYS = {"email", "timestamp", "event", "sg_event_id", "sg_message_id", "smtp-id"}
ACTIVITY_KEY = "SG.activity-id.activity-secret"
# Short enough to keep the Activity tests fast, long enough that "not yet visible" is a real state.
ACTIVITY_LAG_MS = 50
# The fields SendGrid's OpenAPI description declares for the list's "Abbv. Message" and the detail's "Message".
SUMMARY_KEYS = {
    "from_email", "msg_id", "subject", "to_email", "status", "opens_count", "clicks_count", "last_event_time",
}  # fmt: skip
DETAIL_KEYS = {
    "from_email", "msg_id", "subject", "to_email", "status", "template_id", "asm_group_id", "teammate", "api_key_id",
    "events", "originating_ip", "categories", "unique_args", "outbound_ip", "outbound_ip_type",
}  # fmt: skip
EVENT_KEYS = {"event_name", "processed", "reason", "attempt_num", "url", "bounce_type", "http_user_agent", "mx_server"}
ISO_SECONDS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")

T = TypeVar("T")


# --- real servers in threads -------------------------------------------------------------------


class ReceiverThread:
    """A real uvicorn server on 127.0.0.1, on a port the OS chose, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, name="webhook-receiver", daemon=True
        )

    def start(self) -> ReceiverThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the webhook receiver did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


class EspThread:
    """An ``EspServer`` running in a daemon thread with its own event loop."""

    def __init__(self, config: EspConfig) -> None:
        self.server = EspServer(config)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="esp-emulator", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as error:
            self._error = error
            raise
        finally:
            self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.stop()

    def start(self) -> EspThread:
        self._thread.start()
        if not self._ready.wait(timeout=10) or self._error is not None:
            raise RuntimeError(f"the ESP emulator did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)

    @property
    def smtp_port(self) -> int:
        return self.server.smtp_port

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.server.admin_port}"


@dataclass(frozen=True)
class Post:
    """One webhook POST as the receiver saw it."""

    name: str
    body: bytes
    events: list[dict[str, Any]]
    signature: str
    signature_ok: bool
    timestamp: str
    content_type: str
    at: float  # time.monotonic() when it arrived
    answered: int


class WebhookReceiver:
    """An event webhook endpoint that verifies every POST's signature and remembers it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, ec.EllipticCurvePublicKey] = {}
        self._posts: list[Post] = []
        self._failures: dict[tuple[str, str | None], int] = {}

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/wh/{name}", self._handle, methods=["POST"])])

    def register(self, name: str, public_key: str) -> None:
        """Verify POSTs to ``/wh/{name}`` with ``public_key`` (base64 DER, as the emulator publishes it)."""
        with self._lock:
            self._keys[name] = load_public_key(public_key)

    def fail_next(self, email: str, times: int, event: str | None = None) -> None:
        """Answer the next ``times`` POSTs carrying an event for ``email`` (of kind ``event``, or any) with 500."""
        with self._lock:
            self._failures[(email, event)] = times

    def posts_for(self, email: str) -> list[Post]:
        with self._lock:
            return [post for post in self._posts if any(event.get("email") == email for event in post.events)]

    async def _handle(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        timestamp = request.headers.get(TIMESTAMP_HEADER, "")
        signature = request.headers.get(SIGNATURE_HEADER, "")
        with self._lock:
            key = self._keys.get(name)
        signature_ok = key is not None and is_valid_signature(key, body, signature, timestamp)
        events = json.loads(body)
        with self._lock:
            status = 200
            for key in {(e["email"], None) for e in events} | {(e["email"], e["event"]) for e in events}:
                if self._failures.get(key, 0) > 0:
                    self._failures[key] -= 1
                    status = 500
            self._posts.append(
                Post(
                    name=name,
                    body=body,
                    events=events,
                    signature=signature,
                    signature_ok=signature_ok,
                    timestamp=timestamp,
                    content_type=request.headers.get("content-type", ""),
                    at=time.monotonic(),
                    answered=status,
                )
            )
        return Response(status_code=status)


def _esp_config(webhook_url: str, **overrides: Any) -> EspConfig:
    settings: dict[str, Any] = {
        "smtp_port": 0,
        "admin_port": 0,
        "webhook_url": webhook_url,
        "username": USERNAME,
        "password": PASSWORD,
        "step_ms": STEP_MS,
        "webhook_max_attempts": WEBHOOK_ATTEMPTS,
        "webhook_first_retry_seconds": 0.05,
        "webhook_timeout_seconds": 2.0,
        "max_message_bytes": MAX_MESSAGE_BYTES,
    }
    settings.update(overrides)
    return EspConfig(**settings)


@pytest.fixture(scope="module")
def receiver_server() -> Iterator[tuple[WebhookReceiver, ReceiverThread]]:
    receiver = WebhookReceiver()
    server = ReceiverThread(receiver.app()).start()
    yield receiver, server
    server.stop()


@pytest.fixture(scope="module")
def receiver(receiver_server: tuple[WebhookReceiver, ReceiverThread]) -> WebhookReceiver:
    return receiver_server[0]


@pytest.fixture(scope="module")
def esp(receiver_server: tuple[WebhookReceiver, ReceiverThread]) -> Iterator[EspThread]:
    receiver, server = receiver_server
    thread = EspThread(_esp_config(f"{server.base_url}/wh/main")).start()
    receiver.register("main", thread.server.public_key)
    yield thread
    thread.stop()


@pytest.fixture
async def admin(esp: EspThread) -> Any:
    async with httpx.AsyncClient(base_url=esp.admin_url, timeout=5.0, trust_env=False) as http:
        yield http


@pytest.fixture(scope="module")
def activity_esp(receiver_server: tuple[WebhookReceiver, ReceiverThread]) -> Iterator[EspThread]:
    """An emulator with the Activity API purchased, a short lag and no rate limit (tests that need one set it)."""
    receiver, server = receiver_server
    config = _esp_config(
        f"{server.base_url}/wh/activity",
        activity_api_key=ACTIVITY_KEY,
        activity_lag_ms=ACTIVITY_LAG_MS,
        activity_requests_per_minute=None,
    )
    thread = EspThread(config).start()
    receiver.register("activity", thread.server.public_key)
    yield thread
    thread.stop()


@pytest.fixture
async def activity(activity_esp: EspThread) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``activity_esp``'s admin port that sends the Activity API key with every request."""
    headers = {"Authorization": f"Bearer {ACTIVITY_KEY}"}
    async with httpx.AsyncClient(
        base_url=activity_esp.admin_url, timeout=5.0, trust_env=False, headers=headers
    ) as http:
        yield http


# --- helpers ----------------------------------------------------------------------------------


def fresh_address(tag: str = "rcpt") -> str:
    return f"{tag}-{secrets.token_hex(6)}@example.test"


def make_message(
    to: str, subject: str = "Your receipt", unique_args: dict[str, str] | None = None, message_id: str | None = None
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = message_id or make_msgid(domain="herald.test")
    if unique_args is not None:
        message["X-SMTPAPI"] = json.dumps({"unique_args": unique_args})
    message.set_content("Your order #157 is confirmed.")
    return message


async def send(
    esp: EspThread,
    message: EmailMessage | bytes,
    recipients: list[str] | None = None,
    password: str | None = PASSWORD,
    timeout: float = SMTP_TIMEOUT,
) -> tuple[dict[str, Any], str]:
    """Send one message over a fresh SMTP connection, authenticated unless ``password`` is None."""
    credentials = {"username": USERNAME, "password": password} if password is not None else {}
    async with asyncio.timeout(timeout + 5):
        return await aiosmtplib.send(
            message,
            sender=SENDER if isinstance(message, bytes) else None,
            recipients=recipients,
            hostname="127.0.0.1",
            port=esp.smtp_port,
            start_tls=False,
            timeout=timeout,
            **credentials,
        )


async def wait_for(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 5.0) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout`` seconds."""
    return await reads.eventually(probe, what, timeout, every=0.02)  # type: ignore[arg-type]


async def wait_for_events(receiver: WebhookReceiver, email: str, count: int, timeout: float = 5.0) -> list[Post]:
    """The successful POSTs for ``email`` once there are ``count`` of them."""

    async def probe() -> list[Post] | None:
        posts = [post for post in receiver.posts_for(email) if post.answered == 200]
        return posts if len(posts) >= count else None

    return await wait_for(probe, f"{count} event posts for {email}", timeout)


def kinds(posts: list[Post]) -> list[str]:
    return [event["event"] for post in posts for event in post.events]


async def oracle(admin: httpx.AsyncClient, to: str) -> list[dict[str, Any]]:
    response = await admin.get("/_esp/messages", params={"to": to})
    assert response.status_code == 200, response.text
    return response.json()["messages"]


async def settled_oracle(admin: httpx.AsyncClient, to: str, events: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The oracle for ``to`` once its recipient has ``events`` events, each delivered to the webhook.

    The receiver sees a POST before the emulator sees the answer, so the oracle lags the receiver a little."""

    async def probe() -> list[dict[str, Any]] | None:
        records = await oracle(admin, to)
        recorded = [
            event for record in records for r in record["recipients"] if r["email"] == to for event in r["events"]
        ]
        return records if len(recorded) >= events and all(event["delivered"] for event in recorded) else None

    return await wait_for(probe, f"{events} delivered events for {to} in the oracle", timeout)


async def arm(admin: httpx.AsyncClient, to: str, **fault: Any) -> None:
    response = await admin.put(f"/_esp/faults/{to}", json=fault)
    assert response.status_code == 200, response.text


async def stats(admin: httpx.AsyncClient) -> dict[str, Any]:
    response = await admin.get("/_esp/stats")
    assert response.status_code == 200, response.text
    return response.json()


# --- acceptance and the signed event webhook --------------------------------------------------


async def test_accepted_message_posts_signed_processed_then_delivered(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """An accepted message answers 250 with its X-Message-Id and posts signed processed then delivered events
    that carry the recipient, the sg_message_id, the Message-ID as smtp-id and the unique_args at top level."""
    to = fresh_address()
    message = make_message(to, unique_args={"intent_key": "order-157", "attempt": "2", "tenant": "acme"})
    errors, reply = await send(esp, message)
    assert errors == {}
    match = re.fullmatch(r"Ok: queued as ([A-Za-z0-9_-]{22})", reply)
    assert match, reply
    x_message_id = match.group(1)

    posts = await wait_for_events(receiver, to, 2)
    assert kinds(posts) == ["processed", "delivered"]
    [record] = await settled_oracle(admin, to, 2)
    [recipient] = record["recipients"]
    sg_message_id = recipient["sg_message_id"]
    assert sg_message_id.startswith(x_message_id + ".")
    for post in posts:
        assert post.signature_ok
        assert post.content_type == "application/json"
        assert post.timestamp.isdigit() and abs(int(post.timestamp) - time.time()) < 60
        # Compact UTF-8 JSON then CRLF: the signature covers these exact bytes.
        assert post.body.endswith(b"\r\n") and not post.body.endswith(b"\r\n\r\n")
        assert post.body == json.dumps(post.events, separators=(",", ":")).encode() + b"\r\n"
    processed, delivered = (post.events[0] for post in posts)
    for event in (processed, delivered):
        assert event["email"] == to
        assert event["sg_message_id"] == sg_message_id
        assert event["smtp-id"] == message["Message-ID"]
        assert isinstance(event["timestamp"], int) and abs(event["timestamp"] - time.time()) < 60
        # unique_args ride along at top level, except the reserved name `attempt`, which SendGrid keeps for itself.
        assert (event["intent_key"], event["tenant"]) == ("order-157", "acme")
        assert "attempt" not in event
    assert set(processed) == COMMON_EVENT_KEYS | {"intent_key", "tenant"}
    assert set(delivered) == COMMON_EVENT_KEYS | {"intent_key", "tenant", "response"}
    assert delivered["response"] == "250 OK"
    assert processed["sg_event_id"] != delivered["sg_event_id"]
    assert processed["timestamp"] <= delivered["timestamp"]
    assert record["message_id"] == message["Message-ID"]
    assert record["unique_args"] == {"intent_key": "order-157", "tenant": "acme"}
    assert [e["event"]["event"] for e in recipient["events"]] == ["processed", "delivered"]
    assert all(e["delivered"] and e["attempts"][0]["http_status"] == 200 for e in recipient["events"])


async def test_event_signature_fails_under_another_key_or_altered_body(
    esp: EspThread, receiver: WebhookReceiver
) -> None:
    """A posted event verifies only under the emulator's published key, over the exact body and timestamp."""
    to = fresh_address()
    await send(esp, make_message(to))
    post = (await wait_for_events(receiver, to, 1))[0]
    published = load_public_key(esp.server.public_key)
    assert is_valid_signature(published, post.body, post.signature, post.timestamp)
    altered = post.body.replace(b'"processed"', b'"delivered"')
    assert altered != post.body
    assert not is_valid_signature(published, altered, post.signature, post.timestamp)
    assert not is_valid_signature(published, post.body, post.signature, str(int(post.timestamp) + 1))
    other_key = load_public_key(public_key_text(new_private_key()))
    assert not is_valid_signature(other_key, post.body, post.signature, post.timestamp)


async def test_oracle_records_headers_attachments_and_their_hashes(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """The oracle keeps every header, the text body, and each attachment's name, type, size and SHA-256,
    plus the SHA-256 of the raw message exactly as received."""
    to = fresh_address()
    message = make_message(to, subject="Invoice ✓ 157")
    message["X-Herald-Intent"] = "order-157"
    pdf = secrets.token_bytes(5000)
    csv = "id,total\r\n157,12.50\r\n".encode()
    message.add_attachment(pdf, maintype="application", subtype="pdf", filename="invoice-157.pdf")
    message.add_attachment(csv, maintype="text", subtype="csv", filename="lines.csv")
    raw = message.as_bytes(policy=message.policy.clone(linesep="\r\n"))
    await send(esp, raw, recipients=[to])

    [record] = await oracle(admin, to)
    assert record["sha256"] == hashlib.sha256(raw).hexdigest()
    assert record["size"] == len(raw)
    assert record["subject"] == "Invoice ✓ 157"
    assert record["mail_from"] == SENDER and record["rcpt_to"] == [to]
    headers = {name: value for name, value in record["headers"]}
    assert headers["X-Herald-Intent"] == "order-157"
    assert headers["Message-ID"] == message["Message-ID"]
    assert {"From", "To", "Subject", "MIME-Version", "Content-Type"} <= set(headers)
    assert record["text_body"].strip() == "Your order #157 is confirmed."
    assert record["attachments"] == [
        {
            "filename": "invoice-157.pdf",
            "content_type": "application/pdf",
            "size": len(pdf),
            "sha256": hashlib.sha256(pdf).hexdigest(),
        },
        {
            "filename": "lines.csv",
            "content_type": "text/csv",
            "size": len(csv),
            "sha256": hashlib.sha256(csv).hexdigest(),
        },
    ]
    # The bytes themselves are never kept: the attachment's base64 text appears nowhere in the oracle.
    assert base64.b64encode(pdf[:48]).decode() in raw.decode()
    assert base64.b64encode(pdf[:48]).decode() not in json.dumps(record)


async def test_message_without_message_id_gets_one_used_as_smtp_id(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """A message sent without Message-ID gets one from the ESP, and its events carry it as smtp-id."""
    to = fresh_address()
    message = make_message(to)
    del message["Message-ID"]
    await send(esp, message)
    posts = await wait_for_events(receiver, to, 1)
    [record] = await oracle(admin, to)
    assert record["message_id_generated"] is True
    assert re.fullmatch(r"<[^<>@\s]+@[^<>@\s]+>", record["message_id"])
    assert posts[0].events[0]["smtp-id"] == record["message_id"]


async def test_each_recipient_gets_its_own_sg_message_id_and_events(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """One message to two recipients is one record with one sg_message_id and one event stream per recipient."""
    first, second = fresh_address("a"), fresh_address("b")
    message = make_message(first)
    _, reply = await send(esp, message, recipients=[first, second])
    x_message_id = reply.rsplit(" ", 1)[-1]
    first_posts = await wait_for_events(receiver, first, 2)
    second_posts = await wait_for_events(receiver, second, 2)
    [record] = await oracle(admin, first)
    assert [r["x_message_id"] for r in await oracle(admin, second)] == [record["x_message_id"]]
    ids = [recipient["sg_message_id"] for recipient in record["recipients"]]
    assert len(set(ids)) == 2 and all(i.startswith(x_message_id + ".") for i in ids)
    assert {e["sg_message_id"] for p in first_posts for e in p.events} == {ids[0]}
    assert {e["sg_message_id"] for p in second_posts for e in p.events} == {ids[1]}


# --- SMTP AUTH and limits ---------------------------------------------------------------------


async def test_mail_without_auth_is_refused_with_530(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """With credentials configured, MAIL before AUTH answers 530 and nothing is stored."""
    to = fresh_address()
    before = await stats(admin)
    with pytest.raises(aiosmtplib.SMTPSenderRefused) as refused:
        await send(esp, make_message(to), password=None)
    assert refused.value.code == 530
    assert await oracle(admin, to) == []
    after = await stats(admin)
    assert after["refused_by_code"].get("530", 0) == before["refused_by_code"].get("530", 0) + 1


async def test_wrong_password_is_refused_with_535(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """Wrong AUTH credentials answer 535, are counted, and nothing is stored."""
    to = fresh_address()
    before = (await stats(admin))["auth_failures"]
    with pytest.raises(aiosmtplib.SMTPAuthenticationError) as refused:
        await send(esp, make_message(to), password="SG.wrong")
    assert refused.value.code == 535
    assert await oracle(admin, to) == []
    assert (await stats(admin))["auth_failures"] > before


async def test_message_over_the_size_limit_is_refused_with_552(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """A message over max_message_bytes is refused with 552, whether declared with SIZE at MAIL or not."""
    to = fresh_address()
    message = make_message(to)
    message.add_attachment(secrets.token_bytes(MAX_MESSAGE_BYTES), maintype="application", subtype="octet-stream")
    with pytest.raises(aiosmtplib.SMTPSenderRefused) as declared:
        await send(esp, message)
    assert declared.value.code == 552
    # Without SIZE the server learns the size only while reading DATA, and refuses at its end.
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=esp.smtp_port, start_tls=False, timeout=SMTP_TIMEOUT)
    async with asyncio.timeout(10):
        await client.connect(username=USERNAME, password=PASSWORD)
        try:
            await client.mail(SENDER)
            await client.rcpt(to)
            with pytest.raises(aiosmtplib.SMTPDataError) as undeclared:
                await client.data(message.as_bytes())
            assert undeclared.value.code == 552
        finally:
            await client.quit()
    assert await oracle(admin, to) == []


# --- answer faults ----------------------------------------------------------------------------


async def test_temp_fail_at_rcpt_refuses_451_then_the_count_runs_out(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """temp_fail 451 at RCPT refuses that recipient and accepts nothing, once per use of its count."""
    to = fresh_address()
    await arm(admin, to, fault="temp_fail", code=451, stage="rcpt", count=1)
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as refused:
        await send(esp, make_message(to))
    assert [r.code for r in refused.value.recipients] == [451]
    assert await oracle(admin, to) == []
    assert (await admin.get("/_esp/faults")).json() == {"faults": []}
    await send(esp, make_message(to))
    assert len(await oracle(admin, to)) == 1
    assert kinds(await wait_for_events(receiver, to, 2)) == ["processed", "delivered"]


async def test_temp_fail_421_closes_the_connection(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """temp_fail 421 answers 421 at RCPT and then the server closes the connection, as RFC 5321 says."""
    to = fresh_address()
    await arm(admin, to, fault="temp_fail", code=421, stage="rcpt", count=1)
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", esp.smtp_port), 5)
    try:
        lines = await _dialogue(
            reader,
            writer,
            [b"EHLO client.test", _auth_plain(), f"MAIL FROM:<{SENDER}>".encode(), f"RCPT TO:<{to}>".encode()],
        )
        assert lines[-1].startswith(b"421 ")
        # The server hangs up: the next read sees end of stream.
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()
    assert await oracle(admin, to) == []


async def test_temp_fail_at_end_of_data_refuses_the_message(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """temp_fail 451 at DATA lets the transaction run to the final dot and then refuses; nothing is stored."""
    to = fresh_address()
    await arm(admin, to, fault="temp_fail", code=451, stage="data", count=1)
    with pytest.raises(aiosmtplib.SMTPDataError) as refused:
        await send(esp, make_message(to))
    assert refused.value.code == 451
    assert await oracle(admin, to) == []


async def test_perm_fail_refuses_550_at_rcpt_and_554_at_data(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """perm_fail answers 550 at RCPT or 554 at the end of DATA, and nothing is stored either way."""
    at_rcpt, at_data = fresh_address(), fresh_address()
    await arm(admin, at_rcpt, fault="perm_fail", stage="rcpt")
    await arm(admin, at_data, fault="perm_fail", stage="data")
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as rcpt_refused:
        await send(esp, make_message(at_rcpt))
    assert [r.code for r in rcpt_refused.value.recipients] == [550]
    with pytest.raises(aiosmtplib.SMTPDataError) as data_refused:
        await send(esp, make_message(at_data))
    assert data_refused.value.code == 554
    assert await oracle(admin, at_rcpt) == [] and await oracle(admin, at_data) == []
    # count=None: the fault stays armed.
    assert {f["to"] for f in (await admin.get("/_esp/faults")).json()["faults"]} >= {at_rcpt, at_data}


async def test_refused_recipient_does_not_stop_the_others(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """A recipient refused at RCPT is left out while the message is accepted for the other recipients."""
    refused, accepted = fresh_address("refused"), fresh_address("ok")
    await arm(admin, refused, fault="perm_fail", stage="rcpt", count=1)
    errors, _ = await send(esp, make_message(accepted), recipients=[refused, accepted])
    assert errors[refused].code == 550
    [record] = await oracle(admin, accepted)
    assert record["rcpt_to"] == [accepted]
    await wait_for_events(receiver, accepted, 2)
    assert receiver.posts_for(refused) == []


# --- connection faults ------------------------------------------------------------------------


async def test_drop_after_data_accepts_silently_so_a_resend_duplicates(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """drop_after_data closes the connection after the final dot without a reply, yet the message is stored
    and its events arrive; the client's resend is a second accepted copy of the same Message-ID."""
    to = fresh_address()
    await arm(admin, to, fault="drop_after_data", count=1)
    message = make_message(to)
    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await send(esp, message)
    [record] = await oracle(admin, to)
    assert record["fault"] == "drop_after_data"
    posts = await wait_for_events(receiver, to, 2)
    assert kinds(posts) == ["processed", "delivered"]
    await send(esp, message)
    records = await oracle(admin, to)
    assert len(records) == 2 and records[0]["message_id"] == records[1]["message_id"] == message["Message-ID"]
    assert (await stats(admin))["accepted_by_message_id"][message["Message-ID"]] == 2


async def test_drop_during_data_hangs_up_without_taking_the_message(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """drop_during_data closes the connection after the final dot with no reply and nothing stored: the client
    sees a disconnect during DATA, the relay has no record and posts no event, the drop counts as a refusal,
    and the client's resend is the only copy."""
    to = fresh_address()
    message = make_message(to)
    before = await stats(admin)
    await arm(admin, to, fault="drop_during_data", count=1)
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=esp.smtp_port, start_tls=False, timeout=SMTP_TIMEOUT)
    async with asyncio.timeout(10):
        await client.connect(username=USERNAME, password=PASSWORD)
        await client.mail(SENDER)
        await client.rcpt(to)
        with pytest.raises(aiosmtplib.SMTPServerDisconnected):
            await client.data(message.as_bytes())
    client.close()
    assert await oracle(admin, to) == []
    after = await stats(admin)
    assert after["dropped_during_data"] == before["dropped_during_data"] + 1
    assert after["refused"] == before["refused"] + 1
    assert (after["accepted"], after["dropped_connections"]) == (before["accepted"], before["dropped_connections"])
    assert message["Message-ID"] not in after["accepted_by_message_id"]

    await send(esp, message)
    posts = await wait_for_events(receiver, to, 2)
    [record] = await oracle(admin, to)
    assert record["fault"] is None
    assert {event["sg_message_id"] for post in posts for event in post.events} == {
        record["recipients"][0]["sg_message_id"]
    }
    assert (await stats(admin))["accepted_by_message_id"][message["Message-ID"]] == 1


async def test_slow_reply_holds_the_250_but_the_message_is_already_accepted(
    esp: EspThread, admin: httpx.AsyncClient
) -> None:
    """slow_reply holds the final 250 for its seconds; a client that stops waiting still has its message stored."""
    to = fresh_address()
    await arm(admin, to, fault="slow_reply", seconds=0.5, count=2)
    started = time.monotonic()
    _, reply = await send(esp, make_message(to))
    assert time.monotonic() - started >= 0.5
    assert reply.startswith("Ok: queued as ")
    with pytest.raises(aiosmtplib.SMTPTimeoutError):
        await send(esp, make_message(to), timeout=0.2)
    records = await oracle(admin, to)
    assert len(records) == 2 and all(r["fault"] == "slow_reply" for r in records)


# --- event faults -----------------------------------------------------------------------------


async def test_no_events_fault_posts_nothing(
    esp: EspThread, admin: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """no_events accepts the message and never posts an event for it."""
    silent, control = fresh_address("silent"), fresh_address("control")
    await arm(admin, silent, fault="no_events", count=1)
    await send(esp, make_message(silent))
    await send(esp, make_message(control))
    # The control message's events come on the same clock, one message later: once they are in, silence is proven.
    await wait_for_events(receiver, control, 2)
    assert receiver.posts_for(silent) == []
    [record] = await oracle(admin, silent)
    assert record["recipients"][0]["events"] == [] and record["recipients"][0]["fault"] == "no_events"


async def test_duplicate_events_posts_each_event_copies_times_with_one_id(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """duplicate_events posts every event `copies` times, each copy with the same body and sg_event_id."""
    to = fresh_address()
    await arm(admin, to, fault="duplicate_events", copies=3, count=1)
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 6)
    assert sorted(kinds(posts)) == ["delivered"] * 3 + ["processed"] * 3
    by_kind: dict[str, set[bytes]] = {}
    for post in posts:
        assert post.signature_ok
        by_kind.setdefault(post.events[0]["event"], set()).add(json.dumps(post.events).encode())
    assert {kind: len(bodies) for kind, bodies in by_kind.items()} == {"processed": 1, "delivered": 1}


async def test_out_of_order_events_posts_delivered_before_processed(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """out_of_order_events posts delivered first and processed after it, though the timestamps keep their order."""
    to = fresh_address()
    await arm(admin, to, fault="out_of_order_events", count=1)
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 2)
    assert kinds(posts) == ["delivered", "processed"]
    delivered, processed = posts[0].events[0], posts[1].events[0]
    assert processed["timestamp"] <= delivered["timestamp"]
    [record] = await oracle(admin, to)
    seq = {e["event"]["event"]: e["posted_seq"] for e in record["recipients"][0]["events"]}
    assert seq["delivered"] < seq["processed"]


@pytest.mark.parametrize("bounce_type", ["bounce", "blocked"])
async def test_bounce_fault_posts_processed_then_bounce(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient, bounce_type: str
) -> None:
    """bounce posts processed then a bounce event with its type, status and reason, and never delivered."""
    to = fresh_address()
    reason = "550 5.1.1 <user@example.test>: Recipient address rejected"
    await arm(admin, to, fault="bounce", type=bounce_type, status="5.1.1", reason=reason, count=1)
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 2)
    assert kinds(posts) == ["processed", "bounce"]
    bounce = posts[1].events[0]
    assert (bounce["type"], bounce["status"], bounce["reason"]) == (bounce_type, "5.1.1", reason)
    assert set(bounce) == COMMON_EVENT_KEYS | {"type", "status", "reason"}


async def test_deferred_then_delivered_counts_attempts(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """deferred_then_delivered posts processed, one deferred per deferral with attempt "1", "2", then delivered."""
    to = fresh_address()
    await arm(admin, to, fault="deferred_then_delivered", deferrals=2, response="421 4.7.0 Try again later", count=1)
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 4)
    assert kinds(posts) == ["processed", "deferred", "deferred", "delivered"]
    deferrals = [post.events[0] for post in posts[1:3]]
    assert [(d["attempt"], d["response"]) for d in deferrals] == [
        ("1", "421 4.7.0 Try again later"),
        ("2", "421 4.7.0 Try again later"),
    ]
    assert set(deferrals[0]) == COMMON_EVENT_KEYS | {"response", "attempt"}


async def test_dropped_fault_posts_only_dropped(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """dropped posts a single dropped event with its reason instead of processed, as for a suppressed address."""
    to, control = fresh_address(), fresh_address("control")
    await arm(admin, to, fault="dropped", reason="Unsubscribed Address", count=1)
    await send(esp, make_message(to))
    await send(esp, make_message(control))
    await wait_for_events(receiver, control, 2)
    posts = await wait_for_events(receiver, to, 1)
    assert kinds(posts) == ["dropped"]
    assert posts[0].events[0]["reason"] == "Unsubscribed Address"


async def test_spamreport_follows_delivered(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """spamreport posts processed, delivered, then spamreport for the same sg_message_id."""
    to = fresh_address()
    await arm(admin, to, fault="spamreport", count=1)
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 3)
    assert kinds(posts) == ["processed", "delivered", "spamreport"]
    assert len({post.events[0]["sg_message_id"] for post in posts}) == 1


async def test_delayed_events_hold_each_event(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """delayed_events holds every event its seconds before posting it."""
    to = fresh_address()
    await arm(admin, to, fault="delayed_events", seconds=0.6, count=1)
    sent_at = time.monotonic()
    await send(esp, make_message(to))
    posts = await wait_for_events(receiver, to, 2)
    assert kinds(posts) == ["processed", "delivered"]
    assert posts[0].at - sent_at >= 0.6


# --- webhook redelivery -----------------------------------------------------------------------


async def test_webhook_retries_a_non_2xx_with_the_same_event_ids(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """A POST answered 500 is retried with backoff and the same body (same sg_event_id), every retry validly signed."""
    to = fresh_address()
    receiver.fail_next(to, 2, event="processed")
    await send(esp, make_message(to))
    await wait_for_events(receiver, to, 2)
    posts = receiver.posts_for(to)
    processed = [post for post in posts if post.events[0]["event"] == "processed"]
    assert [post.answered for post in processed] == [500, 500, 200]
    assert len({post.body for post in processed}) == 1
    assert all(post.signature_ok for post in processed)
    # Backoff 0.05 s then 0.1 s: the retries are spaced, not fired at once.
    assert processed[2].at - processed[0].at >= 0.12
    [record] = await settled_oracle(admin, to, 2)
    attempts = record["recipients"][0]["events"][0]["attempts"]
    assert [(a["attempt"], a["http_status"]) for a in attempts] == [(1, 500), (2, 500), (3, 200)]


async def test_webhook_gives_up_after_the_attempt_bound(
    esp: EspThread, receiver: WebhookReceiver, admin: httpx.AsyncClient
) -> None:
    """An event whose POSTs keep failing is abandoned after webhook_max_attempts and counted."""
    to = fresh_address()
    before = (await stats(admin))["events"]["abandoned"]
    receiver.fail_next(to, 1000)
    await send(esp, make_message(to))

    async def abandoned() -> list[dict[str, Any]] | None:
        [record] = await oracle(admin, to)
        events = record["recipients"][0]["events"]
        done = len(events) == 2 and all(len(e["attempts"]) == WEBHOOK_ATTEMPTS for e in events)
        return events if done and (await stats(admin))["running_event_tasks"] == 0 else None

    events = await wait_for(abandoned, "both events to be abandoned")
    assert all(not e["delivered"] for e in events)
    assert len(receiver.posts_for(to)) == 2 * WEBHOOK_ATTEMPTS
    await asyncio.sleep(0.3)
    assert len(receiver.posts_for(to)) == 2 * WEBHOOK_ATTEMPTS  # nothing after the bound
    assert (await stats(admin))["events"]["abandoned"] == before + 2


# --- admin API --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"fault": "explode"},
        {"fault": "temp_fail", "code": 450},
        {"fault": "temp_fail", "stage": "mail"},
        {"fault": "perm_fail", "count": 0},
        {"fault": "slow_reply", "seconds": -1},
        {"fault": "duplicate_events", "copies": 1},
        {"fault": "bounce", "type": "soft"},
        {"fault": "dropped", "colour": "red"},
        {"count": 1},
    ],
)
async def test_admin_refuses_invalid_faults_with_422(admin: httpx.AsyncClient, body: dict[str, Any]) -> None:
    """An unknown fault, a parameter out of range or an unknown parameter is refused with 422 and arms nothing."""
    to = fresh_address()
    response = await admin.put(f"/_esp/faults/{to}", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid fault"
    assert to not in {f["to"] for f in (await admin.get("/_esp/faults")).json()["faults"]}


async def test_admin_refuses_a_non_address_and_a_non_json_body(admin: httpx.AsyncClient) -> None:
    """Arming a fault on something that is not an e-mail address answers 422; a body that is not JSON answers 400."""
    assert (await admin.put("/_esp/faults/not-an-address", json={"fault": "no_events"})).status_code == 422
    response = await admin.put(f"/_esp/faults/{fresh_address()}", content=b"{nope")
    assert response.status_code == 400


async def test_admin_lists_disarms_and_clears_faults(admin: httpx.AsyncClient) -> None:
    """Armed faults are listed with their parameters and count, and can be disarmed one by one or all."""
    first, second = fresh_address(), fresh_address()
    await arm(admin, first, fault="bounce", type="blocked", count=2)
    await arm(admin, second, fault="no_events")
    faults = {f["to"]: f for f in (await admin.get("/_esp/faults")).json()["faults"]}
    assert faults[first]["fault"] == "bounce" and faults[first]["type"] == "blocked"
    assert (faults[first]["remaining"], faults[first]["used"]) == (2, 0)
    assert faults[second]["remaining"] is None
    assert (await admin.delete(f"/_esp/faults/{first}")).status_code == 204
    assert (await admin.delete(f"/_esp/faults/{first}")).status_code == 404
    assert (await admin.delete("/_esp/faults")).status_code == 204
    assert (await admin.get("/_esp/faults")).json() == {"faults": []}


async def test_admin_publishes_the_signing_key(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """GET /_esp/public-key answers the base64 DER P-256 key that verifies the events."""
    body = (await admin.get("/_esp/public-key")).json()
    assert body == {"public_key": esp.server.public_key}
    assert isinstance(load_public_key(body["public_key"]).curve, ec.SECP256R1)


async def test_admin_api_refuses_non_loopback_clients(receiver_server: tuple[WebhookReceiver, ReceiverThread]) -> None:
    """The admin API answers 403 to a client that is not on the loopback interface, and 200 to one that is."""
    app = create_admin_app(EspServer(_esp_config(f"{receiver_server[1].base_url}/wh/unused")).state)
    foreign = httpx.ASGITransport(app=app, client=("192.0.2.10", 40000))
    async with httpx.AsyncClient(transport=foreign, base_url="http://esp", timeout=5) as http:
        assert (await http.get("/_esp/messages")).status_code == 403
        assert (await http.put("/_esp/faults/a@example.test", json={"fault": "no_events"})).status_code == 403
        assert (await http.post("/_esp/reset")).status_code == 403
        assert (await http.get("/")).status_code == 403
    local = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=local, base_url="http://esp", timeout=5) as http:
        assert (await http.get("/_esp/messages")).status_code == 200


async def test_html_page_escapes_a_hostile_subject(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """The HTML page lists the message with its subject, headers and attachment, all HTML-escaped."""
    to = fresh_address()
    hostile = '<script>alert("pwned")</script>'
    message = make_message(to, subject=hostile)
    message["X-Note"] = '"><img src=x onerror=alert(1)>'
    message.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="<b>bold</b>.pdf")
    await send(esp, message)
    response = await admin.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<script>" not in page and "<img" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt;.pdf" in page
    assert to in page and hashlib.sha256(b"%PDF-1.4").hexdigest() in page


async def test_reset_forgets_messages_faults_and_counters(
    receiver_server: tuple[WebhookReceiver, ReceiverThread],
) -> None:
    """POST /_esp/reset empties the store, the faults and the counters."""
    receiver, server = receiver_server
    thread = EspThread(_esp_config(f"{server.base_url}/wh/reset", step_ms=5_000)).start()
    try:
        async with httpx.AsyncClient(base_url=thread.admin_url, timeout=5.0, trust_env=False) as http:
            await arm(http, fresh_address(), fault="no_events")
            await send(thread, make_message(fresh_address()))
            before = await stats(http)
            assert (before["accepted"], before["stored_messages"], before["running_event_tasks"]) == (1, 1, 1)
            assert (await http.post("/_esp/reset")).json() == {"reset": True}
            after = await stats(http)
            assert (after["accepted"], after["stored_messages"], after["running_event_tasks"]) == (0, 0, 0)
            assert (await http.get("/_esp/messages")).json() == {"messages": []}
            assert (await http.get("/_esp/faults")).json() == {"faults": []}
    finally:
        thread.stop()


# --- Email Activity API -----------------------------------------------------------------------


def unique_arg_query(name: str, value: str) -> str:
    """SendGrid's documented form for a unique argument: the key in single quotes, the value in double."""
    return f"unique_args['{name}']=\"{value}\""


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def between(start: datetime, end: datetime) -> str:
    return f'last_event_time BETWEEN TIMESTAMP "{iso(start)}" AND TIMESTAMP "{iso(end)}"'


async def feed(http: httpx.AsyncClient, query: str, **params: Any) -> list[dict[str, Any]]:
    response = await http.get("/v3/messages", params={"query": query, **params})
    assert response.status_code == 200, response.text
    return response.json()["messages"]


async def feed_when(
    http: httpx.AsyncClient, query: str, ready: Callable[[list[dict[str, Any]]], bool], what: str, **params: Any
) -> list[dict[str, Any]]:
    """The list for ``query`` once ``ready`` holds for it."""

    async def probe() -> list[dict[str, Any]] | None:
        messages = await feed(http, query, **params)
        return messages if ready(messages) else None

    return await wait_for(probe, what)


async def detail_when(http: httpx.AsyncClient, msg_id: str, events: list[str], what: str) -> dict[str, Any]:
    """The detail of ``msg_id`` once its events are ``events``."""

    async def probe() -> dict[str, Any] | None:
        response = await http.get(f"/v3/messages/{msg_id}")
        if response.status_code != 200:
            return None
        body = response.json()
        return body if [e["event_name"] for e in body["events"]] == events else None

    return await wait_for(probe, what)


async def sent_msg_id(esp: EspThread, http: httpx.AsyncClient, message: EmailMessage) -> str:
    """Send ``message`` to its one recipient and return that recipient's sg_message_id (the feed's msg_id)."""
    await send(esp, message)
    [record] = await oracle(http, message["To"])
    return str(record["recipients"][0]["sg_message_id"])


async def set_activity(http: httpx.AsyncClient, lag_ms: int, requests_per_minute: int | None) -> None:
    response = await http.put("/_esp/activity", json={"lag_ms": lag_ms, "requests_per_minute": requests_per_minute})
    assert response.status_code == 200, response.text


async def test_activity_list_finds_exactly_the_message_with_a_unique_arg(
    activity_esp: EspThread, activity: httpx.AsyncClient
) -> None:
    """GET /v3/messages with unique_args['name']="value" lists only the recipient whose message carried that value,
    with the fields of SendGrid's Abbv. Message, its sg_message_id as msg_id, and delivered once its event was."""
    key = secrets.token_hex(6)
    to, other = fresh_address(), fresh_address("other")
    msg_id = await sent_msg_id(activity_esp, activity, make_message(to, "Receipt 157", {"intent_key": key}))
    await send(activity_esp, make_message(other, unique_args={"intent_key": key + "-other"}))
    query = unique_arg_query("intent_key", key)
    [message] = await feed_when(
        activity, query, lambda found: [m["status"] for m in found] == ["delivered"], "the message as delivered"
    )
    assert set(message) == SUMMARY_KEYS
    assert message == {
        "from_email": SENDER,
        "msg_id": msg_id,
        "subject": "Receipt 157",
        "to_email": to,
        "status": "delivered",
        "opens_count": 0,
        "clicks_count": 0,
        "last_event_time": message["last_event_time"],
    }
    assert ISO_SECONDS.fullmatch(message["last_event_time"])
    assert abs(datetime.fromisoformat(message["last_event_time"]).timestamp() - time.time()) < 60
    assert await feed(activity, unique_arg_query("intent_key", key + "-none")) == []


async def test_activity_query_combines_clauses_with_and_or_parentheses_and_time(
    activity_esp: EspThread, activity: httpx.AsyncClient
) -> None:
    """Clauses joined by AND (whole clauses in parentheses or not) must all hold, OR needs one, and
    last_event_time BETWEEN / > take ISO timestamps: the message is found inside its time window only."""
    key = secrets.token_hex(6)
    to = fresh_address()
    msg_id = await sent_msg_id(activity_esp, activity, make_message(to, "Combined", {"intent_key": key}))
    await feed_when(activity, f'msg_id="{msg_id}"', lambda found: len(found) == 1, "the message in the feed")
    now = datetime.now(timezone.utc)
    arg = unique_arg_query("intent_key", key)
    found = [
        f'({arg}) AND (to_email="{to.upper()}") AND {between(now - timedelta(minutes=5), now + timedelta(minutes=5))}',
        f'{arg} and subject="Combined" and msg_id="{msg_id}"',
        f'to_email="nobody@example.test" OR ({arg} AND (status="delivered" OR status="processed"))',
        f'{arg} AND last_event_time>TIMESTAMP "{iso(now - timedelta(hours=1))}"',
    ]
    for query in found:
        assert [m["msg_id"] for m in await feed(activity, query)] == [msg_id], query
    missed = [
        f"{arg} AND {between(now - timedelta(days=2), now - timedelta(days=1))}",
        f'{arg} AND subject="combined"',
        f'{arg} AND to_email="{fresh_address()}"',
    ]
    for query in missed:
        assert await feed(activity, query) == [], query


async def test_activity_list_answers_the_newest_first_and_at_most_limit(
    activity_esp: EspThread, activity: httpx.AsyncClient
) -> None:
    """The list is newest first and holds at most limit messages (default 10); there is no paging."""
    key = secrets.token_hex(6)
    ids = [
        await sent_msg_id(activity_esp, activity, make_message(fresh_address(), unique_args={"batch": key}))
        for _ in range(12)
    ]
    query = unique_arg_query("batch", key)
    every = await feed_when(
        activity, query, lambda found: len(found) == 12 and {m["status"] for m in found} == {"delivered"},
        "twelve delivered messages", limit=1000,
    )  # fmt: skip
    assert [m["msg_id"] for m in every] == list(reversed(ids))
    assert [m["msg_id"] for m in await feed(activity, query)] == list(reversed(ids))[:10]
    assert [m["msg_id"] for m in await feed(activity, query, limit=1)] == [ids[-1]]


@pytest.mark.parametrize("limit", ["0", "1001", "ten", "1.5", "-1", "", " 5", "+5"])
async def test_activity_list_refuses_a_limit_outside_1_to_1000(activity: httpx.AsyncClient, limit: str) -> None:
    """limit must be a whole number from 1 to 1000; anything else answers 400 naming the field and the rule."""
    response = await activity.get("/v3/messages", params={"query": 'to_email="a@example.test"', "limit": limit})
    assert response.status_code == 400, response.text
    assert response.json() == {"errors": [{"field": "limit", "message": "limit must be a whole number from 1 to 1000"}]}


async def test_activity_list_without_a_query_answers_400(activity: httpx.AsyncClient) -> None:
    """query is required (SendGrid's OpenAPI description): a list request without one answers 400 naming it."""
    response = await activity.get("/v3/messages", params={"limit": 5})
    assert response.status_code == 400
    assert response.json() == {"errors": [{"field": "query", "message": "query is required"}]}


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ('unique_args="order-157"', "operator = is incompatible with MAP<STRING,STRING>, STRING"),
        ('unique_args["intent_key"]="order-157"', "unique argument name in single quotes"),
        ('bad_field="x"', "'bad_field' is not a known field"),
        ('template_id="x"', "'template_id' is a SendGrid field this emulator keeps no data for"),
        ("to_email=", 'expected a "double-quoted" value'),
        ('to_email="a@example.test" AND', "expected a field name, found end of query"),
        ('(to_email="a@example.test"', "expected ')'"),
        ('to_email="a@example.test', "unterminated string"),
        ('to_email="a@example.test" subject="x"', "expected AND, OR or the end of the query"),
        ('subject>"x"', "compares subject with = only"),
        ('last_event_time>"2024-01-01T00:00:00Z"', 'last_event_time compares with TIMESTAMP "..."'),
        ('last_event_time>TIMESTAMP "yesterday"', 'TIMESTAMP "yesterday" is not an ISO 8601 time'),
        ('last_event_time BETWEEN TIMESTAMP "2024-01-01T00:00:00Z" TIMESTAMP "2024-01-02T00:00:00Z"', "expected AND"),
        ("to_email=\u201ca@example.test\u201d", "unexpected character"),
        ("   ", "the query is empty"),
        ("(" * 40 + 'to_email="a@example.test"' + ")" * 40, "parentheses nest deeper than 32 levels"),
    ],
)
async def test_activity_list_refuses_bad_syntax_with_400(activity: httpx.AsyncClient, query: str, says: str) -> None:
    """A query outside the language answers 400 "invalid syntax: ..." saying what is wrong (SendGrid's own words
    for a bare unique_args and an unknown field)."""
    response = await activity.get("/v3/messages", params={"query": query})
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["message"].startswith("invalid syntax: ") and says in error["message"], error


@dataclass(frozen=True)
class FeedRow:
    """A stand-in feed message for the query language's unit test."""

    msg_id: str = "abc.filter-1.0"
    from_email: str = "Receipts@herald.test"
    subject: str = 'Say "hi"'
    to_email: str = "buyer@example.test"
    status: str = "delivered"
    unique_args: Mapping[str, str] = field(default_factory=lambda: {"intent_key": "order-157", "it's": "x"})
    last_event_time: datetime = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("query", "matches"),
    [
        ("unique_args['intent_key']=\"order-157\"", True),
        ("unique_args['intent_key']=\"order-158\"", False),
        ("unique_args['missing']=\"order-157\"", False),
        ("unique_args['it\\'s']=\"x\"", True),
        ('to_email="BUYER@example.test"', True),
        ('subject="Say \\"hi\\""', True),
        ('subject="say \\"hi\\""', False),
        ('status="delivered" and msg_id="abc.filter-1.0"', True),
        ('(to_email="x@example.test") OR (status="delivered")', True),
        ('to_email="x@example.test" OR status="delivered" AND subject="nope"', False),
        ('last_event_time BETWEEN TIMESTAMP "2024-05-01T11:00:00Z" AND TIMESTAMP "2024-05-01T12:00:00Z"', True),
        ('last_event_time between timestamp "2024-05-01T12:00:01Z" and timestamp "2024-05-02T00:00:00Z"', False),
        ('last_event_time>TIMESTAMP "2024-05-01T12:00:00Z"', False),
        ('last_event_time>=TIMESTAMP "2024-05-01T14:00:00+02:00"', True),
        ('last_event_time<TIMESTAMP "2024-05-01T12:00:00.001"', True),
    ],
)
def test_activity_query_language_judges_each_clause(query: str, matches: bool) -> None:
    """The parser reads SendGrid's forms (case-insensitive keywords, AND before OR, escapes, ISO times with any
    offset) and the condition judges a feed message as SendGrid would."""
    assert parse_query(query).matches(FeedRow()) is matches


def test_activity_query_refuses_an_overlong_query() -> None:
    """A query longer than the bound is refused before it is tokenized."""
    with pytest.raises(QuerySyntaxError, match="at most 10000 characters"):
        parse_query('subject="' + "x" * 10_001 + '"')


async def test_activity_api_refuses_a_missing_or_wrong_key_with_401(activity: httpx.AsyncClient) -> None:
    """Without "Authorization: Bearer <the key>" both endpoints answer 401 "authorization required"; the scheme
    is case-insensitive."""
    unauthorized = {"errors": [{"field": None, "message": "authorization required"}]}
    query = {"query": 'to_email="a@example.test"'}
    for headers in ({}, {"Authorization": "Bearer SG.wrong"}, {"Authorization": f"Basic {ACTIVITY_KEY}"},
                    {"Authorization": ACTIVITY_KEY}):  # fmt: skip
        bare = httpx.AsyncClient(base_url=str(activity.base_url), timeout=5.0, trust_env=False, headers=headers)
        async with bare:
            for response in (await bare.get("/v3/messages", params=query), await bare.get("/v3/messages/abc")):
                assert response.status_code == 401, headers
                assert response.json() == unauthorized
    lowercase_scheme = {"Authorization": f"bearer {ACTIVITY_KEY}"}
    async with httpx.AsyncClient(
        base_url=str(activity.base_url), timeout=5.0, trust_env=False, headers=lowercase_scheme
    ) as lowercase:
        assert (await lowercase.get("/v3/messages", params=query)).status_code == 200


async def test_activity_api_not_purchased_answers_403(esp: EspThread) -> None:
    """With no activity_api_key configured (the add-on not purchased) every /v3/messages request answers 403,
    whatever key it carries."""
    forbidden = {"errors": [{"field": None, "message": "access forbidden"}]}
    headers = {"Authorization": f"Bearer {ACTIVITY_KEY}"}
    async with httpx.AsyncClient(base_url=esp.admin_url, timeout=5.0, trust_env=False, headers=headers) as http:
        listed = await http.get("/v3/messages", params={"query": 'to_email="a@example.test"'})
        detail = await http.get("/v3/messages/abc")
    for response in (listed, detail):
        assert response.status_code == 403
        assert response.json() == forbidden


async def test_activity_feed_lags_a_fresh_message(activity_esp: EspThread, activity: httpx.AsyncClient) -> None:
    """A message enters the feed only activity_lag_ms after it was accepted: until then the list leaves it out
    and the detail answers 404, then both show it."""
    await set_activity(activity, lag_ms=1500, requests_per_minute=None)
    try:
        key = secrets.token_hex(6)
        sent_at = time.monotonic()
        msg_id = await sent_msg_id(activity_esp, activity, make_message(fresh_address(), unique_args={"lag": key}))
        query = unique_arg_query("lag", key)
        assert await feed(activity, query) == []
        hidden = await activity.get(f"/v3/messages/{msg_id}")
        assert hidden.status_code == 404
        assert hidden.json() == {"errors": [{"field": "message_id", "message": "not found"}]}
        await feed_when(activity, query, lambda found: [m["msg_id"] for m in found] == [msg_id], "the lagged message")
        assert time.monotonic() - sent_at >= 1.4
        assert (await activity.get(f"/v3/messages/{msg_id}")).status_code == 200
    finally:
        await set_activity(activity, lag_ms=ACTIVITY_LAG_MS, requests_per_minute=None)


async def test_activity_api_answers_429_past_the_requests_per_minute(activity: httpx.AsyncClient) -> None:
    """With 6 requests per minute, six requests across both endpoints answer with X-RateLimit headers counting
    down, and the seventh in the minute answers 429 "too many requests" with Remaining 0 and the reset time."""
    await set_activity(activity, lag_ms=ACTIVITY_LAG_MS, requests_per_minute=6)
    try:
        started = time.time()
        answers = [await activity.get("/v3/messages", params={"query": 'status="delivered"'}) for _ in range(5)]
        answers.append(await activity.get("/v3/messages/not-a-message"))
        assert [r.status_code for r in answers] == [200] * 5 + [404]
        assert [r.headers["X-RateLimit-Remaining"] for r in answers] == ["5", "4", "3", "2", "1", "0"]
        assert {r.headers["X-RateLimit-Limit"] for r in answers} == {"6"}
        reset = int(answers[0].headers["X-RateLimit-Reset"])
        assert started + 59 <= reset <= time.time() + 61
        refused = await activity.get("/v3/messages/not-a-message")
        assert refused.status_code == 429
        assert refused.json() == {"errors": [{"message": "too many requests"}]}
        assert refused.headers["X-RateLimit-Limit"] == "6"
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        assert int(refused.headers["X-RateLimit-Reset"]) == reset
        assert (await activity.get("/_esp/activity")).json()["window"]["used"] == 6
    finally:
        await set_activity(activity, lag_ms=ACTIVITY_LAG_MS, requests_per_minute=None)


@pytest.mark.parametrize(
    ("status", "message"),
    [(503, "internal error"), (500, "internal error"), (502, "internal error"), (429, "too many requests")],
)
async def test_activity_fault_answers_its_status_then_the_api_recovers(
    activity: httpx.AsyncClient, status: int, message: str
) -> None:
    """An armed Activity fault answers its status to the next `count` requests, then the API answers 200 again;
    the stats count every request and its answer."""
    before = (await activity.get("/_esp/stats")).json()
    armed = await activity.put("/_esp/activity-fault", json={"status": status, "count": 2})
    assert armed.status_code == 200 and armed.json()["fault"] == {"status": status, "count": 2, "remaining": 2}
    query = {"query": 'status="delivered"'}
    failed = [await activity.get("/v3/messages", params=query), await activity.get("/v3/messages/abc")]
    assert [r.status_code for r in failed] == [status, status]
    assert all(r.json() == {"errors": [{"message": message}]} for r in failed)
    assert (await activity.get("/v3/messages", params=query)).status_code == 200
    assert (await activity.get("/_esp/activity")).json()["fault"] is None
    after = (await activity.get("/_esp/stats")).json()
    assert after["activity_requests"] == before["activity_requests"] + 3
    answers = after["activity_answers_by_code"]
    assert answers[str(status)] == before["activity_answers_by_code"].get(str(status), 0) + 2


async def test_activity_detail_lists_the_message_and_its_events(
    activity_esp: EspThread, activity: httpx.AsyncClient
) -> None:
    """GET /v3/messages/{msg_id} answers the fields SendGrid's Message declares, its events named as the Activity
    API names them with ISO times, unique_args as a JSON string (reserved names included) and the categories."""
    to = fresh_address()
    message = make_message(to, subject="Detail 157")
    args = {"intent_key": "order-157", "attempt": "2"}
    message["X-SMTPAPI"] = json.dumps({"unique_args": args, "category": ["receipts", "orders"]})
    msg_id = await sent_msg_id(activity_esp, activity, message)
    detail = await detail_when(activity, msg_id, ["processed", "delivered"], "processed and delivered")
    assert set(detail) == DETAIL_KEYS
    assert (detail["msg_id"], detail["to_email"], detail["from_email"]) == (msg_id, to, SENDER)
    assert (detail["subject"], detail["status"]) == ("Detail 157", "delivered")
    assert json.loads(detail["unique_args"]) == args
    assert detail["categories"] == ["receipts", "orders"]
    assert detail["originating_ip"] == "127.0.0.1"
    # Sent over SMTP with a password that is not an SG.<id>.<secret> key, so there is no key id to report.
    assert detail["api_key_id"] is None
    assert (detail["template_id"], detail["asm_group_id"], detail["teammate"]) == (None, None, "")
    assert detail["outbound_ip_type"] in ("dedicated", "shared")
    for event in detail["events"]:
        assert set(event) == EVENT_KEYS
        assert ISO_SECONDS.fullmatch(event["processed"])
        assert (event["reason"], event["bounce_type"], event["attempt_num"]) == (None, None, None)
    assert detail["events"][0]["processed"] <= detail["events"][1]["processed"]


@pytest.mark.parametrize(
    ("fault", "events", "status"),
    [
        ({"fault": "bounce", "type": "bounce", "reason": "550 5.1.1 no such user"}, ["processed", "bounced"],
         "not_delivered"),
        ({"fault": "bounce", "type": "blocked", "reason": "550 5.7.1 blocked"}, ["processed", "bounced"],
         "not_delivered"),
        ({"fault": "dropped", "reason": "Bounced Address"}, ["dropped"], "not_delivered"),
        ({"fault": "deferred_then_delivered", "deferrals": 1, "response": "451 4.3.0 later"},
         ["processed", "deferred", "delivered"], "delivered"),
        ({"fault": "spamreport"}, ["processed", "delivered", "spam_report"], "delivered"),
    ],
)  # fmt: skip
async def test_activity_detail_names_failures_and_their_reasons(
    activity_esp: EspThread, activity: httpx.AsyncClient, fault: dict[str, Any], events: list[str], status: str
) -> None:
    """A bounce is event "bounced" with its reason and a hard (bounce) or soft (blocked) bounce_type, a drop is
    "dropped", a deferral carries its response and attempt_num; status is not_delivered after a bounce or drop."""
    to = fresh_address()
    await arm(activity, to, count=1, **fault)
    msg_id = await sent_msg_id(activity_esp, activity, make_message(to))
    detail = await detail_when(activity, msg_id, events, f"events {events}")
    assert detail["status"] == status
    [summary] = await feed(activity, f'msg_id="{msg_id}"')
    assert summary["status"] == status
    by_name = {event["event_name"]: event for event in detail["events"]}
    if fault["fault"] == "bounce":
        bounced = by_name["bounced"]
        assert bounced["reason"] == fault["reason"]
        assert bounced["bounce_type"] == {"bounce": "hard", "blocked": "soft"}[fault["type"]]
    if fault["fault"] == "dropped":
        assert by_name["dropped"]["reason"] == "Bounced Address"
    if fault["fault"] == "deferred_then_delivered":
        assert (by_name["deferred"]["reason"], by_name["deferred"]["attempt_num"]) == ("451 4.3.0 later", 1)


async def test_activity_detail_of_an_unknown_msg_id_answers_404(activity: httpx.AsyncClient) -> None:
    """A msg_id the relay never issued answers 404 "not found" (with field message_id, as SendGrid's example)."""
    response = await activity.get("/v3/messages/nothing-like-this.filter-0.0")
    assert response.status_code == 404
    assert response.json() == {"errors": [{"field": "message_id", "message": "not found"}]}


@pytest.mark.parametrize(
    ("path", "body", "field_name"),
    [
        ("/_esp/activity", {"lag_ms": -1, "requests_per_minute": 6}, "lag_ms"),
        ("/_esp/activity", {"lag_ms": 10, "requests_per_minute": 0}, "requests_per_minute"),
        ("/_esp/activity", {"lag_ms": 10}, "requests_per_minute"),
        ("/_esp/activity", {"lag_ms": 10, "requests_per_minute": None, "burst": 3}, "burst"),
        ("/_esp/activity-fault", {"status": 404}, "status"),
        ("/_esp/activity-fault", {"status": 503, "count": 0}, "count"),
    ],
)
async def test_activity_admin_refuses_invalid_settings_with_422_naming_the_field(
    activity: httpx.AsyncClient, path: str, body: dict[str, Any], field_name: str
) -> None:
    """PUT /_esp/activity and /_esp/activity-fault validate their body and answer 422 naming the field and the
    rule, changing nothing."""
    before = (await activity.get("/_esp/activity")).json()
    response = await activity.put(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"].split(": ", 1)[1].startswith(f"{field_name}: ")
    assert [detail["loc"][0] for detail in response.json()["details"]] == [field_name]
    assert (await activity.get("/_esp/activity")).json() == before


async def test_reset_disarms_the_activity_fault_and_restores_the_configured_settings(
    receiver_server: tuple[WebhookReceiver, ReceiverThread],
) -> None:
    """POST /_esp/reset disarms the Activity fault, restores the configured lag and rate and zeroes its counters."""
    config = _esp_config(f"{receiver_server[1].base_url}/wh/unused", activity_api_key=ACTIVITY_KEY, activity_lag_ms=200)
    thread = EspThread(config).start()
    headers = {"Authorization": f"Bearer {ACTIVITY_KEY}"}
    try:
        async with httpx.AsyncClient(base_url=thread.admin_url, timeout=5.0, trust_env=False, headers=headers) as http:
            await set_activity(http, lag_ms=0, requests_per_minute=None)
            assert (await http.put("/_esp/activity-fault", json={"status": 503})).status_code == 200
            assert (await http.get("/v3/messages/abc")).status_code == 503
            assert (await http.post("/_esp/reset")).json() == {"reset": True}
            settings = (await http.get("/_esp/activity")).json()
            assert (settings["lag_ms"], settings["requests_per_minute"], settings["fault"]) == (200, 6, None)
            assert (await stats(http))["activity_requests"] == 0
            assert (await http.get("/v3/messages/abc")).status_code == 404
            assert (await http.delete("/_esp/activity-fault")).status_code == 404
    finally:
        thread.stop()


def test_command_line_configures_the_activity_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """--activity-api-key (or $ESP_EMULATOR_ACTIVITY_API_KEY), --activity-lag-ms and --activity-requests-per-minute
    reach the config, 0 meaning no rate limit; by default the API is not purchased, lags 1 s and allows 6 a minute."""
    base = ["--webhook-url", "http://127.0.0.1:9/wh"]
    default = build_config(parse_args(base))
    assert (default.activity_api_key, default.activity_lag_ms, default.activity_requests_per_minute) == (None, 1000, 6)
    flags = ["--activity-api-key", ACTIVITY_KEY, "--activity-lag-ms", "250", "--activity-requests-per-minute", "0"]
    configured = build_config(parse_args([*base, *flags]))
    assert (configured.activity_api_key, configured.activity_lag_ms) == (ACTIVITY_KEY, 250)
    assert configured.activity_requests_per_minute is None
    monkeypatch.setenv("ESP_EMULATOR_ACTIVITY_API_KEY", "SG.from-env.secret")
    assert build_config(parse_args(base)).activity_api_key == "SG.from-env.secret"


# --- configuration ----------------------------------------------------------------------------


def test_config_refuses_a_webhook_outside_loopback() -> None:
    """The emulator refuses a webhook URL on a non-loopback host: it must never post to the outside world."""
    with pytest.raises(ValueError, match="webhook_url host must be one of"):
        EspConfig(webhook_url="https://hooks.example.com/sendgrid")
    with pytest.raises(ValueError, match="username and password go together"):
        EspConfig(username="apikey")
    assert EspConfig(webhook_url="http://localhost:9/wh").webhook_url == "http://localhost:9/wh"


def test_signing_key_is_loaded_from_a_pem_file(tmp_path: Path) -> None:
    """--private-key-file signs with the key in the PEM file, and a file holding anything else is refused."""
    key = new_private_key()
    pem = tmp_path / "esp-key.pem"
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    assert EspServer(EspConfig(private_key_file=pem)).public_key == public_key_text(key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    with pytest.raises(ValueError, match="not an unencrypted PEM private key"):
        EspServer(EspConfig(private_key_file=garbage))


# --- command line -----------------------------------------------------------------------------


async def test_command_line_serves_smtp_and_admin_and_stops_on_sigterm(
    tmp_path: Path, receiver_server: tuple[WebhookReceiver, ReceiverThread]
) -> None:
    """`python -m emulator.esp` prints its ports and key, arms --faults-file, posts events signed with the
    printed key, and exits 0 on SIGTERM."""
    receiver, server = receiver_server
    name = f"cli-{secrets.token_hex(4)}"
    armed, normal = fresh_address("armed"), fresh_address("cli")
    faults_file = tmp_path / "faults.json"
    faults_file.write_text(json.dumps([{"to": armed, "fault": "perm_fail", "stage": "rcpt", "count": None}]))
    command = [
        sys.executable, "-m", "emulator.esp", "--host", "127.0.0.1", "--smtp-port", "0", "--admin-port", "0",
        "--webhook-url", f"{server.base_url}/wh/{name}", "--step-ms", "10", "--faults-file", str(faults_file),
        "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        ports_line = (await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 15)).decode()
        key_line = (await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 5)).decode()
        ports = re.search(r"smtp 127\.0\.0\.1:(\d+), admin http://127\.0\.0\.1:(\d+)/", ports_line)
        assert ports, ports_line
        smtp_port, admin_port = int(ports.group(1)), int(ports.group(2))
        public_key = key_line.rsplit(" ", 1)[-1].strip()
        receiver.register(name, public_key)

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{admin_port}", timeout=5, trust_env=False) as http:
            assert (await http.get("/_esp/public-key")).json() == {"public_key": public_key}
            faults = (await http.get("/_esp/faults")).json()["faults"]
            assert [(f["to"], f["fault"], f["stage"]) for f in faults] == [(armed, "perm_fail", "rcpt")]
            async with asyncio.timeout(10):
                # No --username: the relay takes mail without AUTH.
                with pytest.raises(aiosmtplib.SMTPRecipientsRefused):
                    await aiosmtplib.send(make_message(armed), hostname="127.0.0.1", port=smtp_port, start_tls=False)
                await aiosmtplib.send(make_message(normal), hostname="127.0.0.1", port=smtp_port, start_tls=False)
            posts = await wait_for_events(receiver, normal, 2)
            assert kinds(posts) == ["processed", "delivered"] and all(post.signature_ok for post in posts)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.to_thread(process.wait, 10), 12) == 0
    finally:
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait, 5)
        if process.stdout:
            process.stdout.close()


# --- raw SMTP dialogue (for what aiosmtplib hides) ------------------------------------------------


def _auth_plain() -> bytes:
    token = base64.b64encode(f"\0{USERNAME}\0{PASSWORD}".encode()).decode()
    return f"AUTH PLAIN {token}".encode()


async def _dialogue(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, commands: list[bytes]) -> list[bytes]:
    """Read the greeting, send each command, and return the last line of each reply."""
    last_lines: list[bytes] = []

    async def reply() -> bytes:
        while True:
            line = await asyncio.wait_for(reader.readline(), 5)
            if len(line) < 4 or line[3:4] != b"-":
                return line

    assert (await reply()).startswith(b"220 ")
    for command in commands:
        writer.write(command + b"\r\n")
        await asyncio.wait_for(writer.drain(), 5)
        last_lines.append(await reply())
    return last_lines


# --- the relay down: refusing connections ---------------------------------------------------------


async def test_an_outage_refuses_connections_then_the_relay_listens_again_on_the_same_port(
    esp: EspThread, admin: httpx.AsyncClient
) -> None:
    """PUT /_esp/outage: connects are refused (nothing listens) until the outage ends by itself; the same
    port then takes mail again. A bad duration is refused with the field named."""
    to = fresh_address()
    answer = await admin.put("/_esp/outage", json={"seconds": 1.0})
    assert answer.status_code == 200 and answer.json()["refusing_until"]
    with pytest.raises((aiosmtplib.SMTPConnectError, OSError)):
        await send(esp, make_message(to), timeout=2)
    await asyncio.sleep(1.5)
    errors, _ = await send(esp, make_message(to))
    assert errors == {}
    for bad in ({"seconds": 0}, {"seconds": 601}, {"seconds": "soon"}, {}):
        refused = await admin.put("/_esp/outage", json=bad)
        assert refused.status_code == 422 and refused.json()["error"].startswith("seconds:")


async def test_an_outage_can_be_ended_early(esp: EspThread, admin: httpx.AsyncClient) -> None:
    """DELETE /_esp/outage listens again at once."""
    assert (await admin.put("/_esp/outage", json={"seconds": 60})).status_code == 200
    assert (await admin.delete("/_esp/outage")).json() == {"refusing_until": None}
    errors, _ = await send(esp, make_message(fresh_address()))
    assert errors == {}
