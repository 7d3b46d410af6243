"""POST /sendgrid/events over real HTTP into the real ledger: bounded, verified, stored in one transaction, then routed.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in (the delivery path only calls ``get_workflow_handle(...).signal(...)``), so each
test sees exactly which signals the route sent.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer
from herald.core.contracts import ReportBatch
from herald.core.outcomes import ProviderStatus
from herald.core.rows import InboxReport
from herald.ledger import store
from herald.ledger.store import open_pool
from herald.providers.sendgrid_signature import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    new_private_key,
    public_key_text,
    sign,
)
from herald.providers.smtp import EmailSubmission, SmtpAdapter
from herald.receipts.app import MAX_SENDGRID_BODY_BYTES, ReceiptEndpoint
from herald.receipts.delivery import StoredReport, UnknownProviderError, deliver
from herald.settings import EmailSettings, ReceiptSettings
from tests import reads
from tests.keys import SESSION_KEYRING as KEYRING
from tests.receipts.served import RecordingClient, receipt_app

KEY = new_private_key()
ADDRESS = "member.route@example.com"


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, public_key=public_key_text(KEY), hold_seconds=0.5) as (base, client):
        yield f"{base}/sendgrid/events", client


def fresh_ref() -> str:
    return f"att_{secrets.token_hex(12)}_1"


def fresh_message() -> tuple[str, str]:
    """A fresh attempt reference and the Message-ID Herald gives its e-mail."""
    ref = fresh_ref()
    return ref, f"<{ref}@herald.test>"


def event(name: str, ref: str | None, message_id: str, **fields: Any) -> dict[str, Any]:
    """One event as SendGrid posts it about a message the SMTP adapter sent."""
    body: dict[str, Any] = {
        "email": ADDRESS, "timestamp": int(time.time()), "event": name,
        "sg_event_id": secrets.token_urlsafe(16), "sg_message_id": f"{secrets.token_urlsafe(16)}.filter0001.0",
        "smtp-id": message_id, "herald_attempt": ref, "ip": "203.0.113.9",
    }  # fmt: skip
    body.update(fields)
    return {key: value for key, value in body.items() if value is not None}


def post_body(*events: dict[str, Any]) -> bytes:
    return json.dumps(list(events), separators=(",", ":")).encode() + b"\r\n"


def signed(body: bytes, *, key: ec.EllipticCurvePrivateKey = KEY, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(key, body, timestamp),
        TIMESTAMP_HEADER: timestamp,
    }


async def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        return await http.post(url, content=body, headers=headers)


async def inbox(pool: AsyncConnectionPool, message_id: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            """SELECT id, provider, provider_message_id, provider_status, attempt_ref, error_code,
                      provider_event_at, payload
                 FROM receipt_inbox WHERE provider_message_id = %s ORDER BY attempt_ref, id""",
            (message_id,),
        )
        return await cursor.fetchall()


# ---- a correct post ---------------------------------------------------------------------------


async def test_a_signed_post_stores_each_of_our_events_once_without_personal_data(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """processed and delivered for one attempt: 200, two 'sendgrid' rows without the address, and a
    repeat of the same post (SendGrid's retry, freshly signed) adds nothing."""
    url, _ = route
    ref, message_id = fresh_message()
    body = post_body(event("processed", ref, message_id), event("delivered", ref, message_id, response="250 OK"))
    response = await post(url, body, signed(body))
    assert response.status_code == 200, response.text
    assert len(response.content) < 100
    rows = await inbox(pool, message_id)
    assert [(r["provider"], r["provider_status"], r["attempt_ref"]) for r in rows] == [
        ("sendgrid", "processed", ref),
        ("sendgrid", "delivered", ref),
    ]
    assert all(r["provider_message_id"] == message_id and r["provider_event_at"] is not None for r in rows)
    for row in rows:
        stored = json.dumps(row["payload"])
        assert ADDRESS not in stored and "@" not in stored and "203.0.113.9" not in stored
        assert row["payload"]["herald_attempt"] == ref
    again = await post(url, body, signed(body))
    assert again.status_code == 200
    assert [r["id"] for r in await inbox(pool, message_id)] == [r["id"] for r in rows]


async def test_two_attempts_sharing_a_message_id_keep_their_events_apart(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A resend reuses the Message-ID: the same events for two attempts are four facts, and a repeat stays four."""
    url, _ = route
    first, second = fresh_ref(), fresh_ref()
    message_id = f"<{first}@herald.test>"
    body = post_body(*(event(name, ref, message_id) for ref in (first, second) for name in ("processed", "delivered")))
    assert (await post(url, body, signed(body))).status_code == 200
    assert (await post(url, body, signed(body))).status_code == 200
    rows = await inbox(pool, message_id)
    assert sorted((r["attempt_ref"], r["provider_status"]) for r in rows) == sorted(
        (ref, name) for ref in (first, second) for name in ("processed", "delivered")
    )


async def test_an_event_without_our_reference_is_answered_and_not_stored(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """SendGrid posts the account's other mail too: 200, and nothing of it in the inbox."""
    url, _ = route
    message_id = f"<{secrets.token_hex(8)}@someone-else.example>"
    body = post_body(event("delivered", None, message_id), event("machine_open", fresh_ref(), message_id))
    response = await post(url, body, signed(body))
    assert response.status_code == 200
    assert "1 not ours" in response.text and "1 not applicable" in response.text
    assert await inbox(pool, message_id) == []


async def test_a_bounce_is_stored_with_its_encoded_status_and_its_reason_without_the_quoted_address(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """The enhanced status becomes the error code; a reason quoting the recipient is kept with the address masked."""
    url, _ = route
    ref, message_id = fresh_message()
    bounce = event(
        "bounce", ref, message_id, status="4.2.2", type="bounce", reason=f"452 4.2.2 <{ADDRESS}> mailbox full"
    )
    body = post_body(bounce)
    assert (await post(url, body, signed(body))).status_code == 200
    (row,) = await inbox(pool, message_id)
    assert (row["provider_status"], row["error_code"], row["payload"]["status"]) == ("bounce", 422, "4.2.2")
    assert row["payload"]["reason"] == "452 4.2.2 [address] mailbox full" and "email" not in row["payload"]


async def test_a_post_full_of_personal_fields_stores_only_the_kept_ones_and_reaches_the_same_verdict(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """phone, name, ip, user agent, custom args and an address inside reason and response never reach the
    inbox, and the bounce is signalled exactly as the same bounce without them is."""
    url, client = route
    plain_ref, full_ref = fresh_ref(), fresh_ref()
    plain_id, full_id = f"<{plain_ref}@herald.test>", f"<{full_ref}@herald.test>"
    workflows = {ref: await _attempt_of_a_new_intent(pool, ref) for ref in (plain_ref, full_ref)}
    bounce = {
        "timestamp": int(time.time()), "status": "5.1.1", "type": "bounce", "bounce_classification": "Invalid Address",
        "tls": 1,
    }  # fmt: skip
    personal = {
        "phone": "+15550104477", "name": "Route Member", "ip": "203.0.113.9",
        "useragent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X)", "loyalty_tier": "gold",
        "unique_args": {"customer_email": ADDRESS}, "custom_args": {"customer_phone": "+15550104477"},
        "category": [ADDRESS], "url": "https://shop.example/r/abc",
        "reason": f"550 5.1.1 <{ADDRESS}>: Recipient address rejected: User unknown",
        "response": f"550 5.1.1 <{ADDRESS}>... No such user",
    }  # fmt: skip
    body = post_body(
        event("bounce", plain_ref, plain_id, **bounce, reason="550 5.1.1 Recipient address rejected: User unknown"),
        {**event("bounce", full_ref, full_id, **bounce), **personal},  # "name" is also event()'s parameter
    )
    assert (await post(url, body, signed(body))).status_code == 200

    (row,) = await inbox(pool, full_id)
    assert row["payload"] == {
        "event": "bounce", "sg_event_id": row["payload"]["sg_event_id"],
        "sg_message_id": row["payload"]["sg_message_id"], "herald_attempt": full_ref, **bounce,
        "reason": "550 5.1.1 [address] Recipient address rejected: User unknown",
        "response": "550 5.1.1 [address] No such user",
    }  # fmt: skip
    stored = json.dumps(row["payload"])
    assert all(str(value) not in stored for value in ("+15550104477", "Route Member", "203.0.113.9", "Mozilla", "gold"))
    assert ADDRESS not in stored and "@" not in stored

    (plain,) = await inbox(pool, plain_id)
    verdict_columns = ("provider", "provider_status", "error_code", "provider_event_at")
    assert [row[c] for c in verdict_columns] == [plain[c] for c in verdict_columns]

    async def signalled() -> dict[str, Any]:
        found = {wid: arg for wid, _, arg in client.signals if wid in workflows.values()}
        return found if len(found) == 2 else {}

    batches = await reads.eventually(signalled, "a signal to each attempt's workflow")
    verdicts = {
        ref: [(r.status, r.error_code, r.failure_retryable) for r in batches[workflow_id].reports]
        for ref, workflow_id in workflows.items()
    }
    assert verdicts[full_ref] == verdicts[plain_ref] == [(ProviderStatus.UNDELIVERED, 511, False)]


# ---- refusals ---------------------------------------------------------------------------------


def _forged(body: bytes) -> dict[str, str]:
    return signed(body, key=new_private_key())


def _stale(body: bytes) -> dict[str, str]:
    return signed(body, at=time.time() - 400)


def _future(body: bytes) -> dict[str, str]:
    return signed(body, at=time.time() + 120)


def _unsigned(body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json"}


def _no_timestamp(body: bytes) -> dict[str, str]:
    return {key: value for key, value in signed(body).items() if key != TIMESTAMP_HEADER}


def _timestamp_not_seconds(body: bytes) -> dict[str, str]:
    stamp = f"{time.time():.3f}"
    return {"Content-Type": "application/json", SIGNATURE_HEADER: sign(KEY, body, stamp), TIMESTAMP_HEADER: stamp}


def _signed_for_another_body(body: bytes) -> dict[str, str]:
    return signed(body.replace(b"delivered", b"bounce"))


def _signed_with_another_timestamp(body: bytes) -> dict[str, str]:
    headers = signed(body)
    headers[TIMESTAMP_HEADER] = str(int(headers[TIMESTAMP_HEADER]) - 1)
    return headers


@pytest.mark.parametrize(
    ("headers_for", "names"),
    [
        pytest.param(_forged, SIGNATURE_HEADER, id="forged-signature"),
        pytest.param(_stale, "300 s old", id="stale-timestamp-400s"),
        pytest.param(_future, "ahead of our clock", id="future-timestamp-120s"),
        pytest.param(_unsigned, SIGNATURE_HEADER, id="unsigned"),
        pytest.param(_no_timestamp, TIMESTAMP_HEADER, id="no-timestamp"),
        pytest.param(_timestamp_not_seconds, "whole seconds", id="timestamp-not-whole-seconds"),
        pytest.param(_signed_for_another_body, SIGNATURE_HEADER, id="body-changed-after-signing"),
        pytest.param(_signed_with_another_timestamp, SIGNATURE_HEADER, id="timestamp-changed-after-signing"),
    ],
)
async def test_a_post_that_is_not_freshly_signed_over_this_body_is_refused_and_stores_nothing(
    route: tuple[str, RecordingClient],
    pool: AsyncConnectionPool,
    headers_for: Callable[[bytes], dict[str, str]],
    names: str,
) -> None:
    """Forged, stale (a replay), future, unsigned or altered posts get 403 naming the header, and no inbox row."""
    url, client = route
    ref, message_id = fresh_message()
    body = post_body(event("delivered", ref, message_id))
    signals_before = len(client.signals)
    response = await post(url, body, headers_for(body))
    assert response.status_code == 403
    assert names in response.text
    assert await inbox(pool, message_id) == []
    assert len(client.signals) == signals_before


async def test_without_a_verification_key_every_post_is_refused(pool: AsyncConnectionPool) -> None:
    """No key configured: even a correctly signed post gets 403 saying why, and nothing is stored."""
    ref, message_id = fresh_message()
    body = post_body(event("delivered", ref, message_id))
    async with receipt_app(pool, public_key=None) as (base, _):
        url = f"{base}/sendgrid/events"
        response = await post(url, body, signed(body))
    assert response.status_code == 403
    assert response.text == "SendGrid events are not accepted: no verification key configured"
    assert await inbox(pool, message_id) == []


def test_a_malformed_verification_key_stops_the_endpoint_at_construction() -> None:
    """A key that is not P-256 is a configuration error at start, not a 403 on every post."""
    with pytest.raises(ValueError, match="public key"):
        ReceiptEndpoint(
            ReceiptSettings(sendgrid_public_key="bm90IGEga2V5"),
            auth_token="x", pool=None, client=None, keyring=KEYRING,  # type: ignore[arg-type]
        )  # fmt: skip


async def _chunks(total: int, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        sent += piece
        yield b" " * piece


async def test_a_body_over_one_mebibyte_is_refused_before_it_is_read_and_stores_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A 2 MiB post (correctly signed, declared or streamed without a length) gets 413 naming the limit."""
    url, _ = route
    ref, message_id = fresh_message()
    events = post_body(event("delivered", ref, message_id))
    body = events[:-2] + b" " * (2 * 1024 * 1024) + b"\r\n"  # valid JSON, padded with whitespace
    response = await post(url, body, signed(body))
    assert response.status_code == 413
    assert str(MAX_SENDGRID_BODY_BYTES) in response.text
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        streamed = await http.post(url, content=_chunks(2 * 1024 * 1024), headers=signed(b""))
    assert streamed.status_code == 413
    assert await inbox(pool, message_id) == []


async def test_a_body_of_exactly_one_mebibyte_is_read(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """The limit is inclusive: a 1 MiB batch is parsed and stored."""
    url, _ = route
    ref, message_id = fresh_message()
    events = post_body(event("delivered", ref, message_id))
    body = events[:-2] + b" " * (MAX_SENDGRID_BODY_BYTES - len(events)) + b"\r\n"
    assert len(body) == MAX_SENDGRID_BODY_BYTES
    assert (await post(url, body, signed(body))).status_code == 200
    assert len(await inbox(pool, message_id)) == 1


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        pytest.param(b"email=x&event=delivered", "body must be JSON", id="not-json"),
        pytest.param(b'{"event": "delivered"}', "JSON array", id="not-an-array"),
        pytest.param(b'[{"event": "delivered"}, 3]', "JSON object", id="event-not-an-object"),
    ],
)
async def test_a_signed_but_malformed_body_is_refused_with_400_naming_the_rule(
    route: tuple[str, RecordingClient], body: bytes, rule: str
) -> None:
    """SendGrid's own bytes that break a rule are a visible 400, never a silent 200."""
    url, _ = route
    response = await post(url, body, signed(body))
    assert response.status_code == 400
    assert rule in response.text


async def test_with_the_database_away_the_post_gets_503_and_nothing_is_stored(pool: AsyncConnectionPool) -> None:
    """No connection to PostgreSQL: 503 (SendGrid redelivers), and no row appears later either."""
    ref, message_id = fresh_message()
    body = post_body(event("processed", ref, message_id), event("delivered", ref, message_id))
    # Port 1 on loopback refuses every connection: the pool can lend none within its timeout.
    unreachable = open_pool("postgresql://herald@127.0.0.1:1/herald", timeout=1.0)
    await unreachable.open(wait=False)
    try:
        async with receipt_app(unreachable, public_key=public_key_text(KEY)) as (base, client):
            url = f"{base}/sendgrid/events"
            response = await post(url, body, signed(body))
    finally:
        await unreachable.close()
    assert response.status_code == 503
    assert client.signals == []
    assert await inbox(pool, message_id) == []


# ---- after the answer: routing ----------------------------------------------------------------


async def _attempt_of_a_new_intent(pool: AsyncConnectionPool, ref: str) -> str:
    """An e-mail intent and its attempt in the ledger, so the route can find the attempt's workflow."""
    workflow_id = f"sendgrid_route:{secrets.token_hex(6)}/email"
    now = datetime.now(UTC)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            """INSERT INTO intents (workflow_id, business_key, channel, recipient, template_id, template_version,
                   render_data, body, content_sha256, intent_fingerprint, created_at, expires_at, first_run_id)
               VALUES (%s, %s, 'email', %s, 'order_receipt_email', 1, %s, 'body', %s, %s, %s, %s, 'run-1')""",
            (
                workflow_id,
                workflow_id.split("/")[0],
                ADDRESS,
                Jsonb({}),
                "0" * 64,
                "0" * 64,
                now,
                now + timedelta(hours=1),
            ),
        )
        await conn.execute(
            """INSERT INTO attempts (attempt_ref, workflow_id, number, prepared_at, provider)
               VALUES (%s, %s, 1, %s, 'sendgrid')""",
            (ref, workflow_id, now),
        )
    return workflow_id


async def test_the_stored_events_reach_the_attempts_workflow_in_one_signal_classified_by_sendgrid(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """After the 200, processed (held) and bounce (final) travel together, read in SendGrid's vocabulary."""
    url, client = route
    ref, message_id = fresh_message()
    workflow_id = await _attempt_of_a_new_intent(pool, ref)
    body = post_body(
        event("processed", ref, message_id), event("bounce", ref, message_id, status="4.2.2", type="bounce")
    )
    assert (await post(url, body, signed(body))).status_code == 200

    async def signalled() -> list[ReportBatch]:
        return [arg for wid, _, arg in client.signals if wid == workflow_id]

    (batch,) = await reads.eventually(signalled, "signal to the attempt's workflow")
    reports = [(r.status, r.provider_id, r.attempt_ref, r.error_code, r.failure_retryable) for r in batch.reports]
    assert reports == [
        (ProviderStatus.QUEUED, message_id, ref, None, False),
        (ProviderStatus.UNDELIVERED, message_id, ref, 422, True),
    ]
    await asyncio.sleep(1.0)  # past the hold: the held report was not signalled a second time
    assert len(await signalled()) == 1


async def test_events_for_an_attempt_not_recorded_yet_are_left_for_the_drainer(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """The report beat our attempt row: nothing is signalled, and the row gets a redelivery schedule."""
    url, client = route
    ref, message_id = fresh_message()
    body = post_body(event("delivered", ref, message_id))
    assert (await post(url, body, signed(body))).status_code == 200
    (row,) = await inbox(pool, message_id)

    async def scheduled() -> list[tuple[Any, ...]]:
        async with pool.connection() as conn:
            cursor = await conn.execute("SELECT last_error FROM receipt_redelivery WHERE inbox_id = %s", (row["id"],))
            return await cursor.fetchall()

    assert await reads.eventually(scheduled, "redelivery schedule") == [("attempt not known yet",)]
    assert all(arg.reports[0].attempt_ref != ref for _, _, arg in client.signals)


# ---- the delivery path reads each row in its provider's vocabulary ----------------------------

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _row(provider: str | None, status: str, code: int | None) -> dict[str, Any]:
    row = {
        "id": 11, "provider_message_id": "<att_abc_1@herald.test>", "provider_status": status,
        "attempt_ref": "att_abc_1", "error_code": code, "provider_event_at": None, "received_at": _AT,
    }  # fmt: skip
    return row if provider is None else {**row, "provider": provider}


@pytest.mark.parametrize(
    ("provider", "status", "code", "mapped", "retryable", "final"),
    [
        ("sendgrid", "processed", None, ProviderStatus.QUEUED, False, False),
        ("sendgrid", "deferred", None, ProviderStatus.QUEUED, False, False),
        ("sendgrid", "open", None, ProviderStatus.DELIVERED, False, True),
        ("sendgrid", "bounce", 422, ProviderStatus.UNDELIVERED, True, True),
        ("sendgrid", "bounce", 511, ProviderStatus.UNDELIVERED, False, True),
        ("sendgrid", "dropped", 500, ProviderStatus.FAILED, False, True),
        ("twilio", "undelivered", 30008, ProviderStatus.UNDELIVERED, True, True),
        ("twilio", "sent", None, ProviderStatus.SENT, False, False),
        # A row built without the key (code from before the column was read) is Twilio's, as then.
        (None, "failed", 30036, ProviderStatus.FAILED, True, True),
    ],
)
def test_a_stored_report_is_classified_in_its_providers_vocabulary(
    provider: str | None, status: str, code: int | None, mapped: ProviderStatus, retryable: bool, final: bool
) -> None:
    """The same label and code mean what the row's provider says they mean, decided at the receipt edge."""
    report = StoredReport(_row(provider, status, code))
    signal = report.signal()
    assert (signal.status, signal.failure_retryable, report.is_final) == (mapped, retryable, final)


async def test_a_row_of_a_provider_without_a_vocabulary_is_left_undecided_for_an_operator(
    pool: AsyncConnectionPool,
) -> None:
    """No vocabulary: never final, never signalled, no verdict; its redelivery row names the provider."""
    ref = fresh_ref()
    async with pool.connection() as conn, conn.transaction():
        [row] = await store.store_reports(conn, [InboxReport(
            provider="mailgun", provider_message_id=f"<{ref}@herald.test>", provider_status="delivered",
            attempt_ref=ref, error_code=None, provider_event_at=None, payload={},
        )])  # fmt: skip
    report = StoredReport(row)
    assert report.vocabulary is None and report.is_final is False
    with pytest.raises(UnknownProviderError, match="mailgun"):
        report.signal()
    client = RecordingClient()
    assert await deliver(pool, client, [report]) == "unclassified"  # type: ignore[arg-type]
    assert client.signals == []
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT d.last_error, o.inbox_id FROM receipt_redelivery d
                 LEFT JOIN receipt_outcomes o ON o.inbox_id = d.inbox_id WHERE d.inbox_id = %s""",
            (report.inbox_id,),
        )
        assert await cursor.fetchall() == [("no report vocabulary for provider 'mailgun'", None)]


# ---- end to end with the ESP emulator ---------------------------------------------------------


async def test_the_esp_emulators_signed_events_for_a_sent_message_are_stored_per_attempt(
    pool: AsyncConnectionPool, tmp_path: Path
) -> None:
    """A message sent with the SMTP adapter through the ESP emulator: its signed processed and delivered
    events reach the route and are stored under our Message-ID, and a resend reusing that Message-ID
    under attempt 2 is stored as attempt 2's own facts."""
    key = new_private_key()
    key_file = tmp_path / "esp-signing-key.pem"
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    async with receipt_app(pool, public_key=public_key_text(key)) as (base, _):
        url = f"{base}/sendgrid/events"
        esp = EspServer(EspConfig(smtp_port=0, admin_port=0, webhook_url=url, private_key_file=key_file, step_ms=20))
        await esp.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{esp.admin_port}", trust_env=False) as admin:
                published = (await admin.get("/_esp/public-key")).json()["public_key"]
                assert published == public_key_text(key)
                adapter = SmtpAdapter(
                    EmailSettings(
                        host="127.0.0.1", port=esp.smtp_port, security="none", from_address="receipts@herald.example",
                        message_id_domain="herald.test",
                    ), keyring=KEYRING
                )  # fmt: skip
                token = secrets.token_hex(10)
                first, second = f"att_{token}_1", f"att_{token}_2"
                to = f"member.{token}@example.com"
                for ref in (first, second):
                    submission = EmailSubmission(
                        attempt_ref=ref, to=to, subject="Your receipt", text="Thank you.", message_id_of=first
                    )
                    assert (await adapter.send_email(submission)).result.kind == "accepted"
                message_id = adapter.message_id(first)

                async def both_attempts_stored() -> list[dict[str, Any]]:
                    rows = await inbox(pool, message_id)
                    return rows if len(rows) == 4 else []

                rows = await reads.eventually(both_attempts_stored, "processed and delivered for both attempts")

                async def answers() -> list[int | None]:
                    """The HTTP status of every webhook POST, once the emulator has recorded all four."""
                    messages = (await admin.get("/_esp/messages", params={"to": to})).json()["messages"]
                    statuses = [
                        attempt["http_status"]
                        for message in messages
                        for recipient in message["recipients"]
                        for posted in recipient["events"]
                        for attempt in posted["attempts"]
                    ]
                    return statuses if len(statuses) == 4 and None not in statuses else []

                posts = await reads.eventually(answers, "the emulator's record of its four posts")
        finally:
            await esp.stop()
    assert sorted((r["attempt_ref"], r["provider_status"]) for r in rows) == [
        (first, "delivered"), (first, "processed"), (second, "delivered"), (second, "processed"),
    ]  # fmt: skip
    assert {(r["provider"], r["provider_message_id"]) for r in rows} == {("sendgrid", f"<{first}@herald.test>")}
    assert all(to not in json.dumps(r["payload"]) for r in rows)
    assert posts == [200] * 4, "every signed post was accepted at its first try"


async def test_our_event_holding_an_unstorable_value_is_recorded_as_a_rejection_beside_the_stored_ones(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A NUL in one event of ours no longer vanishes into a log line: the rest of the post is stored,
    the bad event becomes a receipt_rejections row naming the rule, and the post is answered 200."""
    url, _ = route
    ref, message_id = fresh_message()
    body = post_body(
        event("processed", ref, message_id),
        event("delivered", ref, message_id, response="250 OK\u0000queued"),
    )
    response = await post(url, body, signed(body))
    assert response.status_code == 200, response.text
    assert "recorded 1 unstorable as rejections" in response.text
    assert [r["provider_status"] for r in await inbox(pool, message_id)] == ["processed"]
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute("SELECT provider, reason, fields FROM receipt_rejections WHERE attempt_ref = %s", (ref,))
        [rejection] = await cursor.fetchall()
    assert rejection["provider"] == "sendgrid"
    assert rejection["reason"] == "a field holds a NUL character, which the ledger cannot store"
    assert rejection["fields"]["response"] == "250 OK\\u0000queued"
    assert ADDRESS not in json.dumps(rejection["fields"])
