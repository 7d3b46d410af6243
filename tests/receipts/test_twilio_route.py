"""POST /twilio/status over real HTTP into the real ledger: bounded before parsing, verified, stored or
recorded as rejected, and bounded in time when the database hangs.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in. The endpoint believes it is reached at PUBLIC_URL, the URL Twilio signs.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from herald.ledger.store import open_pool
from herald.providers.twilio_signature import compute_signature
from herald.receipts.twilio_form import MAX_TWILIO_BODY_BYTES
from tests import reads
from tests.receipts.freezing_proxy import FreezingProxy
from tests.receipts.served import RecordingClient, receipt_app

TOKEN = "route-test-auth-token"
PUBLIC_URL = "https://receipts.example.com"


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, auth_token=TOKEN, public_url=PUBLIC_URL) as served:
        yield served


def callback(sid: str, status: str = "delivered", **fields: str) -> dict[str, str]:
    """A status callback as Twilio posts it, personal fields included."""
    return {
        "MessageSid": sid, "SmsSid": sid, "AccountSid": "AC" + "0" * 32, "MessageStatus": status,
        "SmsStatus": status, "To": "+15557654321", "From": "+15550001111", "ApiVersion": "2010-04-01", **fields,
    }  # fmt: skip


def fresh_sid() -> str:
    return "SM" + secrets.token_hex(16)


async def post(
    base: str, form: dict[str, str], *, attempt: str | None = None, signed_as: str | None = None
) -> httpx.Response:
    """POST the form, signed over ``signed_as`` (default: the public URL the endpoint is configured with)."""
    query = f"?{urlencode({'attempt': attempt})}" if attempt else ""
    url = (signed_as or PUBLIC_URL) + "/twilio/status" + query
    headers = {"X-Twilio-Signature": compute_signature(TOKEN, url, form)}
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        return await http.post(f"{base}/twilio/status{query}", data=form, headers=headers)


async def inbox(pool: AsyncConnectionPool, sid: str) -> list[dict[str, Any]]:
    return await reads.rows(pool, "SELECT * FROM receipt_inbox WHERE provider_message_id = %s", sid)


async def rejections(pool: AsyncConnectionPool, attempt: str) -> list[dict[str, Any]]:
    return await reads.rows(pool, "SELECT * FROM receipt_rejections WHERE attempt_ref = %s ORDER BY id", attempt)


def fresh_attempt() -> str:
    return f"att_{secrets.token_hex(12)}_1"


async def test_a_signed_callback_is_stored_without_personal_fields(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    base, _ = route
    sid = fresh_sid()
    response = await post(base, callback(sid), attempt=fresh_attempt())
    assert response.status_code == 200, response.text
    [row] = await inbox(pool, sid)
    assert row["provider_status"] == "delivered"
    assert "To" not in row["payload"] and "From" not in row["payload"]


async def test_only_the_named_fields_of_a_callback_are_stored(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A drop-list of To, From and Body let everything else through: a channel's recipient address,
    a location, any field Twilio adds. The inbox now keeps a named list."""
    base, _ = route
    sid = fresh_sid()
    extra = {"ChannelToAddress": "+15557654321", "ChannelInstallSid": "XE1", "FromCity": "SPRINGFIELD",
             "ToZip": "62701", "Latitude": "39.78", "Body": "Your code is 123456", "SomethingNew": "x"}  # fmt: skip
    response = await post(base, callback(sid, ErrorCode="30003", **extra), attempt=fresh_attempt())
    assert response.status_code == 200, response.text
    [row] = await inbox(pool, sid)
    kept = {"MessageSid", "SmsSid", "AccountSid", "MessageStatus", "SmsStatus", "ApiVersion", "ErrorCode"}
    assert set(row["payload"]) == kept
    assert row["error_code"] == 30003


@pytest.mark.parametrize(
    "signed_as", ["https://receipts.example.com:443", "https://receipts.example.com"], ids=["port-443", "no-port"]
)
async def test_the_default_port_written_out_or_not_is_the_same_url(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, signed_as: str
) -> None:
    """Twilio may sign https://host:443/... for an endpoint configured as https://host/...: both verify."""
    base, _ = route
    sid = fresh_sid()
    assert (await post(base, callback(sid), attempt=fresh_attempt(), signed_as=signed_as)).status_code == 200
    assert len(await inbox(pool, sid)) == 1


async def _chunks(total: int) -> AsyncIterator[bytes]:
    """An unsigned form body of ``total`` bytes in 1 MiB pieces: one field with an endless value."""
    piece = b"x" * (1024 * 1024)
    yield b"a="
    for _ in range(total // len(piece)):
        yield piece


async def test_a_huge_unsigned_post_is_refused_before_it_is_parsed_and_costs_no_memory(
    route: tuple[str, RecordingClient],
) -> None:
    """64 MiB without a signature, streamed without a length: 413 naming the limit, and the server
    holds no more than a few pieces of it at any moment (Python's allocations traced in-process).

    Before the bound, the whole form was parsed before the signature was checked (three 100 MB posts
    took the server from 107 to 578 MiB): a 64 MiB field value was held whole, so the peak was over 64 MiB.
    """
    base, _ = route
    total = 64 * 1024 * 1024
    tracemalloc.start()
    try:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
            response = await http.post(
                f"{base}/twilio/status", content=_chunks(total), headers={"Content-Type": "application/x-www-form-urlencoded"}
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 413
    assert str(MAX_TWILIO_BODY_BYTES) in response.text
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while refusing a 64 MiB post"
    declared = await post(base, callback(fresh_sid(), Padding="p" * (2 * MAX_TWILIO_BODY_BYTES)))
    assert declared.status_code == 413


async def test_a_body_that_is_not_a_form_is_refused_before_the_signature(route: tuple[str, RecordingClient]) -> None:
    base, _ = route
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        response = await http.post(f"{base}/twilio/status", content=b'{"MessageSid": "SM1"}', headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "Content-Type" in response.text


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        pytest.param({"MessageSid": "SM" + "a" * 10_000}, "MessageSid: must be 1 to 64", id="10KB-sid"),
        pytest.param({"ErrorCode": "9" * 30}, "ErrorCode: must be a whole number of at most 9 digits", id="huge-error-code"),
        pytest.param({"ErrorCode": "abc"}, "ErrorCode: must be a whole number", id="error-code-not-a-number"),
        pytest.param({"ApiVersion": "2010\x0004-01"}, "ApiVersion: holds a NUL character", id="NUL"),
        pytest.param({"MessageSid": ""}, "MessageSid: required", id="no-sid"),
    ],
)
async def test_a_signed_report_that_cannot_be_stored_is_recorded_as_rejected_and_answered_200(
    route: tuple[str, RecordingClient],
    pool: AsyncConnectionPool,
    caplog: pytest.LogCaptureFixture,
    fields: dict[str, str],
    rule: str,
) -> None:
    """Before: 503 forever (Twilio redelivers forever) and a log that did not say why. Now: 200, a
    receipt_rejections row naming the rule, a log line naming it, and the value echoed nowhere."""
    base, client = route
    attempt = fresh_attempt()
    form = callback(fresh_sid(), **fields)
    with caplog.at_level(logging.WARNING, logger="herald.receipts"):
        first = await post(base, form, attempt=attempt)
        again = await post(base, form, attempt=attempt)  # Twilio's redelivery: the same answer
    assert (first.status_code, again.status_code) == (200, 200), first.text
    assert rule in first.text and "recorded as rejection" in first.text
    rows = await rejections(pool, attempt)
    assert [row["reason"].startswith(rule) for row in rows] == [True, True]
    assert "To" not in rows[0]["fields"] and "From" not in rows[0]["fields"]
    assert all(len(value) <= 257 for value in rows[0]["fields"].values())
    assert any(rule in record.getMessage() for record in caplog.records)
    for long_value in (value for value in fields.values() if len(value) > 64):
        assert long_value not in first.text
        assert not any(long_value in record.getMessage() for record in caplog.records)
    assert not [signal for signal in client.signals if attempt in repr(signal)]


async def test_an_unsigned_unstorable_report_is_refused_and_not_recorded(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """Only Twilio's signed words are recorded: an attacker's bad field is a 403 and leaves no row."""
    base, _ = route
    attempt = fresh_attempt()
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        response = await http.post(
            f"{base}/twilio/status?attempt={attempt}", data=callback("SM" + "a" * 5_000), headers={"X-Twilio-Signature": "x"}
        )
    assert response.status_code == 403
    assert await rejections(pool, attempt) == []


async def test_a_hung_database_gets_a_quick_503_and_the_redelivery_is_stored_once_it_answers(settings: Any) -> None:
    """The database stops answering (its sockets stay open): the report gets 503 within the store
    deadline instead of hanging, and Twilio's redelivery after the database recovers is stored."""
    target = conninfo_to_dict(settings.database_url.get_secret_value())
    proxy = FreezingProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
    await proxy.start()
    through_proxy = make_conninfo(settings.database_url.get_secret_value(), host="127.0.0.1", port=proxy.port)
    async with open_pool(through_proxy, timeout=1.0) as hanging_pool:
        async with receipt_app(hanging_pool, auth_token=TOKEN, public_url=PUBLIC_URL, store_timeout=1.0) as (base, _):
            sid = fresh_sid()
            form = callback(sid)
            assert (await post(base, callback(fresh_sid()))).status_code == 200  # the path works
            proxy.freeze()
            started = time.monotonic()
            response = await post(base, form)
            elapsed = time.monotonic() - started
            assert response.status_code == 503
            assert elapsed < 3.0, f"answered after {elapsed:.1f} s"
            proxy.thaw()
            deadline = time.monotonic() + 20
            while (response := await post(base, form)).status_code != 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # Twilio's retries; the pool replaces the stuck connections
            assert response.status_code == 200
            assert len(await inbox(hanging_pool, sid)) == 1
    await proxy.close()
