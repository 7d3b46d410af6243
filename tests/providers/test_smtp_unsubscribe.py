"""The SMTP adapter's one-click unsubscribe headers, judged on the bytes a real SMTP server received."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import Envelope, Session

from devstack.processes import free_port
from herald.core.message import Channel, Message
from herald.core.outcomes import Accepted, Rejected
from herald.core.send_policy import Category
from herald.privacy.unsubscribe import TokenKeys, read
from herald.providers.port import OutboundMessage
from herald.providers.smtp import SmtpAdapter
from herald.settings import EmailSettings, UnsubscribeSettings
from tests.keys import SESSION_KEYRING

KEY = secrets.token_bytes(32)
RECEIPTS_URL = "https://hooks.example.com"


class Capture:
    """An SMTP server that keeps the DATA bytes of every message, by recipient."""

    def __init__(self) -> None:
        self.received: dict[str, list[bytes]] = {}

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:  # noqa: N802
        for rcpt in envelope.rcpt_tos:
            self.received.setdefault(rcpt, []).append(bytes(envelope.original_content or b""))
        return "250 OK"


@pytest.fixture(scope="module")
async def relay() -> AsyncIterator[tuple[Capture, int]]:
    capture, port = Capture(), free_port()
    controller = Controller(capture, hostname="127.0.0.1", port=port)
    controller.start()
    yield capture, port
    controller.stop()


def _adapter(port: int, **unsubscribe: Any) -> SmtpAdapter:
    keys = {"keys": {"u1": KEY}} if unsubscribe.pop("keys", True) else {}
    config = EmailSettings(
        host="127.0.0.1", port=port, security="none", from_address="news@herald.example",
        message_id_domain="mail.herald.example", unsubscribe=UnsubscribeSettings(**keys, **unsubscribe),
    )  # fmt: skip
    return SmtpAdapter(config, keyring=SESSION_KEYRING)


def _message(to: str, category: Category) -> OutboundMessage:
    message = Message(
        channel=Channel.EMAIL, recipient=to, subject="New classes this week", body="Spin, yoga and more.", category=category
    )
    return OutboundMessage(message=message, attempt_ref=f"att_{secrets.token_hex(12)}_1", receipts_url=RECEIPTS_URL)


def _headers(raw: bytes) -> list[str]:
    """The header block's physical lines."""
    return raw.split(b"\r\n\r\n", 1)[0].decode("ascii").split("\r\n")


def _fresh() -> str:
    return f"member.{secrets.token_hex(5)}@example.com"


async def test_marketing_mail_carries_the_pair_each_on_one_line_and_the_token_names_its_reader(
    relay: tuple[Capture, int],
) -> None:
    """The relay receives `List-Unsubscribe: <https://.../unsubscribe/TOKEN>` whole on one line (no RFC 2047
    encoded words, no fold inside the brackets) and `List-Unsubscribe-Post: List-Unsubscribe=One-Click`; the
    token reads back as the recipient's keyed fingerprint, marketing, working for 60 days."""
    capture, port = relay
    to = _fresh()
    outcome = await _adapter(port).submit(_message(to, Category.MARKETING))
    assert isinstance(outcome.result, Accepted)
    [raw] = capture.received[to]
    lines = _headers(raw)
    [link] = [line for line in lines if line.startswith("List-Unsubscribe: ")]
    match = re.fullmatch(r"List-Unsubscribe: <https://hooks\.example\.com/unsubscribe/([A-Za-z0-9_-]+)>", link)
    assert match is not None, link
    assert "List-Unsubscribe-Post: List-Unsubscribe=One-Click" in lines
    assert b"=?" not in raw.split(b"\r\n\r\n", 1)[0] and to.encode() not in match.group(1).encode()
    token = read(TokenKeys({"u1": KEY}, "u1"), match.group(1), now=datetime.now(UTC))
    assert token.fingerprint == SESSION_KEYRING.recipient(to) and token.category is Category.MARKETING
    assert timedelta(days=59) < token.expires_at - datetime.now(UTC) <= timedelta(days=60)


async def test_a_configured_mailto_follows_on_a_folded_line_with_the_same_token(relay: tuple[Capture, int]) -> None:
    """With HERALD_UNSUBSCRIBE_MAILTO and HERALD_UNSUBSCRIBE_URL: the https link on the header's line, the mailto
    on the continuation line, folded between the two, never inside the brackets."""
    capture, port = relay
    to = _fresh()
    adapter = _adapter(port, mailto="leave@herald.example", url="https://leave.example.com")
    assert isinstance((await adapter.submit(_message(to, Category.MARKETING))).result, Accepted)
    lines = _headers(capture.received[to][0])
    at = next(i for i, line in enumerate(lines) if line.startswith("List-Unsubscribe: "))
    token = lines[at].removeprefix("List-Unsubscribe: <https://leave.example.com/unsubscribe/").removesuffix(">,")
    assert lines[at + 1] == f" <mailto:leave@herald.example?subject=unsubscribe%20{token}>"


@pytest.mark.parametrize("category", [Category.TRANSACTIONAL, Category.ACCOUNT])
async def test_transactional_and_account_mail_carry_neither_header(
    relay: tuple[Capture, int], category: Category
) -> None:
    """A receipt or a security notice is no list to leave: neither List-Unsubscribe nor -Post is sent."""
    capture, port = relay
    to = _fresh()
    assert isinstance((await _adapter(port).submit(_message(to, category))).result, Accepted)
    assert not [line for line in _headers(capture.received[to][0]) if line.lower().startswith("list-unsubscribe")]


async def test_without_keys_marketing_is_refused_naming_the_setting_and_receipts_still_go(
    relay: tuple[Capture, int],
) -> None:
    """No HERALD_UNSUBSCRIBE_KEYS: a marketing e-mail is refused before the relay hears of it (never sent without
    its link), naming the rule and not the address; a transactional one is sent as before."""
    capture, port = relay
    adapter = _adapter(port, keys=False)
    to = _fresh()
    outcome = await adapter.submit(_message(to, Category.MARKETING))
    assert isinstance(outcome.result, Rejected)
    assert "HERALD_UNSUBSCRIBE_KEYS" in outcome.result.reason and "RFC 8058" in outcome.result.reason
    assert to not in outcome.model_dump_json() and to not in capture.received
    assert isinstance((await adapter.submit(_message(to, Category.TRANSACTIONAL))).result, Accepted)
    assert len(capture.received[to]) == 1


async def test_an_http_receipt_url_is_never_a_link_marketing_is_refused_and_receipts_still_go(
    relay: tuple[Capture, int],
) -> None:
    """No HERALD_UNSUBSCRIBE_URL and a receipt server reached over http:// (the old fallback wrote that link):
    the marketing e-mail is refused before the relay hears of it, naming the setting and RFC 8058's HTTPS
    rule, never sent with a link no mail client posts to; a transactional one is sent as before."""
    capture, port = relay
    adapter = _adapter(port)
    to = _fresh()
    message = _message(to, Category.MARKETING).model_copy(update={"receipts_url": "http://127.0.0.1:8235"})
    outcome = await adapter.submit(message)
    assert isinstance(outcome.result, Rejected), outcome
    assert outcome.result.reason.startswith("HERALD_UNSUBSCRIBE_URL: the link must be https:// (RFC 8058)")
    assert to not in capture.received
    receipt = message.model_copy(update={"message": message.message.model_copy(update={"category": Category.TRANSACTIONAL})})
    assert isinstance((await adapter.submit(receipt)).result, Accepted)
    assert len(capture.received[to]) == 1
