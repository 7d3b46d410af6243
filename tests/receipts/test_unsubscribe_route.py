"""GET and POST /unsubscribe/<token> over real HTTP into the real ledger: GET changes nothing, POST records
the unsubscribe once per link before answering, and a link that is not ours stores nothing.

The receipt app runs under uvicorn on 127.0.0.1 against the session's PostgreSQL; Temporal is a
recording stand-in (nothing is signalled for an unsubscribe: the policy gate reads it).
"""

from __future__ import annotations

import base64
import logging
import secrets
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from herald.core.send_policy import Category
from herald.ledger.policy_store import standing
from herald.ledger.store import open_pool
from herald.privacy.unsubscribe import TokenKeys, issue
from herald.receipts.app import MAX_UNSUBSCRIBE_BODY_BYTES
from herald.settings import UnsubscribeSettings
from tests import reads
from tests.depth import examples
from tests.intents import fresh_address
from tests.keys import SESSION_KEYRING
from tests.receipts.served import RecordingClient, receipt_app

KEY = secrets.token_bytes(32)
KEYS = TokenKeys({"u1": KEY}, "u1")
SETTINGS = UnsubscribeSettings(keys={"u1": KEY})
ONE_CLICK = {"List-Unsubscribe": "One-Click"}
URLENCODED = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
async def route(pool: AsyncConnectionPool) -> AsyncIterator[tuple[str, RecordingClient]]:
    async with receipt_app(pool, unsubscribe=SETTINGS) as served:
        yield served


def link(to: str, *, keys: TokenKeys = KEYS, days: float = 60, category: Category = Category.MARKETING) -> str:
    """A token for `to`, as the SMTP adapter writes it into a marketing e-mail."""
    expires = datetime.now(UTC) + timedelta(days=days)
    return issue(keys, fingerprint=SESSION_KEYRING.recipient(to), category=category, expires_at=expires)


async def call(base: str, method: str, token: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
        return await http.request(method, f"{base}/unsubscribe/{quote(token, safe='')}", **kwargs)


def _raw(token: str) -> bytearray:
    return bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def _spelled(raw: bytes) -> str:
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def _not_ours(case: str, to: str, other: str) -> str:
    """A link for `to` altered, forged or garbled as `case` says."""
    token = link(to)
    raw = _raw(token)
    if case == "another recipient's fingerprint under this signature":
        mine, theirs = (bytes.fromhex(SESSION_KEYRING.recipient(a).split(":")[1]) for a in (to, other))
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
    assert token not in page.text and to not in page.text and SESSION_KEYRING.recipient(to) not in page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert await reads.recipient_requests(pool, to) == [] and client.signals == []


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
    [row] = await reads.recipient_requests(pool, to)
    assert (row["channel"], row["request"], row["category"], row["source"]) == (
        "email", "unsubscribe", "marketing", "one_click",
    )  # fmt: skip
    assert len(row["source_ref"]) == 32 and row["source_ref"] not in token
    later = datetime.now(UTC) + timedelta(seconds=1)
    async with pool.connection() as conn:
        marketing = await standing(conn, at=later, recipient=to, channel="email", category=Category.MARKETING,
                                   workflow_id="x", fps=SESSION_KEYRING.recipient_candidates(to))  # fmt: skip
        receipts = await standing(conn, at=later, recipient=to, channel="email", category=Category.TRANSACTIONAL,
                                  workflow_id="x", fps=SESSION_KEYRING.recipient_candidates(to))  # fmt: skip
    assert [cause for cause, _, _ in marketing.suppressions] == ["unsubscribe"] and receipts.suppressions == []


async def test_a_multipart_post_is_taken_too(route: tuple[str, RecordingClient], pool: AsyncConnectionPool) -> None:
    """RFC 8058 lets a client post the pair as multipart/form-data (it says it SHOULD): taken like the
    urlencoded one, one row per link."""
    base, _ = route
    to = fresh_address()
    multipart = await call(base, "POST", link(to), files={"List-Unsubscribe": (None, "One-Click")})
    urlencoded = await call(base, "POST", link(to), data=ONE_CLICK)
    assert multipart.status_code == urlencoded.status_code == 200
    assert len(await reads.recipient_requests(pool, to)) == 2


class _Form(HTMLParser):
    """The confirmation page's form as a browser submits it: its method, its action, its named inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, str | None]] = []
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form":
            self.forms.append(((attributes.get("method") or "get").lower(), attributes.get("action")))
        elif tag in ("input", "button") and attributes.get("name"):
            self.fields.append((attributes["name"] or "", attributes.get("value") or ""))


async def test_the_confirmation_pages_button_posts_the_one_click_pair(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """The page's one form posts back to its own URL with exactly List-Unsubscribe=One-Click (the button adds
    no field); submitted as a browser would (urlencoded, the named controls), it is recorded."""
    base, _ = route
    to = fresh_address()
    token = link(to)
    form = _Form()
    form.feed((await call(base, "GET", token)).text)
    assert form.forms == [("post", None)] and form.fields == [("List-Unsubscribe", "One-Click")]
    answer = await call(base, "POST", token, content=urlencode(form.fields).encode(), headers=URLENCODED)
    assert answer.status_code == 200 and "You are unsubscribed" in answer.text
    assert len(await reads.recipient_requests(pool, to)) == 1


NOT_ONE_CLICK = [
    pytest.param({}, id="empty body, no content type"),
    pytest.param({"content": b"", "headers": URLENCODED}, id="empty urlencoded body"),
    pytest.param({"data": {"List-Unsubscribe": "Nope"}}, id="List-Unsubscribe=Nope"),
    pytest.param({"data": {"List-Unsubscribe": "one-click"}}, id="the value in lower case"),
    pytest.param({"data": {"list-unsubscribe": "One-Click"}}, id="the name in lower case"),
    pytest.param({"data": {"List-Unsubscribe": "One-Click", "also": "1"}}, id="a second field"),
    pytest.param({"content": b"List-Unsubscribe=One-Click&List-Unsubscribe=One-Click", "headers": URLENCODED},
                 id="the pair twice"),  # fmt: skip
    pytest.param({"content": b"List-Unsubscribe=One-Click\r\n", "headers": URLENCODED}, id="a line end after it"),
    pytest.param({"content": b"List-Unsubscribe=One-Click", "headers": {"Content-Type": "text/plain"}},
                 id="the pair as text/plain"),  # fmt: skip
    pytest.param({"content": b"List-Unsubscribe=One-Click"}, id="the pair with no content type"),
    pytest.param({"json": {"List-Unsubscribe": "One-Click"}}, id="the pair as JSON"),
    pytest.param({"files": {"List-Unsubscribe": ("x.txt", b"One-Click")}}, id="the value as an uploaded file"),
    pytest.param({"files": {"List-Unsubscribe": (None, "Nope")}}, id="multipart Nope"),
    pytest.param(
        {"content": b"List-Unsubscribe=One-Click", "headers": {"Content-Type": "multipart/form-data"}},
        id="multipart without a boundary",
    ),
]


@pytest.mark.parametrize("request_kwargs", NOT_ONE_CLICK)
async def test_a_post_without_the_one_click_pair_is_400_naming_it_and_records_nothing(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, caplog: pytest.LogCaptureFixture,
    request_kwargs: dict[str, Any],
) -> None:  # fmt: skip
    """A valid link posted with an empty body, another value or name, a second field, the pair twice or in
    another media type, or a file: 400 with a page naming List-Unsubscribe=One-Click and both encodings,
    nothing stored, the rule logged; the same link posted properly afterwards is then recorded."""
    base, _ = route
    to = fresh_address()
    token = link(to)
    caplog.set_level(logging.INFO, logger="herald.receipts")
    answer = await call(base, "POST", token, **request_kwargs)
    assert answer.status_code == 400, answer.text
    assert "List-Unsubscribe=One-Click" in answer.text and "multipart/form-data" in answer.text
    assert "application/x-www-form-urlencoded" in answer.text and token not in answer.text
    assert await reads.recipient_requests(pool, to) == []
    assert "refused an unsubscribe POST: request body: must be the one form field" in caplog.text
    assert token not in caplog.text
    assert (await call(base, "POST", token, data=ONE_CLICK)).status_code == 200
    assert len(await reads.recipient_requests(pool, to)) == 1


def _signed_for(category: Category, to: str) -> str:
    """A token laid out and signed with our key exactly as issue() would, for a category issue() refuses."""
    key_id, mac = SESSION_KEYRING.recipient(to).split(":")
    expiry = int((datetime.now(UTC) + timedelta(days=60)).timestamp())
    code = {Category.TRANSACTIONAL: 0, Category.ACCOUNT: 1}[category]
    signed = b"".join(
        (bytes([1, 2]), b"u1", bytes([len(key_id)]), key_id.encode(), bytes.fromhex(mac), bytes([code]),
         struct.pack(">I", expiry), secrets.token_bytes(16))
    )  # fmt: skip
    tag = KEYS.tag("u1", signed)
    assert tag is not None
    return _spelled(signed + tag)


@pytest.mark.parametrize("category", [Category.TRANSACTIONAL, Category.ACCOUNT])
async def test_a_signed_token_for_mail_without_a_link_is_refused(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, category: Category
) -> None:
    """No link is made for receipts or security notices (issue() refuses), and a token naming such a category,
    correctly signed with our key, is refused all the same: GET and POST 403, nothing stored."""
    base, _ = route
    to = fresh_address()
    with pytest.raises(ValueError, match="carries no unsubscribe link"):
        link(to, category=category)
    token = _signed_for(category, to)
    assert (await call(base, "POST", link(fresh_address()), data=ONE_CLICK)).status_code == 200  # the key works
    for method in ("GET", "POST"):
        answer = await call(base, method, token, data=ONE_CLICK if method == "POST" else None)
        assert answer.status_code == 403, (method, answer.text)
        assert "for transactional or account e-mail, which carries no unsubscribe link" in answer.text
    assert await reads.recipient_requests(pool, to) == []


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
    assert await reads.recipient_requests(pool, to) == [] and await reads.recipient_requests(pool, other) == []
    assert bad not in caplog.text and to not in caplog.text
    assert "refused an unsubscribe link: token: " in caplog.text


async def test_an_oversized_body_is_refused_unread(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool
) -> None:
    """A POST body past MAX_UNSUBSCRIBE_BODY_BYTES gets 413 and nothing is stored, valid link or not."""
    base, _ = route
    to = fresh_address()
    answer = await call(base, "POST", link(to), content=b"x" * (MAX_UNSUBSCRIBE_BODY_BYTES + 1))
    assert answer.status_code == 413 and await reads.recipient_requests(pool, to) == []


async def test_without_keys_every_link_is_refused(pool: AsyncConnectionPool) -> None:
    """A receipt server without HERALD_UNSUBSCRIBE_KEYS verifies nothing: 403 for a good link, nothing stored."""
    to = fresh_address()
    async with receipt_app(pool) as (base, _):
        answer = await call(base, "POST", link(to), data=ONE_CLICK)
    assert answer.status_code == 403 and "no key is configured" in answer.text
    assert await reads.recipient_requests(pool, to) == []


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
    assert await reads.recipient_requests(pool, to) == []


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=300), st.binary(max_size=230).map(lambda b: base64.urlsafe_b64encode(b).decode())))
async def test_any_path_is_a_page_never_a_server_error(route: tuple[str, RecordingClient], candidate: str) -> None:
    """Whatever follows /unsubscribe/ (any text, any bytes spelled base64url, padded or not): a 4xx page
    naming the rule (404 for a path that is no link, Starlette's 307 to drop a trailing slash), never a 500."""
    base, _ = route
    answer = await call(base, "GET", candidate)
    assert answer.status_code in (307, 400, 403, 404, 410), (candidate, answer.status_code)


# ---- search: POST bodies ------------------------------------------------------------------------------

_PAIR = ("List-Unsubscribe", "One-Click")
_FORM_TYPES = ["application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=UTF-8",
               "Application/X-WWW-Form-URLencoded"]  # fmt: skip
_BOUNDARY_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'()+_,-./:=?"


@st.composite
def _percent_spelled(draw: st.DrawFn, text: str) -> str:
    """`text` form-encoded with any of its characters written as %XX (upper or lower hex): the same field."""
    spelled = []
    for char in text:
        if draw(st.booleans()):
            code = f"{ord(char):02X}"
            spelled.append("%" + (code.lower() if draw(st.booleans()) else code))
        else:
            spelled.append(char)
    return "".join(spelled)


@st.composite
def _multipart(draw: st.DrawFn, fields: list[tuple[str, str]], *, close: bool = True) -> tuple[str, bytes]:
    """A multipart/form-data body for `fields`: a random boundary, maybe a preamble and an epilogue, maybe a
    text/plain Content-Type on each part; `close` False leaves out the closing delimiter."""
    boundary = draw(st.text(_BOUNDARY_CHARS, min_size=1, max_size=70))
    body = draw(st.sampled_from([b"", b"This is a preamble.\r\n"]))
    for name, value in fields:
        part_type = draw(st.sampled_from([b"", b"Content-Type: text/plain; charset=utf-8\r\n"]))
        body += b"--" + boundary.encode() + b"\r\n" + f'Content-Disposition: form-data; name="{name}"\r\n'.encode()
        body += part_type + b"\r\n" + value.encode() + b"\r\n"
    if close:
        body += b"--" + boundary.encode() + b"--\r\n" + draw(st.sampled_from([b"", b"epilogue\r\n"]))
    # Unquoted only where RFC 2045 lets a parameter be a bare token.
    quoted = draw(st.booleans()) or any(char in "()<>@,;:/[]?=" for char in boundary)
    return f'multipart/form-data; boundary={chr(34) + boundary + chr(34) if quoted else boundary}', body


def _the_pair() -> st.SearchStrategy[tuple[str | None, bytes, bool]]:
    """The pair in either encoding RFC 8058 allows, spelled every way the encodings allow: recorded."""
    urlencoded = st.tuples(
        st.sampled_from(_FORM_TYPES), _percent_spelled(_PAIR[0]), _percent_spelled(_PAIR[1])
    ).map(lambda parts: (parts[0], f"{parts[1]}={parts[2]}".encode(), True))
    multipart = _multipart([_PAIR]).map(lambda typed: (typed[0], typed[1], True))
    return urlencoded | multipart


# Urlencoded bodies one character or one rule away from the pair.
_NEAR_MISSES = [
    b"", b"List-Unsubscribe=One-Click&", b"List-Unsubscribe=One-Click ", b"List-Unsubscribe=One-Click\n",
    b"List-Unsubscribe==One-Click", b"List-Unsubscribe", b"List-Unsubscribe=One+Click", b"=One-Click",
    b"List-Unsubscribe=One-Click;x=1", b"\xffList-Unsubscribe=One-Click", b"List-Unsubscribe=Nope",
]  # fmt: skip


def _not_the_pair() -> st.SearchStrategy[tuple[str | None, bytes, bool]]:
    """Anything else: another name or value, more fields, another media type, a broken body: never recorded."""
    fields = st.tuples(st.text(max_size=30), st.text(max_size=30)).filter(lambda field: field != _PAIR)
    # Names a part header can hold as written (no quote, backslash or control character).
    header_text = st.text(st.characters(exclude_categories=("Cc", "Cs"), exclude_characters='"\\'), max_size=30)
    part_fields = st.tuples(header_text, st.text(max_size=30)).filter(lambda field: field != _PAIR)
    form_type = st.sampled_from(_FORM_TYPES)
    other_types = st.sampled_from([None, "text/plain", "application/json", "multipart/form-data"])
    return st.one_of(
        st.tuples(form_type, fields.map(lambda field: urlencode([field]).encode())),
        st.tuples(
            form_type,
            st.lists(fields, min_size=1, max_size=3)
            .flatmap(lambda more: st.permutations([_PAIR, *more]))
            .map(lambda all_fields: urlencode(all_fields).encode()),
        ),
        st.lists(part_fields, min_size=1, max_size=3).flatmap(lambda more: st.permutations([_PAIR, *more])).flatmap(
            _multipart
        ),
        part_fields.map(lambda field: [field]).flatmap(_multipart),
        _multipart([_PAIR], close=False),
        st.tuples(other_types, st.just(b"List-Unsubscribe=One-Click")),
        st.tuples(form_type, st.sampled_from(_NEAR_MISSES)),
        # Random bytes under any type: without '%' or the value itself, no spelling of the pair.
        st.tuples(st.one_of(form_type, other_types), st.binary(max_size=200)).filter(
            lambda typed: b"%" not in typed[1] and b"One-Click" not in typed[1]
        ),
    ).map(lambda typed: (typed[0], typed[1], False))


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.one_of(_the_pair(), _not_the_pair()))
async def test_only_the_exact_pair_in_either_encoding_records_and_no_body_is_a_server_error(
    route: tuple[str, RecordingClient], pool: AsyncConnectionPool, case: tuple[str | None, bytes, bool]
) -> None:
    """A POST to a valid link records an unsubscribe exactly when its body is List-Unsubscribe=One-Click,
    urlencoded (any %XX spelling, any charset parameter) or multipart (any boundary, preamble, epilogue);
    any other body (another name or value, more fields, a truncated multipart, another media type, random
    bytes) is answered 400 with nothing recorded; never a 500."""
    base, _ = route
    content_type, body, recorded = case
    to = fresh_address()
    headers = {"Content-Type": content_type} if content_type is not None else {}
    answer = await call(base, "POST", link(to), content=body, headers=headers)
    assert answer.status_code == (200 if recorded else 400), (content_type, body, answer.status_code)
    assert len(await reads.recipient_requests(pool, to)) == (1 if recorded else 0), (content_type, body)
