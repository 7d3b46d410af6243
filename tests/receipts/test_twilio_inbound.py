"""POST /twilio/inbound over real HTTP into the real ledger: a person's reply is bounded, parsed,
verified, checked to be ours, recorded once per MessageSid by fingerprint and classification only,
and answered with TwiML only after it is committed.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in (nothing is signalled for a reply). The endpoint believes it is reached at
PUBLIC_URL, the URL Twilio signs.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from herald.core.reply_keywords import classify_reply
from herald.core.send_policy import Category
from herald.ledger.policy_store import standing
from herald.ledger.store import open_pool
from herald.providers.twilio_signature import compute_signature
from herald.receipts.twilio_inbound import EMPTY_TWIML, MAX_TWILIO_INBOUND_BYTES, REPLY_TEXTS
from herald.settings import TwilioSettings
from tests import reads
from tests.depth import examples
from tests.intents import fresh_recipient
from tests.keys import SESSION_KEYRING
from tests.receipts.served import RecordingClient, receipt_app

TOKEN = "inbound-test-auth-token"
PUBLIC_URL = "https://receipts.example.com"
ACCOUNT = "AC" + "1" * 32
OUR_NUMBER = "+15005550006"
OURS = TwilioSettings(account_sid=ACCOUNT, auth_token=TOKEN, from_number=OUR_NUMBER)


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, auth_token=TOKEN, public_url=PUBLIC_URL, twilio=OURS) as served:
        yield served


@pytest.fixture(scope="module")
async def replying(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    """The same route with HERALD_TWILIO_INBOUND_REPLIES on."""
    async with receipt_app(pool, auth_token=TOKEN, public_url=PUBLIC_URL, twilio=OURS, inbound_replies=True) as served:
        yield served


def fresh_sid() -> str:
    return "SM" + secrets.token_hex(16)


def incoming(sid: str, sender: str, body: str, **fields: str) -> dict[str, str]:
    """An incoming message as Twilio posts it to the number's webhook, geography included."""
    return {
        "ToCountry": "US", "ToState": "CA", "SmsMessageSid": sid, "NumMedia": "0", "ToCity": "", "FromZip": "94105",
        "SmsSid": sid, "FromState": "CA", "SmsStatus": "received", "FromCity": "SAN FRANCISCO", "Body": body,
        "FromCountry": "US", "To": OUR_NUMBER, "ToZip": "", "NumSegments": "1", "MessageSid": sid,
        "AccountSid": ACCOUNT, "From": sender, "ApiVersion": "2010-04-01", **fields,
    }  # fmt: skip


async def post(base: str, form: dict[str, str], *, signature: str | None = None) -> httpx.Response:
    """POST the form to /twilio/inbound, signed over the public URL unless a signature is given."""
    headers = {"X-Twilio-Signature": signature or compute_signature(TOKEN, PUBLIC_URL + "/twilio/inbound", form)}
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        return await http.post(f"{base}/twilio/inbound", data=form, headers=headers)


async def requests_for(pool: AsyncConnectionPool, sid: str) -> list[dict[str, Any]]:
    return await reads.rows(pool, "SELECT * FROM recipient_requests WHERE source_ref = %s", sid)


def _as_text(row: dict[str, Any]) -> str:
    return json.dumps(row, default=str)


async def test_a_signed_stop_is_one_opt_out_row_without_the_body_or_the_number(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A signed STOP: 200 with empty TwiML as text/xml, one row (fingerprint, opt_out, keyword STOP),
    and neither the number nor the words in it; nothing is signalled."""
    base, client = route
    sender, sid = fresh_recipient(), fresh_sid()
    response = await post(base, incoming(sid, sender, "STOP"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/xml")
    assert response.text == EMPTY_TWIML
    [row] = await requests_for(pool, sid)
    assert (row["request"], row["detail"], row["channel"], row["source"]) == (
        "opt_out",
        "keyword STOP",
        "sms",
        "inbound_keyword",
    )
    assert row["recipient_fingerprint"] == SESSION_KEYRING.recipient(sender)
    assert sender not in _as_text(row) and sender.lstrip("+") not in _as_text(row)
    assert not [signal for signal in client.signals if sid in repr(signal)]


async def test_a_reply_without_a_keyword_is_recorded_as_other_and_its_words_are_kept_nowhere(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    """'stop please' is a conversation, not an opt-out: recorded as other, the words in no row and no log."""
    base, _ = route
    sender, sid = fresh_recipient(), fresh_sid()
    words = f"stop please, my code {secrets.token_hex(4)}"
    with caplog.at_level(logging.DEBUG):
        response = await post(base, incoming(sid, sender, words))
    assert response.status_code == 200 and response.text == EMPTY_TWIML
    [row] = await requests_for(pool, sid)
    assert (row["request"], row["detail"]) == ("other", "reply without a keyword")
    assert words not in _as_text(row) and sender not in _as_text(row)
    assert not any(words in r.getMessage() or sender in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("body", "fields", "kind", "detail"),
    [
        pytest.param(" Stop ", {}, "opt_out", "keyword STOP", id="padded-stop"),
        pytest.param("stop please", {}, "other", "reply without a keyword", id="stop-please"),
        pytest.param("unstop", {}, "opt_in", "keyword UNSTOP", id="unstop"),
        pytest.param("help", {}, "help", "keyword HELP", id="help"),
        pytest.param("ARRET", {"OptOutType": "STOP"}, "opt_out", "keyword STOP", id="advanced-opt-out"),
    ],
)
async def test_each_reply_is_classified_as_twilio_would(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, body: str, fields: dict[str, str], kind: str,
    detail: str,
) -> None:  # fmt: skip
    """The whole message, trimmed and in any case, is the keyword; Advanced Opt-Out's OptOutType wins."""
    base, _ = route
    sid = fresh_sid()
    assert (await post(base, incoming(sid, fresh_recipient(), body, **fields))).status_code == 200
    [row] = await requests_for(pool, sid)
    assert (row["request"], row["detail"]) == (kind, detail)


async def test_help_is_recorded_and_suppresses_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """HELP is a request on record, not an opt-out: the gate's standing lists no suppression after it."""
    base, _ = route
    sender, sid = fresh_recipient(), fresh_sid()
    assert (await post(base, incoming(sid, sender, "HELP"))).status_code == 200
    assert [row["request"] for row in await requests_for(pool, sid)] == ["help"]
    async with pool.connection() as conn:
        found = await standing(
            conn, at=datetime.now(UTC) + timedelta(seconds=1), recipient=sender, channel="sms",
            category=Category.MARKETING, workflow_id="inbound-test", fps=SESSION_KEYRING.recipient_candidates(sender),
        )  # fmt: skip
    assert found.suppressions == []


async def test_the_same_message_posted_five_times_is_one_row(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """Twilio's retries (or a replay of a captured post) of one MessageSid: 200 each time, one request."""
    base, _ = route
    sid = fresh_sid()
    form = incoming(sid, fresh_recipient(), "STOP")
    answers = [(await post(base, form)).status_code for _ in range(5)]
    assert answers == [200] * 5
    assert len(await requests_for(pool, sid)) == 1


async def test_forged_and_unsigned_posts_store_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A signature under another token, over another URL, over other fields, or none: 403, no row."""
    base, _ = route
    sid = fresh_sid()
    form = incoming(sid, fresh_recipient(), "STOP")
    other_token = compute_signature("not-our-token", PUBLIC_URL + "/twilio/inbound", form)
    other_url = compute_signature(TOKEN, PUBLIC_URL + "/twilio/status", form)
    other_fields = compute_signature(TOKEN, PUBLIC_URL + "/twilio/inbound", {**form, "Body": "START"})
    for signature in (other_token, other_url, other_fields):
        response = await post(base, form, signature=signature)
        assert response.status_code == 403 and "X-Twilio-Signature" in response.text
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        assert (await http.post(f"{base}/twilio/inbound", data=form)).status_code == 403
    assert await requests_for(pool, sid) == []


async def test_an_oversized_or_unreadable_post_is_refused_before_the_signature(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """Over the bound (declared or not): 413 naming it; JSON instead of a form: 400; no row either way."""
    base, _ = route
    sid = fresh_sid()
    huge = incoming(sid, fresh_recipient(), "STOP", Padding="p" * MAX_TWILIO_INBOUND_BYTES)
    response = await post(base, huge)
    assert response.status_code == 413 and str(MAX_TWILIO_INBOUND_BYTES) in response.text

    async def streamed() -> AsyncIterator[bytes]:
        yield b"MessageSid=" + sid.encode() + b"&Body="
        for _ in range(8):
            yield b"x" * 8192

    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        chunked = await http.post(
            f"{base}/twilio/inbound", content=streamed(), headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        as_json = await http.post(
            f"{base}/twilio/inbound",
            content=json.dumps({"MessageSid": sid}),
            headers={"Content-Type": "application/json"},
        )
    assert chunked.status_code == 413
    assert as_json.status_code == 400 and "Content-Type" in as_json.text
    assert await requests_for(pool, sid) == []


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        pytest.param({"AccountSid": "AC" + "2" * 32}, "AccountSid: not this deployment's account", id="other-account"),
        pytest.param({"AccountSid": ""}, "AccountSid: not this deployment's account", id="no-account"),
        pytest.param({"To": "+15005550007"}, "To: not Herald's sender", id="other-number"),
    ],
)
async def test_a_signed_reply_to_another_sender_is_refused_403_and_not_recorded(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture,
    fields: dict[str, str], rule: str,
) -> None:  # fmt: skip
    """Twilio's signature, but another account or number: not a request to Herald (403 naming the field)."""
    base, _ = route
    sid = fresh_sid()
    with caplog.at_level(logging.WARNING, logger="herald.receipts"):
        response = await post(base, incoming(sid, fresh_recipient(), "STOP", **fields))
    assert response.status_code == 403 and rule in response.text
    assert any(rule in record.getMessage() for record in caplog.records)
    assert await requests_for(pool, sid) == []


async def test_with_a_messaging_service_the_service_is_what_makes_a_reply_ours(pool: AsyncConnectionPool) -> None:
    """A Messaging Service sends from a pool of numbers: a reply to any of them names the service."""
    service = "MG" + "3" * 32
    ours = TwilioSettings(account_sid=ACCOUNT, auth_token=TOKEN, messaging_service_sid=service)
    async with receipt_app(pool, auth_token=TOKEN, public_url=PUBLIC_URL, twilio=ours) as (base, _):
        kept, refused = fresh_sid(), fresh_sid()
        to_pool_number = incoming(kept, fresh_recipient(), "STOP", To="+15005550099", MessagingServiceSid=service)
        assert (await post(base, to_pool_number)).status_code == 200
        other = await post(base, incoming(refused, fresh_recipient(), "STOP", MessagingServiceSid="MG" + "4" * 32))
        assert other.status_code == 403 and "MessagingServiceSid: not Herald's Messaging Service" in other.text
    assert len(await requests_for(pool, kept)) == 1 and await requests_for(pool, refused) == []


@pytest.mark.parametrize(
    ("fields", "rule"),
    [
        pytest.param({"MessageSid": ""}, "MessageSid: required", id="no-sid"),
        pytest.param({"MessageSid": "SM" + "a" * 100}, "MessageSid: required, 1 to 64", id="long-sid"),
        pytest.param({"From": "whatsapp:+15551234567"}, "From: required, an E.164 number", id="whatsapp"),
        pytest.param({"From": "+15551234567\n"}, "From: required, an E.164 number", id="trailing-newline"),
        pytest.param({"From": ""}, "From: required, an E.164 number", id="no-from"),
    ],
)
async def test_a_signed_reply_without_what_a_request_needs_is_refused_400_naming_the_rule(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, fields: dict[str, str], rule: str
) -> None:
    """Ours, but nothing to record it by: a loud 400 (Twilio's debugger shows the rule), no row."""
    base, _ = route
    sid = fresh_sid()
    form = {**incoming(sid, fresh_recipient(), "STOP"), **fields}
    response = await post(base, form)
    assert response.status_code == 400 and rule in response.text
    assert await requests_for(pool, sid) == []


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ("STOP", REPLY_TEXTS["opt_out"]),
        ("start", REPLY_TEXTS["opt_in"]),
        ("Help", REPLY_TEXTS["help"]),
        ("thanks", None),
    ],
)
async def test_with_inbound_replies_on_herald_answers_the_keywords_itself(
    replying: tuple[str, RecordingClient], body: str, answer: str | None
) -> None:
    """HERALD_TWILIO_INBOUND_REPLIES: a short <Message> for STOP, START and HELP; anything else empty."""
    base, _ = replying
    response = await post(base, incoming(fresh_sid(), fresh_recipient(), body))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/xml")
    if answer is None:
        assert response.text == EMPTY_TWIML
    else:
        assert response.text == (
            f'<?xml version="1.0" encoding="UTF-8"?><Response><Message>{answer}</Message></Response>'
        )


async def test_with_the_database_away_a_reply_gets_503_and_nothing_is_stored(pool: AsyncConnectionPool) -> None:
    """No connection to PostgreSQL: 503 within the pool's wait, never a 2xx for an unstored request."""
    sid = fresh_sid()
    unreachable = open_pool("postgresql://herald@127.0.0.1:1/herald", timeout=1.0)
    await unreachable.open(wait=False)
    try:
        async with receipt_app(unreachable, auth_token=TOKEN, public_url=PUBLIC_URL, twilio=OURS) as (base, _):
            response = await post(base, incoming(sid, fresh_recipient(), "STOP"))
    finally:
        await unreachable.close()
    assert response.status_code == 503
    assert await requests_for(pool, sid) == []


# ---- search: any signed form ---------------------------------------------------------------------

_ODD_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@st.composite
def signed_forms(draw: st.DrawFn) -> dict[str, str]:
    """An incoming message, some of its fields odd, missing or extra (most examples break no rule or
    one, so most reach the ledger); the test makes MessageSid unique per example."""
    odd = draw(st.sets(st.sampled_from(["From", "To", "AccountSid", "MessageSid", "OptOutType"]), max_size=2))
    form = incoming("SM", draw(st.sampled_from(["+15551230001", "+4915112345678"])), "")
    form["Body"] = draw(st.sampled_from(["STOP", " start ", "HELP", "stop please", ""]) | st.text(max_size=200))
    choices = {
        "From": st.sampled_from(["", "whatsapp:+15551230001", "+1555"]) | _ODD_TEXT,
        "To": st.sampled_from(["+15005550007", ""]) | _ODD_TEXT,
        "AccountSid": st.sampled_from(["AC" + "2" * 32, ""]) | _ODD_TEXT,
        "MessageSid": st.sampled_from(["", "SM\x00", "SM" + "a" * 64]) | _ODD_TEXT,
        "OptOutType": st.sampled_from(["STOP", "START", "HELP", "stop", "bogus"]) | _ODD_TEXT,
    }
    for name in sorted(odd):
        value = draw(st.none() | choices[name])  # None: the field is missing
        if value is None:
            form.pop(name, None)
        else:
            form[name] = value
    form.update(draw(st.dictionaries(_ODD_TEXT, _ODD_TEXT, max_size=3)))
    return form


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=signed_forms())
async def test_any_signed_form_stores_one_row_or_is_refused_with_its_rule(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, form: dict[str, str]
) -> None:
    """Whatever Twilio's signed fields hold: 200 with exactly one row classified as classify_reply
    says, or a 400/403 naming a field and its rule with no row; never a 500."""
    base, _ = route
    sid = form.get("MessageSid", "")
    if sid:
        sid = form["MessageSid"] = sid + secrets.token_hex(16)
    response = await post(base, form)
    event(f"answered {response.status_code}")
    assert response.status_code in (200, 400, 403), (response.status_code, response.text)
    rows = await requests_for(pool, sid) if sid and "\x00" not in sid else []  # no row can hold either
    if response.status_code == 200:
        assert response.text == EMPTY_TWIML
        kind, _ = classify_reply(form.get("Body", ""), form.get("OptOutType"))
        assert [row["request"] for row in rows] == [kind]
        assert form["From"] not in _as_text(rows[0])
    else:
        field, colon, rule = response.text.partition(": ")
        assert colon and field in {"MessageSid", "From", "To", "AccountSid"} and rule
        assert rows == []
