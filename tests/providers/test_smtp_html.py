"""E-mail with an HTML part, over real SMTP on 127.0.0.1: the SMTP adapter's message as a relay received
it, parsed with the stdlib e-mail parser, and as the ESP emulator shows it.

Render data comes from the shipped template (order_receipt_email v2), so what reaches the relay is what
the template engine made of it: escaped in the HTML part, verbatim in the text part.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import AsyncIterator
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from html import unescape
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from aiosmtpd.smtp import SMTP as SmtpServer
from aiosmtpd.smtp import Envelope, Session

from emulator.esp.admin import PAGE_CSP
from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer
from herald.core.message import Channel, Message
from herald.core.outcomes import Accepted
from herald.intake.template_registry import render_message
from herald.providers.port import Attachment, OutboundMessage
from herald.providers.smtp import EmailSubmission, SmtpAdapter
from herald.settings import EmailSettings
from tests.keys import SESSION_KEYRING

SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'
RECEIPT = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR"}
REPORT = b"%PDF-1.7 receipt\n" + bytes(range(256)) * 4
REF = "att_0123456789abcdef01234567_1"


class Capture:
    """An aiosmtpd handler that keeps every message's DATA bytes, as the relay received them."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    async def handle_DATA(self, server: SmtpServer, session: Session, envelope: Envelope) -> str:
        self.received.append(envelope.original_content or b"")
        return "250 OK"


@pytest.fixture(scope="module")
async def relay() -> AsyncIterator[tuple[Capture, int]]:
    """A plain SMTP server on a free loopback port that keeps the raw messages."""
    capture = Capture()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SmtpServer(capture, hostname="relay.test", loop=loop), "127.0.0.1", 0)
    yield capture, server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.fixture(scope="module")
async def esp() -> AsyncIterator[EspServer]:
    config = EspConfig(smtp_port=0, admin_port=0, webhook_url=None, step_ms=20)
    server = EspServer(config)
    await server.start()
    yield server
    await server.stop()


def adapter(port: int) -> SmtpAdapter:
    return SmtpAdapter(
        EmailSettings(host="127.0.0.1", port=port, security="none", from_address="receipts@herald.example",
                      message_id_domain="mail.herald.example", read_timeout=2.0, connect_timeout=2.0),
        keyring=SESSION_KEYRING,
    )  # fmt: skip


def receipt(merchant: str, *, attach: bool, to: str = "member@example.com") -> OutboundMessage:
    """The attempt's message as the submit activity hands it over: rendered by the template engine."""
    rendered = render_message("order_receipt_email", 2, {**RECEIPT, "merchant": merchant}, channel="email")
    attachments = [Attachment(filename="receipt.pdf", media_type="application/pdf", content=REPORT)] if attach else []
    message = Message(channel=Channel.EMAIL, recipient=to, body=rendered.body, subject=rendered.subject,
                      html_body=rendered.html_body)  # fmt: skip
    return OutboundMessage(message=message, attempt_ref=REF, attachments=attachments)


async def sent_and_parsed(relay: tuple[Capture, int], message: OutboundMessage) -> EmailMessage:
    capture, port = relay
    before = len(capture.received)
    outcome = await adapter(port).submit(message)
    assert isinstance(outcome.result, Accepted), outcome
    [raw] = capture.received[before:]
    parsed = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(parsed, EmailMessage)
    return parsed


def assert_escaped_html_and_verbatim_text(text: EmailMessage, html: EmailMessage, hostile: str) -> None:
    assert text.get_content_type() == "text/plain" and html.get_content_type() == "text/html"
    plain, markup = text.get_content(), html.get_content()
    assert hostile in plain
    assert hostile not in markup and "<script>alert" not in markup and "<img" not in markup
    assert markup.count("&lt;") >= 2 and "&gt;" in markup
    assert hostile in unescape(markup)  # the data is all there, as text


@pytest.mark.parametrize("hostile", [SCRIPT, BREAKOUT], ids=["script", "attribute-breakout"])
async def test_an_html_email_is_multipart_alternative_text_then_html(relay: tuple[Capture, int], hostile: str) -> None:
    """Without attachments the relay gets multipart/alternative: text/plain first (the data verbatim),
    text/html last (the data escaped by the template engine)."""
    parsed = await sent_and_parsed(relay, receipt(hostile, attach=False))
    assert parsed.get_content_type() == "multipart/alternative"
    text, html = parsed.iter_parts()
    assert_escaped_html_and_verbatim_text(text, html, hostile)
    assert parsed["Message-ID"] == f"<{REF}@mail.herald.example>"


@pytest.mark.parametrize("hostile", [SCRIPT, BREAKOUT], ids=["script", "attribute-breakout"])
async def test_with_an_attachment_the_alternative_is_inside_multipart_mixed(
    relay: tuple[Capture, int], hostile: str
) -> None:
    """With an attachment the relay gets multipart/mixed: the multipart/alternative first, then the
    attachment outside it, byte for byte."""
    parsed = await sent_and_parsed(relay, receipt(hostile, attach=True))
    assert parsed.get_content_type() == "multipart/mixed"
    alternative, attachment = parsed.iter_parts()
    assert alternative.get_content_type() == "multipart/alternative"
    text, html = alternative.iter_parts()
    assert_escaped_html_and_verbatim_text(text, html, hostile)
    assert attachment.get_content_disposition() == "attachment" and attachment.get_filename() == "receipt.pdf"
    assert attachment.get_content() == REPORT
    # A client picks the HTML part as the body and lists the PDF as the attachment.
    assert parsed.get_body(preferencelist=("html", "plain")) is not None
    assert [part.get_filename() for part in parsed.iter_attachments()] == ["receipt.pdf"]


async def test_a_text_only_email_stays_text_plain(relay: tuple[Capture, int]) -> None:
    """A message without an HTML part is built as before: text/plain, no alternative."""
    outbound = receipt("Acme", attach=False)
    message = outbound.model_copy(update={"message": outbound.message.model_copy(update={"html_body": None})})
    parsed = await sent_and_parsed(relay, message)
    assert parsed.get_content_type() == "text/plain"
    assert "Acme received your payment" in parsed.get_content()


def test_the_submission_carries_the_html_part_unchanged() -> None:
    """The adapter takes the HTML part as rendered: it neither escapes it again nor strips it."""
    message = receipt(SCRIPT, attach=False).message
    built = adapter(25).build(
        EmailSubmission(attempt_ref=REF, to=message.recipient, subject=message.subject or "", text=message.body,
                        html=message.html_body)
    )  # fmt: skip
    html = built.get_body(preferencelist=("html",))
    assert html is not None and message.html_body is not None and html.get_content() == message.html_body + "\n"


class PageTags(HTMLParser):
    """The start tags of a page, as a browser would build them (references decoded in attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


async def _admin(esp: EspServer, path: str, **params: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{esp.admin_port}", trust_env=False) as admin:
        return await admin.get(path, params=params)


async def test_the_esp_emulator_keeps_both_parts_and_shows_the_html_part_only_sandboxed(esp: EspServer) -> None:
    """The emulator's oracle has the MIME tree and both parts; its page shows the text part escaped and
    the HTML part in an iframe with sandbox="" from an escaped srcdoc (and as escaped source), never live."""
    to = f"member.{secrets.token_hex(5)}@example.com"
    message = receipt(BREAKOUT, attach=True, to=to)
    outcome = await adapter(esp.smtp_port).submit(message)
    assert isinstance(outcome.result, Accepted), outcome
    [record] = (await _admin(esp, "/_esp/messages", to=to)).json()["messages"]
    assert record["structure"] == "multipart/mixed(multipart/alternative(text/plain,text/html),application/pdf)"
    assert BREAKOUT in record["text_body"]
    assert record["html_body"].replace("\r\n", "\n").rstrip("\n") == message.message.html_body  # CRLF on the wire
    assert record["attachments"][0]["sha256"] == hashlib.sha256(REPORT).hexdigest()

    page = await _admin(esp, "/")
    assert page.headers["content-security-policy"] == PAGE_CSP
    html = page.text
    assert to in html and html.count('<iframe sandbox="" ') == 1 and html.count(' srcdoc="') == 1
    assert "<img src=x" not in html and "<script>alert" not in html
    tags = PageTags()
    tags.feed(html)
    assert {"script", "img"}.isdisjoint(tag for tag, _ in tags.found)  # nothing of the message is live
    [frame] = [dict(attrs) for tag, attrs in tags.found if tag == "iframe"]
    assert frame["sandbox"] == ""
    assert (frame["srcdoc"] or "").replace("\r\n", "\n").rstrip("\n") == message.message.html_body
    # In the srcdoc the HTML part is escaped once more (the frame decodes it to the part as sent).
    assert "&amp;quot;&amp;gt;&amp;lt;img src=x onerror=alert(1)&amp;gt;" in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in html  # the text part, escaped in a <pre>
