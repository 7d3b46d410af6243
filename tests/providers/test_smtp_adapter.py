"""The SMTP adapter against the ESP emulator over real TCP: every answer a relay can give, as a typed outcome."""

from __future__ import annotations

import hashlib
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer
from herald.core.outcomes import Accepted, ProviderStatus, Rejected, Retryable, Unknown, Unreachable
from herald.providers.port import Attachment
from herald.providers.smtp import AUTH_RETRY_DELAY_SECONDS, EmailSubmission, SmtpAdapter
from herald.settings import EmailSettings
from tests.keys import SESSION_KEYRING

USERNAME, PASSWORD = "apikey", "SG.emulator-secret"
DOMAIN = "mail.herald.example"
ATTACHMENT = b"%PDF-1.7 monthly report\n" + bytes(range(256)) * 8


@pytest.fixture(scope="module")
async def esp() -> AsyncIterator[EspServer]:
    # Events go to a closed loopback port: these tests judge the SMTP answers, not the webhook.
    config = EspConfig(
        smtp_port=0, admin_port=0, webhook_url="http://127.0.0.1:9/events", username=USERNAME, password=PASSWORD,
        webhook_max_attempts=1, step_ms=20,
    )  # fmt: skip
    server = EspServer(config)
    await server.start()
    yield server
    await server.stop()


def adapter(esp: EspServer, **overrides: Any) -> SmtpAdapter:
    values: dict[str, Any] = {
        "host": "127.0.0.1", "port": esp.smtp_port, "security": "none", "username": USERNAME, "password": PASSWORD,
        "from_address": "receipts@herald.example", "message_id_domain": DOMAIN, "read_timeout": 2.0,
        "connect_timeout": 2.0,
    }  # fmt: skip
    values.update(overrides)
    return SmtpAdapter(EmailSettings(**values), keyring=SESSION_KEYRING)


def submission(to: str, ref: str = "att_0123456789abcdef01234567_1", **overrides: Any) -> EmailSubmission:
    values: dict[str, Any] = {
        "attempt_ref": ref, "to": to, "subject": "Your monthly report", "text": "Your report is attached.",
        "attachments": [Attachment(filename="report.pdf", media_type="application/pdf", content=ATTACHMENT)],
    }  # fmt: skip
    values.update(overrides)
    return EmailSubmission(**values)


def fresh_address() -> str:
    return f"member.{secrets.token_hex(6)}@example.com"


async def arm(esp: EspServer, address: str, **fault: Any) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{esp.admin_port}", trust_env=False) as admin:
        response = await admin.put(f"/_esp/faults/{address}", json=fault)
        assert response.status_code == 200, response.text


async def received(esp: EspServer, address: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{esp.admin_port}", trust_env=False) as admin:
        return (await admin.get("/_esp/messages", params={"to": address})).json()["messages"]


def assert_no_pii(outcome: Any, address: str) -> None:
    dumped = outcome.model_dump_json()
    assert address not in dumped and address.split("@")[0] not in dumped
    assert "monthly report" not in dumped and PASSWORD not in dumped


async def test_an_accepted_message_carries_our_reference_and_the_exact_attachment(esp: EspServer) -> None:
    """250 is Accepted with our Message-ID as the provider id; the relay got that Message-ID, the
    reference in X-SMTPAPI's unique_args, and the attachment byte for byte."""
    to = fresh_address()
    outcome = await adapter(esp).send_email(submission(to))
    assert outcome.result == Accepted(provider_id=f"<att_0123456789abcdef01234567_1@{DOMAIN}>", status=ProviderStatus.QUEUED)
    (message,) = await received(esp, to)
    assert message["message_id"] == f"<att_0123456789abcdef01234567_1@{DOMAIN}>"
    assert message["unique_args"] == {"herald_attempt": "att_0123456789abcdef01234567_1"}
    (attachment,) = message["attachments"]
    assert (attachment["filename"], attachment["sha256"]) == ("report.pdf", hashlib.sha256(ATTACHMENT).hexdigest())
    assert message["smtpapi"] == {"unique_args": {"herald_attempt": "att_0123456789abcdef01234567_1"}}


@pytest.mark.parametrize(
    ("fault", "expected", "code"),
    [
        pytest.param({"fault": "temp_fail", "code": 451, "stage": "rcpt"}, Retryable, "451", id="451-at-rcpt"),
        pytest.param({"fault": "temp_fail", "code": 421, "stage": "data"}, Retryable, "421", id="421-at-data"),
        # 421 before DATA: the relay is closing down, which says nothing about this message.
        pytest.param({"fault": "temp_fail", "code": 421, "stage": "rcpt"}, Unreachable, "421", id="421-at-rcpt"),
        pytest.param({"fault": "perm_fail", "stage": "rcpt"}, Rejected, "550", id="550-at-rcpt"),
        pytest.param({"fault": "perm_fail", "stage": "data"}, Rejected, "554", id="554-at-data"),
    ],
)
async def test_definite_refusals_are_retryable_or_rejected_and_nothing_is_accepted(
    esp: EspServer, fault: dict[str, Any], expected: type, code: str
) -> None:
    """4xx is "not now" and 5xx "never", at the envelope or at the end of DATA; a 421 before DATA is the relay
    turning traffic away (an outage); the relay holds nothing."""
    to = fresh_address()
    await arm(esp, to, count=1, **fault)
    outcome = await adapter(esp).send_email(submission(to))
    assert isinstance(outcome.result, expected)
    assert code in outcome.result.reason
    assert_no_pii(outcome, to)
    assert await received(esp, to) == []


async def test_a_connection_dropped_after_data_is_unknown_and_the_relay_has_the_message(esp: EspServer) -> None:
    """No reply to the final dot: Unknown, never a failure, and the relay did accept it."""
    to = fresh_address()
    await arm(esp, to, fault="drop_after_data", count=1)
    outcome = await adapter(esp).send_email(submission(to))
    assert isinstance(outcome.result, Unknown) and "DATA" in outcome.result.reason
    assert len(await received(esp, to)) == 1


async def test_a_reply_slower_than_the_read_timeout_is_unknown(esp: EspServer) -> None:
    """A relay that holds its 250 past our read timeout may still accept: Unknown."""
    to = fresh_address()
    await arm(esp, to, fault="slow_reply", seconds=4, count=1)
    outcome = await adapter(esp, read_timeout=1.0).send_email(submission(to))
    assert isinstance(outcome.result, Unknown)


async def test_refused_credentials_are_retryable_after_a_long_delay(esp: EspServer) -> None:
    """A 535 is our configuration, not the message: retryable, with the long configuration delay, nothing sent."""
    to = fresh_address()
    outcome = await adapter(esp, password="wrong").send_email(submission(to))
    assert isinstance(outcome.result, Retryable)
    assert outcome.result.delay_seconds == AUTH_RETRY_DELAY_SECONDS and "535" in outcome.result.reason
    assert await received(esp, to) == []


async def test_a_relay_that_is_not_listening_is_unreachable() -> None:
    """Connection refused: nothing left this process, an outage rather than a verdict on the message."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = EmailSettings(host="127.0.0.1", port=port, security="none", from_address="receipts@herald.example",
                        message_id_domain=DOMAIN, connect_timeout=1.0)  # fmt: skip
    outcome = await SmtpAdapter(config, keyring=SESSION_KEYRING).send_email(submission("someone@example.com"))
    assert isinstance(outcome.result, Unreachable) and "before DATA" in outcome.result.reason


def test_every_copy_of_one_attempt_has_the_same_message_id() -> None:
    """The Message-ID is a function of the attempt reference, so a second copy is recognisably the same message."""
    config = EmailSettings(host="relay.example", from_address="receipts@herald.example", message_id_domain=DOMAIN)
    built = [SmtpAdapter(config, keyring=SESSION_KEYRING).build(submission("a@example.com")) for _ in range(2)]
    assert built[0]["Message-ID"] == built[1]["Message-ID"] == f"<att_0123456789abcdef01234567_1@{DOMAIN}>"


@pytest.mark.parametrize(
    "overrides",
    [{"from_address": "not an address"}, {"message_id_domain": "localhost"}, {"port": 0}, {"provider": "Send Grid"}],
)
def test_config_refuses_invalid_settings_without_echoing_the_password(overrides: dict[str, Any]) -> None:
    """A bad relay setting is refused at construction, and the error never shows the password."""
    values = {"host": "relay.example", "from_address": "receipts@herald.example", "message_id_domain": DOMAIN,
              "password": PASSWORD, **overrides}  # fmt: skip
    with pytest.raises(ValidationError) as error:
        EmailSettings(**values)
    assert PASSWORD not in str(error.value)
    assert PASSWORD not in repr(EmailSettings(host="relay.example", from_address="receipts@herald.example",
                                           message_id_domain=DOMAIN, password=PASSWORD))  # fmt: skip


def test_a_submission_refuses_an_invalid_recipient_without_echoing_it() -> None:
    """The recipient must be an e-mail address; the error names the field, never the value."""
    with pytest.raises(ValidationError) as error:
        submission("member.7731@")
    assert [item["loc"] for item in error.value.errors()] == [("to",)]
    assert "member.7731" not in str(error.value)


@pytest.fixture(scope="module")
async def utf8_esp() -> AsyncIterator[EspServer]:
    """A relay that offers SMTPUTF8 (RFC 6531)."""
    config = EspConfig(smtp_port=0, admin_port=0, webhook_url=None, username=USERNAME, password=PASSWORD, step_ms=20,
                       smtputf8=True)  # fmt: skip
    server = EspServer(config)
    await server.start()
    yield server
    await server.stop()


async def test_a_non_ascii_local_part_is_refused_by_name_when_the_relay_offers_no_smtputf8(esp: EspServer) -> None:
    """üser@example.com to a relay without SMTPUTF8: Rejected at once naming the rule (it could never be sent
    there), never an exception or an unknown outcome; nothing reaches the relay; the address is not echoed."""
    to = f"üser.{secrets.token_hex(4)}@example.com"
    outcome = await adapter(esp).send_email(submission(to))
    assert isinstance(outcome.result, Rejected)
    assert outcome.result.reason.startswith("to: an address with a non-ASCII local part needs a relay that offers SMTPUTF8")
    assert_no_pii(outcome, to)
    assert await received(esp, to) == []


async def test_a_non_ascii_local_part_goes_out_with_smtputf8_where_the_relay_offers_it(utf8_esp: EspServer) -> None:
    """The same address to a relay offering SMTPUTF8: MAIL ... SMTPUTF8, accepted, one message for that address."""
    to = f"üser.{secrets.token_hex(4)}@example.com"
    outcome = await adapter(utf8_esp).send_email(submission(to))
    assert isinstance(outcome.result, Accepted), outcome
    [message] = await received(utf8_esp, to)
    assert message["message_id"].startswith("<att_0123456789abcdef01234567_1@")


async def test_a_non_ascii_domain_goes_out_in_its_idna_form_to_any_relay(esp: EspServer) -> None:
    """user@bücher.example needs no SMTPUTF8: the envelope carries xn--bcher-kva.example."""
    local = f"member.{secrets.token_hex(4)}"
    outcome = await adapter(esp).send_email(submission(f"{local}@bücher.example"))
    assert isinstance(outcome.result, Accepted), outcome
    assert len(await received(esp, f"{local}@xn--bcher-kva.example")) == 1


@pytest.mark.parametrize("subject", ["line\u2028separator", "next\x85line", "tab\tand\rreturn"], ids=["u2028", "nel", "cr"])
async def test_a_subject_that_cannot_be_a_header_is_refused_before_connecting(esp: EspServer, subject: str) -> None:
    """What the door lets through must still never throw: a subject the e-mail package cannot write as a
    header is Rejected naming the rule before any connection (a bypassed door, a template's own text)."""
    to = fresh_address()
    outcome = await adapter(esp).send_email(submission(to, subject=subject))
    assert isinstance(outcome.result, Rejected), outcome
    assert outcome.result.reason == "subject, body or attachment: cannot be written as an e-mail message (ValueError)"
    assert await received(esp, to) == []
