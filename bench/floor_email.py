"""The floor's and the naive sender's e-mail: one SMTP transaction per message to the bench's ESP.

What a team without Herald would write, the same as Herald's SMTP adapter does on the wire: one
connection per message (connect, EHLO, MAIL, RCPT, DATA, QUIT), a text/plain message with a
Message-ID, and SendGrid's ``X-SMTPAPI`` header carrying ``unique_args`` that the ESP echoes in
every event about the message: which variant sent it and the workflow (floor) or intent (naive)
the event belongs to, so the bench's receiver needs no lookup. No retries, as Herald's one attempt.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime

import aiosmtplib
from temporalio import activity

from bench.floor import SUBMIT_ACTIVITY, FloorInput

# The unique args the bench's receiver routes an ESP event by.
REF_ARG = "bench_ref"
VARIANT_ARG = "bench_variant"
SUBJECT = "Your receipt from Herald Shop"
MESSAGE_ID_DOMAIN = "bench.test"


def email_message(sender: str, to: str, body: str, ref: str, variant: str) -> EmailMessage:
    """One text message; `ref` names the workflow or intent it belongs to in its Message-ID and unique args."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = SUBJECT
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = f"<{ref}@{MESSAGE_ID_DOMAIN}>"
    message["X-SMTPAPI"] = json.dumps({"unique_args": {REF_ARG: ref, VARIANT_ARG: variant}}, separators=(",", ":"))
    message.set_content(body)
    return message


async def send_email(host: str, port: int, message: EmailMessage, timeout: float) -> None:
    """Hand one message to the relay: one connection, one transaction; a refusal raises."""
    await aiosmtplib.send(message, hostname=host, port=port, timeout=timeout)


class FloorEmailSubmit:
    """The floor workflow's submit activity on its e-mail task queue (the SMS one POSTs to the emulator)."""

    def __init__(self, host: str, port: int, sender: str, timeout: float) -> None:
        self._host, self._port, self._sender, self._timeout = host, port, sender, timeout

    @activity.defn(name=SUBMIT_ACTIVITY)
    async def submit(self, input: FloorInput) -> str:
        message = email_message(self._sender, input.to, input.body, activity.info().workflow_id, "floor")
        await send_email(self._host, self._port, message, self._timeout)
        return str(message["Message-ID"])
