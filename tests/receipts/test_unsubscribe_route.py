"""GET and POST /unsubscribe/<token> over real HTTP into the real ledger: GET changes nothing, POST records
the unsubscribe once per link before answering, and a link that is not ours stores nothing.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in (nothing is signalled for an unsubscribe: the policy gate reads it).
"""

from __future__ import annotations

import base64
import logging
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from herald.intent import recipient_fingerprint
from herald.ledger.policy_store import standing
from herald.ledger.store import open_pool
from herald.receipts.app import MAX_UNSUBSCRIBE_BODY_BYTES
from herald.send_policy import Category
from herald.settings import UnsubscribeSettings
from herald.unsubscribe import TokenKeys, issue
from tests.receipts.served import RecordingClient, receipt_app
from tests.support import fresh_address

KEY = secrets.token_bytes(32)
KEYS = TokenKeys({"u1": KEY}, "u1")
SETTINGS = UnsubscribeSettings(keys={"u1": KEY})
ONE_CLICK = {"List-Unsubscribe": "One-Click"}


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, unsubscribe=SETTINGS) as served:
        yield served


def link(to: str, *, keys: TokenKeys = KEYS, days: float = 60, category: Category = Category.MARKETING) -> str:
    """A token for `to`, as the SMTP adapter writes it into a marketing e-mail."""
    expires = datetime.now(UTC) + timedelta(days=days)
    return issue(keys, fingerprint=recipient_fingerprint(to), category=category, expires_at=expires)


async def call(base: str, method: str, token: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        return await http.request(method, f"{base}/unsubscribe/{quote(token, safe='')}", **kwargs)


async def rows(pool: AsyncConnectionPool, to: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT * FROM recipient_requests WHERE recipient_fingerprint = %s ORDER BY id",
            (recipient_fingerprint(to),),
        )
        return await cursor.fetchall()


def _raw(token: str) -> bytearray:
    return bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def _spelled(raw: bytes) -> str:
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def _not_ours(case: str, to: str, other: str) -> str:
    """A link for `to` altered, forged or garbled as `case` says."""
    token = link(to)
    raw = _raw(token)
    if case == "another recipient's fingerprint under this signature":
        mine, theirs = (bytes.fromhex(recipient_fingerprint(a).split(":")[1]) for a in (to, other))
        return _spelled(raw.replace(mine, theirs))
    if case == "the category changed to transactional":
        raw[len(raw) - 32 - 16 - 4 - 1] = 0  # the category byte: marketing (2) becomes transactional (0)
        return _spelled(raw)
    if case == "the last signature byte changed":
        raw[-1] ^= 0x01
        return _spelled(raw)
    if case == "signed with a key we do not hold":
        return link(to, keys=TokenKeys({"u2": secrets.token_bytes(32)}, "u2"))
    if case == "expired":
        return link(to, days=-1)
    if case == "cut short":
        return token[:40]
    if case == "not base64url":
        return token[:-1] + "!"
    assert case == "too long"
    return token + "A" * 300


async def test_get_shows_a_button_and_changes_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A mail scanner's GET (and HEAD) of the link: 200 with a confirmation form posting back to the same URL,
    nothing stored, and a page that holds no address, fingerprint or token and keeps itself out of caches."""
    base, client = route
    to = fresh_address()
    token = link(to)
    page = await call(base, "GET", token)
    assert (await call(base, "HEAD", token)).status_code == 200
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<form method="post">' in page.text and "marketing e-mail" in page.text
    assert token not in page.text and to not in page.text and recipient_fingerprint(to) not in page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert await rows(pool, to) == [] and client.signals == []


async def test_a_one_click_post_is_recorded_once_and_suppresses_marketing_only(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """RFC 8058's POST: 200 once committed, one row (email, unsubscribe, marketing, one_click, the token's
    nonce); posted again (a client's retry): 200 with the same page, still one row; marketing to that
    address is suppressed from then on, transactional mail is not."""
    base, _ = route
    to = fresh_address()
    token = link(to)
    first = await call(base, "POST", token, data=ONE_CLICK)
    again = await call(base, "POST", token, data=ONE_CLICK)
    assert first.status_code == again.status_code == 200 and first.text == again.text
    assert "You are unsubscribed" in first.text and token not in first.text
    [row] = await rows(pool, to)
    assert (row["channel"], row["request"], row["category"], row["source"]) == (
        "email", "unsubscribe", "marketing", "one_click",
    )  # fmt: skip
    assert len(row["source_ref"]) == 32 and row["source_ref"] not in token
    later = datetime.now(UTC) + timedelta(seconds=1)
    async with pool.connection() as conn:
        marketing = await standing(
            conn, at=later, recipient=to, channel="email", category=Category.MARKETING, workflow_id="x"
        )
        receipts = await standing(
            conn, at=later, recipient=to, channel="email", category=Category.TRANSACTIONAL, workflow_id="x"
        )
    assert [cause for cause, _, _ in marketing.suppressions] == ["unsubscribe"] and receipts.suppressions == []


async def test_the_confirmation_pages_post_and_a_multipart_post_are_taken_too(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """RFC 8058 lets a client post multipart/form-data; a browser's button posts urlencoded; an empty body
    is a POST all the same: the link, not the body, says who and what. Each link is one row."""
    base, _ = route
    to = fresh_address()
    multipart = await call(base, "POST", link(to), files={"List-Unsubscribe": (None, "One-Click")})
    empty = await call(base, "POST", link(to))
    assert multipart.status_code == empty.status_code == 200
    assert len(await rows(pool, to)) == 2


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("another recipient's fingerprint under this signature", 403),
        ("the category changed to transactional", 403),
        ("the last signature byte changed", 403),
        ("signed with a key we do not hold", 403),
        ("expired", 410),
        ("cut short", 400),
        ("not base64url", 400),
        ("too long", 400),
    ],
)
async def test_a_link_that_is_not_ours_stores_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture, case: str,
    status: int,
) -> None:  # fmt: skip
    """Forged, altered, cross-recipient, foreign-keyed, expired or garbled: GET and POST both get the refusal
    page with the rule's status (403, 410, 400), nothing is stored for either address, and the log line names
    the rule, never the token."""
    base, _ = route
    to, other = fresh_address(), fresh_address()
    bad = _not_ours(case, to, other)
    caplog.set_level(logging.INFO, logger="herald.receipts")
    for method in ("GET", "POST"):
        answer = await call(base, method, bad, data=ONE_CLICK if method == "POST" else None)
        assert answer.status_code == status, (method, answer.text)
        assert "This unsubscribe link does not work" in answer.text and bad not in answer.text
    assert await rows(pool, to) == [] and await rows(pool, other) == []
    assert bad not in caplog.text and to not in caplog.text
    assert "refused an unsubscribe link: token: " in caplog.text


async def test_an_oversized_body_is_refused_unread(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A POST body past MAX_UNSUBSCRIBE_BODY_BYTES gets 413 and nothing is stored, valid link or not."""
    base, _ = route
    to = fresh_address()
    answer = await call(base, "POST", link(to), content=b"x" * (MAX_UNSUBSCRIBE_BODY_BYTES + 1))
    assert answer.status_code == 413 and await rows(pool, to) == []


async def test_without_keys_every_link_is_refused(pool: AsyncConnectionPool) -> None:
    """A receipt server without HERALD_UNSUBSCRIBE_KEYS verifies nothing: 403 for a good link, nothing stored."""
    to = fresh_address()
    async with receipt_app(pool) as (base, _):
        answer = await call(base, "POST", link(to), data=ONE_CLICK)
    assert answer.status_code == 403 and "no key is configured" in answer.text
    assert await rows(pool, to) == []


async def test_with_the_database_away_a_post_gets_503_and_nothing_is_stored(pool: AsyncConnectionPool) -> None:
    """No PostgreSQL: 503 with a "try again" page within the pool's wait, never a 200 for an unstored request."""
    to = fresh_address()
    unreachable = open_pool("postgresql://herald@127.0.0.1:1/herald", timeout=1.0)
    await unreachable.open(wait=False)
    try:
        async with receipt_app(unreachable, unsubscribe=SETTINGS) as (base, _):
            answer = await call(base, "POST", link(to), data=ONE_CLICK)
    finally:
        await unreachable.close()
    assert answer.status_code == 503 and "try again" in answer.text
    assert await rows(pool, to) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=300), st.binary(max_size=230).map(lambda b: base64.urlsafe_b64encode(b).decode())))
async def test_any_path_is_a_page_never_a_server_error(route: tuple[str, RecordingClient], candidate: str) -> None:
    """Whatever follows /unsubscribe/ (any text, any bytes spelled base64url, padded or not): a 4xx page
    naming the rule (404 for a path that is no link, Starlette's 307 to drop a trailing slash), never a 500."""
    base, _ = route
    answer = await call(base, "GET", candidate)
    assert answer.status_code in (307, 400, 403, 404, 410), (candidate, answer.status_code)
