"""POST /infobip/reports over real HTTP into the real ledger: each result authenticated by its callbackData,
stored before the answer, claimed for its attempt, then routed; forgeries refused and never stored.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in, so each test sees exactly which signals the route sent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretBytes, SecretStr

from herald.core.contracts import ReportBatch, attempt_ref
from herald.core.outcomes import ProviderStatus
from herald.core.rows import AttemptRow, LedgerBatch, RecordIntentInput
from herald.intake.requests import build_intent, parse_request
from herald.ledger import store
from herald.ledger.store import open_pool
from herald.providers.infobip_signature import CallbackKeys
from herald.receipts.infobip_reports import MAX_INFOBIP_BODY_BYTES
from herald.settings import InfobipWebhookSettings
from tests import reads
from tests.depth import examples
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.receipts.freezing_proxy import FreezingProxy
from tests.receipts.served import RecordingClient, receipt_app

WEBHOOK = InfobipWebhookSettings(keys={"k1": SecretBytes(secrets.token_bytes(32))})
KEYS = CallbackKeys.from_settings(WEBHOOK)
OTHER_KEYS = CallbackKeys.from_settings(InfobipWebhookSettings(keys={"k1": SecretBytes(secrets.token_bytes(32))}))
BASIC = "infobip-profile:s3cret-pass"
NUMBER = "41793026727"


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, infobip=WEBHOOK) as (base, client):
        yield f"{base}/infobip/reports", client


def fresh_ref() -> str:
    return f"att_{secrets.token_hex(12)}_1"


def callback_data(message_id: str) -> str:
    assert KEYS is not None
    return KEYS.sign(message_id)


def result(message_id: str, name: str = "DELIVERED_TO_HANDSET", group: str = "DELIVERED", **fields: Any) -> dict[str, Any]:
    """One report as Infobip's v3 webhook posts it, with the callbackData the adapter sent."""
    ids = {"PENDING_ACCEPTED": (1, 26), "DELIVERED_TO_OPERATOR": (3, 2), "DELIVERED_TO_HANDSET": (3, 5),
           "UNDELIVERABLE_NOT_DELIVERED": (2, 9)}.get(name, (5, 23))  # fmt: skip
    body: dict[str, Any] = {
        "bulkId": "bulk-7", "messageId": message_id, "to": NUMBER, "sender": "HeraldShop",
        "sentAt": "2026-12-06T08:00:00.000+0000", "doneAt": "2026-12-06T08:00:05.000+0000", "messageCount": 1,
        "mccMnc": "22801", "callbackData": callback_data(message_id),
        "price": {"pricePerMessage": 0.01, "currency": "EUR"},
        "status": {"groupId": ids[0], "groupName": group, "id": ids[1], "name": name, "description": "fixed text"},
        "error": {"groupId": 0, "groupName": "OK", "id": 0, "name": "NO_ERROR", "description": "No Error", "permanent": False},
    }  # fmt: skip
    body.update(fields)
    return body


async def post(url: str, *results: Any, raw: bytes | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps({"results": list(results)}).encode()
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        return await http.post(url, content=content, headers={"Content-Type": "application/json", **(headers or {})})


async def inbox(pool: AsyncConnectionPool, message_id: str) -> list[dict[str, Any]]:
    return await reads.rows(
        pool,
        """SELECT id, provider, provider_message_id, provider_status, attempt_ref, error_code, provider_event_at, payload
             FROM receipt_inbox WHERE provider_message_id = %s ORDER BY id""",
        message_id,
    )


async def rejections(pool: AsyncConnectionPool, ref: str) -> list[dict[str, Any]]:
    return await reads.rows(pool, "SELECT reason, fields FROM receipt_rejections WHERE attempt_ref = %s", ref)


async def an_infobip_attempt(pool: AsyncConnectionPool) -> tuple[str, str]:
    """An intent and its first attempt, handed to Infobip, in the ledger: (workflow id, attempt ref)."""
    intent = build_intent(parse_request(receipt_request(fresh_key(), fresh_recipient())), datetime.now(UTC), SESSION_KEYRING)
    ref = attempt_ref(intent.workflow_id, 1)
    attempt = AttemptRow(attempt_ref=ref, workflow_id=intent.workflow_id, number=1, prepared_at=datetime.now(UTC))
    batch = LedgerBatch(record=RecordIntentInput(intent=intent, run_id=secrets.token_hex(8)), attempts=[attempt])
    await store.write_batch(pool, batch.handed_to(ref, "infobip", "test route"))
    return intent.workflow_id, ref


# ---- stored first, exactly, routed --------------------------------------------------------------


async def test_a_post_is_stored_before_its_answer_without_personal_data_and_a_repeat_adds_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """Two results of one message: 200 only once both rows are committed ('infobip', attempt_ref = the
    messageId, the status name, doneAt); no number and no callbackData kept; Infobip's redelivery of the
    same post finds the same rows."""
    url, _ = route
    ref = fresh_ref()
    body = [result(ref, "DELIVERED_TO_OPERATOR"), result(ref, "DELIVERED_TO_HANDSET")]
    response = await post(url, *body)
    assert response.status_code == 200 and response.text.startswith("stored 2 reports (2 new)")
    rows = await inbox(pool, ref)  # read right after the answer: committed before it
    assert [(r["provider"], r["attempt_ref"], r["provider_status"]) for r in rows] == [
        ("infobip", ref, "DELIVERED_TO_OPERATOR"), ("infobip", ref, "DELIVERED_TO_HANDSET"),
    ]  # fmt: skip
    assert rows[1]["provider_event_at"] == datetime(2026, 12, 6, 8, 0, 5, tzinfo=UTC) and rows[1]["error_code"] is None
    stored = json.dumps([row["payload"] for row in rows])
    assert NUMBER not in stored and "callbackData" not in stored and "fixed text" not in stored
    again = await post(url, *body)
    assert again.status_code == 200 and again.text.startswith("stored 2 reports (0 new)")
    assert [r["id"] for r in await inbox(pool, ref)] == [r["id"] for r in rows]


async def test_a_report_is_claimed_for_its_attempt_in_the_statement_that_stores_it_and_signalled(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A report about an attempt the ledger knows claims the message for that attempt (basis 'report')
    and reaches the attempt's workflow as one signal, classified in Infobip's vocabulary."""
    url, client = route
    workflow_id, ref = await an_infobip_attempt(pool)
    response = await post(url, result(ref, "UNDELIVERABLE_NOT_DELIVERED", "UNDELIVERABLE", error={"id": 27}))
    assert response.status_code == 200
    claims = await reads.rows(pool, "SELECT provider, attempt_ref, basis FROM message_claims WHERE provider_message_id = %s", ref)
    assert claims == [{"provider": "infobip", "attempt_ref": ref, "basis": "report"}]

    async def signalled() -> list[Any]:
        return [arg for wid, _, arg in client.signals if wid == workflow_id]

    (batch,) = await reads.eventually(signalled, "the report's signal")
    assert isinstance(batch, ReportBatch)
    (report,) = batch.reports
    assert report.status is ProviderStatus.UNDELIVERED and report.error_code == 27 and report.failure_retryable


async def test_a_report_about_an_unknown_id_is_stored_answered_200_and_left_for_the_drainer(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A verified report whose attempt the ledger does not know (yet) is committed and answered 200, and
    its delivery is deferred with its cause, as Twilio's and SendGrid's are."""
    url, client = route
    ref = fresh_ref()
    response = await post(url, result(ref))
    assert response.status_code == 200
    (row,) = await inbox(pool, ref)

    async def deferred() -> list[dict[str, Any]]:
        return await reads.rows(pool, "SELECT last_error FROM receipt_redelivery WHERE inbox_id = %s", row["id"])

    assert await reads.eventually(deferred, "the deferral") == [{"last_error": "attempt not known yet"}]
    assert all(report.attempt_ref != ref for _, _, batch in client.signals for report in batch.reports)


async def test_a_hung_database_gets_a_quick_503_and_the_redelivered_post_is_stored_once_it_answers(
    settings: Any,
) -> None:
    """The database stops answering: the post gets 503 within the store deadline (nothing acknowledged,
    so Infobip redelivers), and the redelivery after the database recovers is stored once."""
    target = conninfo_to_dict(settings.database_url.get_secret_value())
    proxy = FreezingProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
    await proxy.start()
    through_proxy = make_conninfo(settings.database_url.get_secret_value(), host="127.0.0.1", port=proxy.port)
    async with open_pool(through_proxy, timeout=1.0) as hanging_pool:
        async with receipt_app(hanging_pool, infobip=WEBHOOK, store_timeout=1.0) as (base, _):
            url, ref = f"{base}/infobip/reports", fresh_ref()
            assert (await post(url, result(fresh_ref()))).status_code == 200  # the path works
            proxy.freeze()
            started = time.monotonic()
            response = await post(url, result(ref))
            elapsed = time.monotonic() - started
            assert response.status_code == 503 and elapsed < 3.0, (response.status_code, elapsed)
            proxy.thaw()
            deadline = time.monotonic() + 20
            while (response := await post(url, result(ref))).status_code != 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # Infobip's retry cycle; the pool replaces the stuck connections
            assert response.status_code == 200
            assert len(await inbox(hanging_pool, ref)) == 1
    await proxy.close()


# ---- authentication -------------------------------------------------------------------------------------


async def test_a_result_with_another_messages_callback_data_is_refused_and_never_stored(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A real callbackData replayed onto another message's result, and one made with another key, are
    refused: alone they get 403; beside a good result, 200 naming them by index; neither is stored,
    not even as a rejection."""
    url, _ = route
    good, forged, foreign = fresh_ref(), fresh_ref(), fresh_ref()
    assert OTHER_KEYS is not None
    replayed = result(forged, callbackData=callback_data(good))
    other_key = result(foreign, callbackData=OTHER_KEYS.sign(foreign))
    alone = await post(url, replayed, other_key)
    assert alone.status_code == 403 and "results[0], results[1]" in alone.text
    mixed = await post(url, result(good), replayed, result(fresh_ref(), callbackData=None))
    assert mixed.status_code == 200
    assert "refused 2 results (results[1], results[2])" in mixed.text
    assert len(await inbox(pool, good)) == 1
    assert await inbox(pool, forged) == [] and await inbox(pool, foreign) == []
    assert await rejections(pool, forged) == [] and await rejections(pool, foreign) == []


async def test_a_verified_result_the_ledger_cannot_read_is_recorded_as_a_rejection(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """Infobip's own result without a readable status is not a report: recorded in receipt_rejections
    with its rule (once per post) and answered 200, so Infobip stops redelivering it."""
    url, _ = route
    ref = fresh_ref()
    response = await post(url, result(ref, status="DELIVERED"))
    assert response.status_code == 200 and "1 unreadable verified results" in response.text
    assert await inbox(pool, ref) == []
    (rejection,) = await rejections(pool, ref)
    assert rejection["reason"].startswith("status") and NUMBER not in json.dumps(rejection["fields"])


@pytest.mark.parametrize(
    ("raw", "status", "rule"),
    [
        (b"not json", 400, "request body: must be JSON"),
        (b'{"results": {}}', 400, "results: required"),
        (b"[1, 2]", 400, "results: required"),
        (b"[" * 100_000, 400, "request body: must be JSON"),
        (b"x" * (MAX_INFOBIP_BODY_BYTES + 1), 413, "request body: larger than"),
    ],
)
async def test_a_body_that_is_no_report_post_is_refused_with_its_rule(
    route: tuple[str, RecordingClient], raw: bytes, status: int, rule: str
) -> None:
    """Not JSON, no results list, nested past any parser, or over the size bound: refused, naming the rule."""
    url, _ = route
    response = await post(url, raw=raw)
    assert response.status_code == status and response.text.startswith(rule)


async def test_without_a_webhook_key_every_post_is_refused(pool: AsyncConnectionPool) -> None:
    """No HERALD_INFOBIP_WEBHOOK_KEYS: nothing can be verified, so every post is 403 and nothing stored."""
    ref = fresh_ref()
    async with receipt_app(pool) as (base, _):
        response = await post(f"{base}/infobip/reports", result(ref))
    assert response.status_code == 403 and await inbox(pool, ref) == []


async def test_basic_credentials_when_configured_are_required(pool: AsyncConnectionPool) -> None:
    """With HERALD_INFOBIP_WEBHOOK_BASIC, a post without them or with others is 401 (nothing stored),
    and with them the verified results are stored."""
    webhook = WEBHOOK.model_copy(update={"basic": SecretStr(BASIC)})
    ref = fresh_ref()

    def basic(credentials: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}

    async with receipt_app(pool, infobip=webhook) as (base, _):
        url = f"{base}/infobip/reports"
        missing = await post(url, result(ref))
        wrong = await post(url, result(ref), headers=basic("infobip-profile:guess"))
        assert (missing.status_code, wrong.status_code) == (401, 401) and await inbox(pool, ref) == []
        assert missing.headers["WWW-Authenticate"].startswith("Basic")
        right = await post(url, result(ref), headers=basic(BASIC))
    assert right.status_code == 200 and len(await inbox(pool, ref)) == 1


# ---- any body ------------------------------------------------------------------------------------------

_TEXT = st.text(max_size=12)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_FIELDS = st.sampled_from(["messageId", "callbackData", "status", "error", "doneAt", "bulkId", "messageCount", "to"])


@st.composite
def report_posts(draw: st.DrawFn) -> tuple[list[Any], set[str]]:
    """A post of mixed results: genuine ones with odd fields, forged ones, and arbitrary JSON; with the
    ids whose results were signed for themselves."""
    results: list[Any] = []
    genuine: set[str] = set()
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["genuine", "forged", "junk"]))
        ref = fresh_ref()
        if kind == "junk":
            results.append(draw(_JSON))
            continue
        body = result(ref, draw(st.sampled_from(["PENDING_ACCEPTED", "DELIVERED_TO_HANDSET", "EXPIRED_X", "Ω"])))
        body.update(draw(st.dictionaries(_FIELDS.filter(lambda f: f not in ("messageId", "callbackData")), _JSON, max_size=2)))
        if kind == "forged":
            body["callbackData"] = draw(st.sampled_from([callback_data(fresh_ref()), "hb1:k1:" + "A" * 43, ""]))
        else:
            genuine.add(ref)
        results.append(body)
    return results, genuine


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=report_posts())
async def test_any_post_is_answered_without_a_500_and_stores_only_results_signed_for_themselves(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, drawn: tuple[list[Any], set[str]]
) -> None:
    """Whatever a post holds: 200, 400 or 403 (never a 500), and no inbox row or rejection names an id
    whose result was not signed for that id."""
    url, _ = route
    results, genuine = drawn
    response = await post(url, *results)
    event(f"answered {response.status_code}")
    assert response.status_code in (200, 400, 403), response.text
    ids = [r["messageId"] for r in results if isinstance(r, dict) and isinstance(r.get("messageId"), str)]
    stored = await reads.rows(
        pool,
        """SELECT provider_message_id AS id FROM receipt_inbox WHERE provider_message_id = ANY(%s)
           UNION ALL SELECT attempt_ref FROM receipt_rejections WHERE attempt_ref = ANY(%s)""",
        ids, ids,
    )  # fmt: skip
    assert {row["id"] for row in stored} <= genuine
    if genuine:
        assert response.status_code == 200
