"""One-click unsubscribe for marketing e-mail (RFC 8058, RFC 2369): the signed token and the header pair.

Every e-mail of a category that is not transactional or account (marketing) carries::

    List-Unsubscribe: <https://hooks.example.com/unsubscribe/TOKEN>[, <mailto:...?subject=unsubscribe%20TOKEN>]
    List-Unsubscribe-Post: List-Unsubscribe=One-Click

A mail client's "Unsubscribe" button POSTs ``List-Unsubscribe=One-Click`` to that URL and nothing
else (RFC 8058 section 3.2: the List-Unsubscribe-Post value as the body, multipart/form-data or
application/x-www-form-urlencoded; ``is_one_click`` takes exactly that pair in either encoding and
nothing else, so a scanner's bare or empty POST unsubscribes nobody). The link is HTTPS, always: RFC
8058 section 3.1 requires it, and a mail client offers no one-click button for any other scheme.
RFC 8058 forbids cookies and authorisation on the request, so the URL alone must say who is
unsubscribing from what, must not be forgeable, and must not name the person to whoever reads it
(a link is logged by proxies, scanners and the recipient's own mail system). The token does that:
base64url (no padding) of::

    1 byte     format version (1)
    1 + n      the signing key's id (n bytes, ASCII)
    1 + m      the recipient's keyed fingerprint: its key id (m bytes), then its 32-byte HMAC
    + 32         (herald.privacy.fingerprints: not reversible without the fingerprint key)
    1 byte     category (0 transactional, 1 account, 2 marketing)
    4 bytes    expiry, whole seconds since the epoch, unsigned big-endian (to 2106)
    16 bytes   nonce, random: the request's reference, so a token posted twice is one request
    32 bytes   HMAC-SHA-256, under the signing key, of "herald unsubscribe token" NUL + all the above

Nothing in it is the address, and nothing in it can be changed without the signing key: a flipped
bit anywhere, the fingerprint of another person included, fails the HMAC. Only the canonical
base64url spelling is read, so no two strings are one token.

``read`` refuses a token by the first rule it breaks (``TokenRule``), in this order: too long, not
base64url, not this layout, a version this code does not read, a key it does not hold, a signature
that does not match, a category that carries no link, expired. Everything up to the key is only the
layout; the fields are believed only once the signature has matched. No token is ever made for a
category that carries no link (transactional, account: ``EXEMPT``), and one that names such a
category is refused even with a good signature (a leaked key, or a bug, must not let anyone turn
off receipts or security notices).

Keys: a keyring of their own (HERALD_UNSUBSCRIBE_KEYS, or _KEY_FILES; _ACTIVE_KEY signs), not the
fingerprint keys. The receipt server, which faces the internet, verifies tokens and needs nothing
more: with the fingerprint key it could also tell whether a guessed number or address is a given
fingerprint, which a leaked unsubscribe key must never allow. They also age differently: a
fingerprint key is kept for as long as anything recorded under it counts, an unsubscribe key only
for the lifetime of the links it signed (HERALD_UNSUBSCRIBE_TTL_DAYS after it stopped signing).
Rotation: add the new key, make it active, keep the old one until the last link it signed expires.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import hashlib
import hmac
import re
import secrets
import struct
from datetime import UTC, datetime, timedelta
from email.message import Message
from enum import Enum
from urllib.parse import parse_qsl, quote

from herald.core.outcomes import Frozen
from herald.core.send_policy import Category
from herald.privacy.key_sets import KEY_ID, KeySet
from herald.settings import UnsubscribeSettings, is_https_url

VERSION = 1
# The path on the receipt server: GET shows a confirmation, POST unsubscribes (herald.receipts.app).
PATH = "/unsubscribe/"
ONE_CLICK = "List-Unsubscribe=One-Click"
# The one form field a one-click POST carries (RFC 8058 section 3.2), name and value exactly.
ONE_CLICK_FIELD = ("List-Unsubscribe", "One-Click")
URLENCODED, MULTIPART = "application/x-www-form-urlencoded", "multipart/form-data"
HEADER, POST_HEADER = "List-Unsubscribe", "List-Unsubscribe-Post"
# RFC 5322's limit for a header line, CRLF excluded.
_MAX_LINE = 998
# Categories a person cannot unsubscribe from by link: what they must receive (receipts, security
# notices). Any other category, one added later included, carries the link.
EXEMPT = frozenset({Category.TRANSACTIONAL, Category.ACCOUNT})
NONCE_BYTES = 16  # 128 random bits: a reference no two links share
TAG_BYTES = 32
FINGERPRINT_MAC_BYTES = 32
_MAX_KEY_ID = 64
_FINGERPRINT = re.compile(r"([A-Za-z0-9._-]{1,64}):([0-9a-f]{64})")
# The longest token: both key ids at 64 characters (216 bytes, 288 characters). A longer path is
# refused before anything is decoded.
MAX_TOKEN_CHARS = 288
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_URL_TEXT = re.compile(r"[!-+\--;=?-~]+")  # printable ASCII but space, ',', '<' and '>'
_DOMAIN = b"herald unsubscribe token\x00"
_CATEGORY_CODES = {Category.TRANSACTIONAL: 0, Category.ACCOUNT: 1, Category.MARKETING: 2}
_CATEGORIES = {code: category for category, code in _CATEGORY_CODES.items()}
_MAX_EXPIRY = 2**32 - 1


class TokenRule(str, Enum):
    """Why a token is refused; the text is what the refusal page and the log say (never the token)."""

    TOO_LONG = f"token: longer than {MAX_TOKEN_CHARS} characters, so no link of ours"
    NOT_BASE64URL = "token: must be base64url (letters, digits, '-' and '_', no padding), as we write it"
    MALFORMED = "token: not the layout of an unsubscribe token"
    VERSION = "token: a format version this server does not read"
    UNKNOWN_KEY = "token: signed with a key this server does not hold (never ours, or retired)"
    FORGED = "token: the signature does not match (the link was altered or forged)"
    NO_LINK_CATEGORY = "token: for transactional or account e-mail, which carries no unsubscribe link"
    EXPIRED = "token: expired"

    @property
    def status_code(self) -> int:
        """The HTTP answer: 400 for what is no token, 403 for what is not ours, 410 for what was."""
        if self is TokenRule.EXPIRED:
            return 410
        if self in (TokenRule.UNKNOWN_KEY, TokenRule.FORGED, TokenRule.NO_LINK_CATEGORY):
            return 403
        return 400


class TokenRefused(ValueError):
    """A token that unsubscribes nobody; ``rule`` says why."""

    def __init__(self, rule: TokenRule) -> None:
        self.rule = rule
        super().__init__(rule.value)


class UnsubscribeToken(Frozen):
    """A verified token: whose unsubscribe it is and from what."""

    key_id: str
    # The recipient's keyed fingerprint, as the ledger names them ("<key id>:<64 hex>").
    fingerprint: str
    category: Category
    expires_at: datetime
    nonce: str  # 32 hex digits

    @property
    def reference(self) -> str:
        """The request's reference in recipient_requests (source one_click): once per token."""
        return self.nonce


class TokenKeys(KeySet):
    """Unsubscribe keys: id -> 32 random bytes; the active one signs, every one verifies."""

    KIND = "unsubscribe key"

    @classmethod
    def from_settings(cls, settings: UnsubscribeSettings) -> TokenKeys | None:
        """The configured keys, or None when there are none (no link can be made or verified)."""
        return cls.configured(settings.keys, settings.active_key)

    def tag(self, key_id: str, signed: bytes) -> bytes | None:
        """The HMAC of `signed` under the key `key_id`; None when that key is not held."""
        key = self._keys.get(key_id)
        return None if key is None else hmac.new(key, _DOMAIN + signed, hashlib.sha256).digest()


def issue(
    keys: TokenKeys, *, fingerprint: str, category: Category, expires_at: datetime, nonce: bytes | None = None
) -> str:
    """A token for the recipient with this keyed fingerprint and this category, signed by the active key.

    Raises:
        ValueError: the category carries no link (transactional, account), the fingerprint is not a
            keyed one (``<key id>:<64 hex>``), or the expiry is outside what four bytes of seconds hold.
    """
    if not needs_link(category):
        raise ValueError(f"category: {category.value} e-mail carries no unsubscribe link, so no token is made for it")
    match = _FINGERPRINT.fullmatch(fingerprint)
    if match is None:
        raise ValueError("fingerprint: must be a keyed fingerprint, <key id>:<64 hex>")
    expiry = int(expires_at.timestamp())
    if not 0 <= expiry <= _MAX_EXPIRY:
        raise ValueError("expires_at: must be between 1970 and 2106")
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce: must be {NONCE_BYTES} bytes")
    signing, fingerprint_key = keys.active_key_id.encode("ascii"), match.group(1).encode("ascii")
    signed = b"".join(
        (
            bytes([VERSION, len(signing)]),
            signing,
            bytes([len(fingerprint_key)]),
            fingerprint_key,
            bytes.fromhex(match.group(2)),
            bytes([_CATEGORY_CODES[category]]),
            struct.pack(">I", expiry),
            nonce,
        )
    )
    tag = keys.tag(keys.active_key_id, signed)
    assert tag is not None  # the active key is held by construction
    return _encode(signed + tag)


def read(keys: TokenKeys, token: str, *, now: datetime) -> UnsubscribeToken:
    """The token's recipient and category, once its signature matched and it has not expired.

    Raises:
        TokenRefused: the first ``TokenRule`` it breaks.
    """
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenRefused(TokenRule.TOO_LONG)
    raw = _decode(token)
    if not raw or raw[0] != VERSION:
        raise TokenRefused(TokenRule.VERSION if raw else TokenRule.MALFORMED)
    reader = _Reader(raw, 1)
    key_id = reader.key_id()
    fingerprint_key = reader.key_id()
    fingerprint_mac = reader.take(FINGERPRINT_MAC_BYTES)
    category_code = reader.take(1)[0]
    (expiry,) = struct.unpack(">I", reader.take(4))
    nonce = reader.take(NONCE_BYTES)
    signed_length = reader.at
    tag = reader.take(TAG_BYTES)
    reader.end()
    expected = keys.tag(key_id, raw[:signed_length])
    if expected is None:
        raise TokenRefused(TokenRule.UNKNOWN_KEY)
    if not hmac.compare_digest(tag, expected):
        raise TokenRefused(TokenRule.FORGED)
    category = _CATEGORIES.get(category_code)
    if category is None:  # signed by us, so never seen; refused rather than guessed
        raise TokenRefused(TokenRule.MALFORMED)
    if not needs_link(category):  # never issued: whoever signed it, receipts stay on
        raise TokenRefused(TokenRule.NO_LINK_CATEGORY)
    expires_at = datetime.fromtimestamp(expiry, tz=UTC)
    if now >= expires_at:
        raise TokenRefused(TokenRule.EXPIRED)
    return UnsubscribeToken(
        key_id=key_id,
        fingerprint=f"{fingerprint_key}:{fingerprint_mac.hex()}",
        category=category,
        expires_at=expires_at,
        nonce=nonce.hex(),
    )


def needs_link(category: Category) -> bool:
    """Whether an e-mail of this category must carry a one-click unsubscribe."""
    return category not in EXEMPT


class UnsubscribeLinks:
    """The link every marketing e-mail carries: what the SMTP adapter needs to write the header pair.

    Args:
        keys: the keys; the active one signs.
        base_url: the public base the receipt server's /unsubscribe/ path is reached at (None: the
            receipt server's public URL, as each message names it).
        mailto: an address that takes unsubscribe requests by mail, also listed (None: none).
        ttl: how long a link works after its message was sent.
    """

    def __init__(self, keys: TokenKeys, *, base_url: str | None, mailto: str | None, ttl: timedelta) -> None:
        self._keys = keys
        self._base_url = base_url.rstrip("/") if base_url else None
        self._mailto = mailto
        self._ttl = ttl

    @classmethod
    def from_settings(cls, settings: UnsubscribeSettings) -> UnsubscribeLinks | None:
        """The links the settings describe; None without keys."""
        keys = TokenKeys.from_settings(settings)
        if keys is None:
            return None
        return cls(keys, base_url=settings.url, mailto=settings.mailto, ttl=timedelta(days=settings.ttl_days))

    def header(self, *, fingerprint: str, category: Category, receipts_url: str | None, now: datetime) -> str:
        """The List-Unsubscribe value for one message: the HTTPS link first (RFC 8058 posts to the
        first one), then the mailto, whose subject carries the same token, folded between the two
        (never inside the angle brackets: RFC 2369). Written verbatim, never refolded (the SMTP adapter).

        Raises:
            NoLink: there is no base URL, one that is not https://, or one too long for a header line.
        """
        base = self._base_url or (receipts_url.rstrip("/") if receipts_url else None)
        if base is None:
            raise NoLink("HERALD_UNSUBSCRIBE_URL: required when the receipt server's public URL is unknown")
        # Settings refuse an http:// base at load; this holds for a base they never saw (a message's own).
        if not is_https_url(base):
            raise NoLink(
                "HERALD_UNSUBSCRIBE_URL: the link must be https:// (RFC 8058), and neither it nor the "
                "receipt server's public URL it falls back to is"
            )
        if not _URL_TEXT.fullmatch(base):  # a space, a line break or a bracket would break the header
            raise NoLink("HERALD_UNSUBSCRIBE_URL: must be printable ASCII without spaces, '<', '>' or ','")
        token = issue(self._keys, fingerprint=fingerprint, category=category, expires_at=now + self._ttl)
        value = f"<{base}{PATH}{token}>"
        if len(HEADER) + 2 + len(value) + 1 > _MAX_LINE:
            raise NoLink(f"HERALD_UNSUBSCRIBE_URL: too long for a mail header line ({_MAX_LINE} characters)")
        if self._mailto is not None:
            value += f",\r\n <mailto:{quote(self._mailto, safe='@')}?subject={quote(f'unsubscribe {token}')}>"
        return value


class NoLink(ValueError):
    """No link can be written for this message; the text names the setting and the rule."""


def is_one_click(content_type: str | None, body: bytes) -> bool:
    """Whether a POST body is RFC 8058's one-click request: the one field ``List-Unsubscribe=One-Click``,
    name and value exactly, form-encoded or multipart/form-data (a charset parameter or a multipart
    preamble changes nothing). An empty body, another value, a second field, a file part or any other
    media type is not: it unsubscribes nobody."""
    media_type, boundary = _media_type(content_type)
    if media_type == URLENCODED:
        return _urlencoded_fields(body) == [ONE_CLICK_FIELD]
    if media_type == MULTIPART and boundary is not None:
        return _multipart_fields(boundary, body) == [ONE_CLICK_FIELD]
    return False


# RFC 2046's boundary: 1-70 of these characters, not ending in a space.
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]")
_MAX_FIELDS = 8  # the request has one; a few more are read only to be refused


def _media_type(content_type: str | None) -> tuple[str | None, str | None]:
    """The Content-Type's media type (lower case) and its boundary parameter, when it has a usable one."""
    if not content_type:
        return None, None
    # compat32 reads a parameter as written: the newer header parser takes an apostrophe in an unquoted
    # boundary (a token character) for RFC 2231's charset'language' mark and reads another boundary.
    header = Message(policy=email.policy.compat32)
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not _BOUNDARY.fullmatch(boundary):
        boundary = None
    return header.get_content_type(), boundary


def _urlencoded_fields(body: bytes) -> list[tuple[str, str]] | None:
    try:
        return parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=True, max_num_fields=_MAX_FIELDS,
            errors="strict",
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError):  # not UTF-8, a field without '=', too many fields
        return None


def _multipart_fields(boundary: str, body: bytes) -> list[tuple[str, str]] | None:
    """The fields of a multipart/form-data body as (name, text); None for anything the stdlib parser
    reports a defect in, a part that is no plain form field (a file, another type, an encoding), or
    more parts than a one-click request has reason to hold."""
    head = f'Content-Type: {MULTIPART}; boundary="{boundary}"\r\n\r\n'.encode("ascii")
    message = email.message_from_bytes(head + body, policy=email.policy.HTTP)
    if message.defects or not message.is_multipart():
        return None
    parts = message.get_payload()
    if not isinstance(parts, list) or len(parts) > _MAX_FIELDS:
        return None
    fields = []
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        plain = part.get_content_type() == "text/plain" and part.get("Content-Transfer-Encoding") is None
        if part.defects or part.get_content_disposition() != "form-data" or not isinstance(name, str):
            return None
        if not plain or part.get_filename() is not None or part.is_multipart():
            return None
        try:
            fields.append((name, part.get_payload(decode=True).decode("utf-8")))
        except (AttributeError, UnicodeDecodeError):
            return None
    return fields


class _Reader:
    """Fields of a decoded token, front to back; any shortfall or excess is MALFORMED."""

    def __init__(self, raw: bytes, at: int) -> None:
        self._raw, self.at = raw, at

    def take(self, count: int) -> bytes:
        if self.at + count > len(self._raw):
            raise TokenRefused(TokenRule.MALFORMED)
        part = self._raw[self.at : self.at + count]
        self.at += count
        return part

    def key_id(self) -> str:
        length = self.take(1)[0]
        if not 1 <= length <= _MAX_KEY_ID:
            raise TokenRefused(TokenRule.MALFORMED)
        text = self.take(length).decode("ascii", errors="replace")
        if not KEY_ID.fullmatch(text):
            raise TokenRefused(TokenRule.MALFORMED)
        return text

    def end(self) -> None:
        if self.at != len(self._raw):
            raise TokenRefused(TokenRule.MALFORMED)


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(token: str) -> bytes:
    """The bytes of a canonical base64url spelling (re-encoding gives the same string back)."""
    if not _BASE64URL.fullmatch(token) or len(token) % 4 == 1:
        raise TokenRefused(TokenRule.NOT_BASE64URL)
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise TokenRefused(TokenRule.NOT_BASE64URL) from None
    if _encode(raw) != token:  # spare bits set: another spelling of some token, never ours
        raise TokenRefused(TokenRule.NOT_BASE64URL)
    return raw
