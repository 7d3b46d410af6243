"""The one-click unsubscribe token: what it carries, and every way a string that is not one is refused."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.send_policy import Category
from herald.privacy.unsubscribe import (
    MAX_TOKEN_CHARS,
    NoLink,
    TokenKeys,
    TokenRefused,
    TokenRule,
    UnsubscribeLinks,
    is_one_click,
    issue,
    needs_link,
    read,
)
from herald.settings import InvalidSetting, UnsubscribeSettings, load_settings
from tests.depth import examples

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(days=60)
FINGERPRINT = "session:" + "ab" * 32
OTHER_FINGERPRINT = "session:" + "cd" * 32
KEYS = TokenKeys({"u1": secrets.token_bytes(32)}, "u1")


def _token(keys: TokenKeys = KEYS, fingerprint: str = FINGERPRINT, category: Category = Category.MARKETING) -> str:
    return issue(keys, fingerprint=fingerprint, category=category, expires_at=LATER)


def _raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def _spelled(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _refused(token: str, keys: TokenKeys = KEYS, now: datetime = NOW) -> TokenRule:
    with pytest.raises(TokenRefused) as refused:
        read(keys, token, now=now)
    return refused.value.rule


def test_a_token_reads_back_as_its_recipient_category_and_expiry_and_names_no_address() -> None:
    """A token carries the keyed fingerprint, the category, the expiry and a fresh 128-bit nonce, and no '@'."""
    token = _token()
    read_back = read(KEYS, token, now=NOW)
    assert read_back.fingerprint == FINGERPRINT and read_back.category is Category.MARKETING
    assert read_back.expires_at == LATER and read_back.key_id == "u1"
    assert len(read_back.reference) == 32 and read_back.reference != read(KEYS, _token(), now=NOW).reference
    assert "@" not in token and len(token) <= MAX_TOKEN_CHARS


def test_a_signature_over_another_fingerprint_fails() -> None:
    """Someone else's fingerprint written into a valid token (its signature kept) is refused as forged."""
    raw = _raw(_token())
    mine, theirs = bytes.fromhex("ab" * 32), bytes.fromhex("cd" * 32)
    assert raw.count(mine) == 1
    assert _refused(_spelled(raw.replace(mine, theirs))) is TokenRule.FORGED
    assert read(KEYS, _token(fingerprint=OTHER_FINGERPRINT), now=NOW).fingerprint == OTHER_FINGERPRINT


def test_another_category_written_into_a_token_fails() -> None:
    """A marketing token turned into a transactional one (the category byte changed) is refused as forged."""
    token = _token()
    raw = bytearray(_raw(token))
    category_at = len(raw) - 32 - 16 - 4 - 1
    assert raw[category_at] == 2
    raw[category_at] = 0
    assert _refused(_spelled(bytes(raw))) is TokenRule.FORGED


def test_an_expired_token_is_refused_from_its_expiry_on() -> None:
    """Valid to the last second before its expiry, refused (410) from it on."""
    token = _token()
    assert read(KEYS, token, now=LATER - timedelta(seconds=1)).category is Category.MARKETING
    assert _refused(token, now=LATER) is TokenRule.EXPIRED
    assert TokenRule.EXPIRED.status_code == 410


def test_rotation_keeps_old_links_working_until_their_key_is_removed() -> None:
    """A token signed by the previous key still reads once a new key signs; removing the old key refuses it."""
    old, new = secrets.token_bytes(32), secrets.token_bytes(32)
    before = _token(TokenKeys({"old": old}, "old"))
    rotated = TokenKeys({"old": old, "new": new}, "new")
    assert read(rotated, before, now=NOW).key_id == "old"
    assert read(rotated, _token(rotated), now=NOW).key_id == "new"
    assert _refused(before, TokenKeys({"new": new}, "new")) is TokenRule.UNKNOWN_KEY
    # The same id with another secret: a forgery, not an unknown key.
    assert _refused(before, TokenKeys({"old": new}, "old")) is TokenRule.FORGED


def test_another_spelling_of_a_token_is_refused() -> None:
    """Spare bits set in the last character decode to the same bytes: refused, so one token has one spelling."""
    token = _token()
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spare = (1 << (6 - (len(_raw(token)) * 8) % 6)) - 1 if (len(_raw(token)) * 8) % 6 else 0
    assert spare, "the layout's length leaves spare bits"
    last = alphabet.index(token[-1])
    other = token[:-1] + alphabet[last ^ 1]
    assert _raw(other) == _raw(token)
    assert _refused(other) is TokenRule.NOT_BASE64URL


@pytest.mark.parametrize(
    ("token", "rule"),
    [
        ("", TokenRule.NOT_BASE64URL),
        ("A" * (MAX_TOKEN_CHARS + 1), TokenRule.TOO_LONG),
        ("not a token!", TokenRule.NOT_BASE64URL),
        ("AQ==", TokenRule.NOT_BASE64URL),  # padding is not how we write it
        ("Ag", TokenRule.VERSION),  # version 2
        ("AQ", TokenRule.MALFORMED),  # version 1 and nothing else
    ],
)
def test_strings_that_are_no_token_are_refused_with_their_rule(token: str, rule: TokenRule) -> None:
    """Empty, overlong, outside the alphabet, padded, another version, cut short: each refused (400) by its rule."""
    assert _refused(token) is rule
    assert rule.status_code == 400


@settings(max_examples=examples(400), deadline=None)
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_changed_byte_is_refused(position: int, flip: int) -> None:
    """Any one byte of a valid token changed, wherever it is, and the token is refused, never read."""
    raw = bytearray(_raw(_token()))
    raw[position % len(raw)] ^= flip
    with pytest.raises(TokenRefused):
        read(KEYS, _spelled(bytes(raw)), now=NOW)


@settings(max_examples=examples(1000), deadline=None)
@given(st.one_of(st.text(max_size=400), st.binary(max_size=300).map(_spelled)))
def test_any_string_is_refused_with_a_rule_or_is_a_token(candidate: str) -> None:
    """Whatever arrives in the path (any text, any bytes spelled base64url) is a token or a TokenRefused, never
    another exception (the route answers 4xx with the rule, never 500)."""
    try:
        token = read(KEYS, candidate, now=NOW)
    except TokenRefused as refused:
        assert refused.rule in TokenRule and 400 <= refused.rule.status_code < 500
    else:
        assert token.category in Category


def test_only_transactional_and_account_mail_goes_without_a_link() -> None:
    """Marketing (and any category added later) carries a link; transactional and account mail do not."""
    assert [needs_link(category) for category in Category] == [
        category not in (Category.TRANSACTIONAL, Category.ACCOUNT) for category in Category
    ]
    assert needs_link(Category.MARKETING)


def test_the_header_names_the_https_link_first_and_the_mailto_with_the_same_token() -> None:
    """List-Unsubscribe: <base/unsubscribe/TOKEN>, then <mailto:...?subject=unsubscribe%20TOKEN> on a folded line."""
    links = UnsubscribeLinks(
        KEYS, base_url="https://hooks.example.com/", mailto="leave@example.com", ttl=timedelta(days=60)
    )
    value = links.header(fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url=None, now=NOW)
    first, second = value.split(",\r\n ")
    assert first.startswith("<https://hooks.example.com/unsubscribe/") and first.endswith(">")
    token = first.removeprefix("<https://hooks.example.com/unsubscribe/").removesuffix(">")
    assert second == f"<mailto:leave@example.com?subject=unsubscribe%20{token}>"
    assert read(KEYS, token, now=NOW + timedelta(days=59)).fingerprint == FINGERPRINT


def test_the_link_defaults_to_the_receipt_servers_url_and_refuses_what_would_break_the_header() -> None:
    """Without HERALD_UNSUBSCRIBE_URL the message's receipt URL is the base; none, or one with a space, is NoLink."""
    links = UnsubscribeLinks(KEYS, base_url=None, mailto=None, ttl=timedelta(days=60))
    value = links.header(
        fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url="https://r.example/", now=NOW
    )
    assert value.startswith("<https://r.example/unsubscribe/") and "mailto" not in value
    for receipts_url in (None, "https://r.example/a b", "https://r.example/" + "x" * 900):
        with pytest.raises(NoLink, match="^HERALD_UNSUBSCRIBE_URL: "):
            links.header(fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url=receipts_url, now=NOW)


@pytest.mark.parametrize(
    ("base_url", "receipts_url"),
    [
        (None, "http://127.0.0.1:8235"),
        (None, "HTTP://hooks.example.com"),
        (None, "ftp://hooks.example.com"),
        (None, "https://"),
        (None, "//hooks.example.com"),
        ("http://u.example.com", "https://r.example"),  # past the settings (a copy, a hand-built section)
    ],
)
def test_a_link_is_https_or_not_written(base_url: str | None, receipts_url: str) -> None:
    """RFC 8058 clients post only to https: a base that is not https:// with a host (the receipt server's
    http URL as the fallback, or a configured one that escaped the settings' rule) is NoLink, never a header."""
    links = UnsubscribeLinks(KEYS, base_url=base_url, mailto=None, ttl=timedelta(days=60))
    with pytest.raises(NoLink, match=r"^HERALD_UNSUBSCRIBE_URL: the link must be https:// \(RFC 8058\)"):
        links.header(fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url=receipts_url, now=NOW)


def _keys_env(**more: str) -> dict[str, str]:
    return {"HERALD_UNSUBSCRIBE_KEYS": f"u1:{base64.b64encode(secrets.token_bytes(32)).decode()}", **more}


@pytest.mark.parametrize(
    "env",
    [
        _keys_env(),  # the receipt server's default public URL: http://127.0.0.1:8235
        _keys_env(HERALD_RECEIPT_PUBLIC_URL="http://hooks.example.com"),
        _keys_env(HERALD_RECEIPT_PUBLIC_URL="http://hooks.example.com", HERALD_UNSUBSCRIBE_URL=""),  # blank: unset
    ],
)
def test_settings_refuse_an_http_fallback_for_the_links_at_load(env: dict[str, str]) -> None:
    """Keys to sign links, no HERALD_UNSUBSCRIBE_URL, and a receipt server URL that is not https://: refused
    when the settings load, one line naming HERALD_UNSUBSCRIBE_URL and the rule, the key never in it."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings(env)
    assert str(refused.value) == (
        "HERALD_UNSUBSCRIBE_URL: required when HERALD_UNSUBSCRIBE_KEYS are set and HERALD_RECEIPT_PUBLIC_URL, "
        "which the links fall back to, is not https:// (RFC 8058: mail clients post only to HTTPS); set an "
        "https:// URL, e.g. https://hooks.example.com"
    )
    assert env["HERALD_UNSUBSCRIBE_KEYS"].split(":")[1] not in str(refused.value)


@pytest.mark.parametrize(
    "env",
    [
        _keys_env(HERALD_UNSUBSCRIBE_URL="https://unsubscribe.example.com"),  # http callbacks, https links
        _keys_env(HERALD_RECEIPT_PUBLIC_URL="https://hooks.example.com"),  # the fallback is https
        {"HERALD_RECEIPT_PUBLIC_URL": "http://hooks.example.com"},  # no keys: no link is ever written
    ],
)
def test_settings_take_an_https_link_base_or_no_keys(env: dict[str, str]) -> None:
    """An https:// HERALD_UNSUBSCRIBE_URL beside an http:// receipt URL, an https:// fallback, or no keys: loaded."""
    loaded = load_settings(env)
    links = UnsubscribeLinks.from_settings(loaded.email.unsubscribe)
    if links is not None:
        value = links.header(
            fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url=loaded.receipts.public_url, now=NOW
        )
        assert value.startswith("<https://")


@pytest.mark.parametrize("category", [Category.TRANSACTIONAL, Category.ACCOUNT])
def test_no_token_is_made_or_read_for_mail_that_carries_no_link(category: Category) -> None:
    """issue() refuses transactional and account tokens; one signed with our key all the same (a leaked key,
    an older build) reads as NO_LINK_CATEGORY (403), never as a request to stop receipts."""
    with pytest.raises(ValueError, match=f"^category: {category.value} e-mail carries no unsubscribe link"):
        _token(category=category)
    raw = bytearray(_raw(_token()))
    category_at = len(raw) - 32 - 16 - 4 - 1
    raw[category_at] = {Category.TRANSACTIONAL: 0, Category.ACCOUNT: 1}[category]
    signed = bytes(raw[:-32])
    tag = KEYS.tag("u1", signed)
    assert tag is not None
    assert _refused(_spelled(signed + tag)) is TokenRule.NO_LINK_CATEGORY
    assert TokenRule.NO_LINK_CATEGORY.status_code == 403


def test_the_settings_read_the_keys_into_both_sections_and_refuse_what_cannot_work(tmp_path) -> None:
    """One set of variables reaches the e-mail section (signs) and the receipt section (verifies); a bad
    value is one line naming its variable, the key never in it."""
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    loaded = load_settings(
        {"HERALD_UNSUBSCRIBE_KEYS": f"u1:{key}", "HERALD_UNSUBSCRIBE_TTL_DAYS": "45",
         "HERALD_RECEIPT_PUBLIC_URL": "https://r.example"}
    )  # fmt: skip
    assert loaded.email.unsubscribe == loaded.receipts.unsubscribe
    assert loaded.email.unsubscribe.ttl_days == 45 and loaded.email.unsubscribe.url is None
    signer = UnsubscribeLinks.from_settings(loaded.email.unsubscribe)
    verifier = TokenKeys.from_settings(loaded.receipts.unsubscribe)
    assert signer is not None and verifier is not None and key not in repr(verifier)
    token = signer.header(
        fingerprint=FINGERPRINT, category=Category.MARKETING, receipts_url=loaded.receipts.public_url, now=NOW
    )
    assert read(verifier, token.split("/unsubscribe/")[1].rstrip(">"), now=NOW).fingerprint == FINGERPRINT
    assert UnsubscribeLinks.from_settings(UnsubscribeSettings()) is None


_PART = b'Content-Disposition: form-data; name="List-Unsubscribe"\r\n\r\nOne-Click\r\n'


@pytest.mark.parametrize(
    ("content_type", "body", "one_click"),
    [
        ("application/x-www-form-urlencoded", b"List-Unsubscribe=One-Click", True),
        ("application/x-www-form-urlencoded; charset=UTF-8", b"List-Unsubscribe=One%2dClick", True),
        ("multipart/form-data; boundary=b1", b"--b1\r\n" + _PART + b"--b1--\r\n", True),
        # An apostrophe is a token character: a bare boundary may hold one (the stdlib's newer header
        # parser read it as RFC 2231's charset'language' mark and lost the boundary).
        ("multipart/form-data; boundary=o'k", b"--o'k\r\n" + _PART + b"--o'k--\r\n", True),
        ('multipart/form-data; boundary="a b:c"', b"--a b:c\r\n" + _PART + b"--a b:c--\r\n", True),
        ("multipart/form-data; boundary=b1", b"--b1\r\n" + _PART, False),  # no closing delimiter
        ("multipart/form-data; boundary=b2", b"--b1\r\n" + _PART + b"--b1--\r\n", False),
        ("multipart/form-data; boundary*=utf-8''b1", b"--b1\r\n" + _PART + b"--b1--\r\n", False),
        ("multipart/form-data", b"--b1\r\n" + _PART + b"--b1--\r\n", False),
        ("application/x-www-form-urlencoded", b"", False),
        ("application/x-www-form-urlencoded", b"List-Unsubscribe=Nope", False),
        ("text/plain", b"List-Unsubscribe=One-Click", False),
        (None, b"List-Unsubscribe=One-Click", False),
    ],
)
def test_is_one_click_takes_the_pair_in_either_encoding_and_nothing_else(
    content_type: str | None, body: bytes, one_click: bool
) -> None:
    """RFC 8058's body, form-encoded or multipart (any legal boundary, quoted or bare): one-click; an empty body,
    another value, another media type, a multipart body that is not closed or names another boundary: not."""
    assert is_one_click(content_type, body) is one_click
