"""E-mail submission over SMTP to any relay (SES, SendGrid, Postmark, Mailgun, a company's Postfix).

The adapter opens one connection per submit, makes one transaction and reports what it saw as a
typed outcome; it never retries (retries belong to Temporal) and never raises for anything the
network or the relay does. SMTP accepts a message only when the relay answers the end of DATA,
so where a failure happened decides what it means:

    submit
      ├── connect, TLS ....................... failure: Unreachable (nothing was sent: an outage)
      │                                         421 greeting: Unreachable (the relay turns all
      │                                         traffic away for now)
      ├── AUTH .............................. refused: Retryable with a long delay (our
      │                                         configuration: a human fixes it, the budget ends it)
      ├── MAIL FROM, RCPT TO ................ 421: Unreachable (the relay is closing down)
      │                                         other 4xx: Retryable   5xx: Rejected (answers about
      │                                         this message)
      │                                         disconnect/timeout: Unreachable (no DATA, no message)
      └── DATA, the message, the final "." .. 250: Accepted (provider id: our Message-ID)
                                               4xx: Retryable   5xx: Rejected
                                               disconnect/timeout: Unknown (the relay may have the
                                               message: only its events can tell)

    before any of it: a message that cannot be written as e-mail, or an address with a non-ASCII
    local part when the relay does not offer SMTPUTF8 (RFC 6531) ....... Rejected, naming the rule
    (a non-ASCII domain goes in its IDNA form, which every relay takes)

Unreachable spends no retry budget: the workflow retries it until the intent's deadline, so a relay
that refuses connections for two minutes delays mail by two minutes instead of failing it.

The message is built with the stdlib ``EmailMessage``: text/plain alone; with an HTML part,
``multipart/alternative`` (text/plain first, text/html last: RFC 2046 puts the richest last, and a
client shows the last it can); with attachments, ``multipart/mixed`` holding that message first and
the attachments after it, outside the alternative (inside it, a client would take a PDF for the
richest rendering of the text). The HTML arrives escaped by the template engine; nothing here
touches its data.

The ``Message-ID`` is derived from the attempt reference, so every copy of one attempt is
recognisably the same message, and the reference also travels in SendGrid's ``X-SMTPAPI`` header
(``unique_args``), which the ESP echoes in every event about the message. Reasons carry reply codes
and exception classes only, never the address, the subject or the relay's text (it can quote them).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8
from email.utils import format_datetime
from typing import TYPE_CHECKING, NamedTuple

import aiosmtplib
from email_validator import validate_email
from pydantic import ConfigDict, EmailStr, Field, ValidationError

from herald.core.capabilities import Capabilities
from herald.core.message import MessageReference
from herald.core.outcomes import (
    Accepted,
    Frozen,
    LookupOutcome,
    ProviderStatus,
    ReferenceSearch,
    Rejected,
    Retryable,
    SubmitOutcome,
    Unavailable,
    Unknown,
    Unreachable,
)
from herald.privacy.fingerprints import Keyring
from herald.privacy.unsubscribe import HEADER, ONE_CLICK, POST_HEADER, NoLink, UnsubscribeLinks, needs_link
from herald.providers.port import Attachment, CancelOutcome, OutboundMessage
from herald.providers.sendgrid_events import REFERENCE_ARG
from herald.settings import EmailSettings, InvalidSetting

if TYPE_CHECKING:
    from herald.providers.sendgrid_activity import SendGridActivity

# A relay that refuses our credentials needs a human; retrying every few seconds would only
# trip its lockout. Only a hint: the workflow's policy caps it.
AUTH_RETRY_DELAY_SECONDS = 300.0
# As SMTP and SMTPUTF8, except that a header set raw is written as it is: Python refolds a long
# List-Unsubscribe into RFC 2047 encoded words, which no mail client reads as a URL (RFC 2369: no
# whitespace inside the angle brackets either). Headers set the usual way fold as before.
_WIRE, _WIRE_UTF8 = SMTP.clone(refold_source="none"), SMTPUTF8.clone(refold_source="none")
log = logging.getLogger("herald.providers.smtp")


class EmailSubmission(Frozen):
    """One attempt's message: the rendered subject, text and HTML part, and the attachments already verified."""

    # A refused address must not come back in the error: it is personal data.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    attempt_ref: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    to: EmailStr
    subject: str = Field(max_length=998)
    text: str
    # The HTML part as the template engine rendered it (render data escaped there); None: text only.
    html: str | None = None
    attachments: list[Attachment] = []
    # The attempt whose Message-ID this copy carries (its own when None).
    message_id_of: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    # The List-Unsubscribe value (herald.privacy.unsubscribe): set, the message offers one-click unsubscribe
    # (RFC 8058) and carries List-Unsubscribe-Post too; None (transactional, account mail): neither.
    list_unsubscribe: str | None = None


class SmtpAdapter:
    """One SMTP relay, as typed outcomes.

    Args:
        config: the relay: the settings' e-mail section. Refused (InvalidSetting) without a host
            or a sender.
        activity: the ESP's activity feed, where the account has one (SendGrid's Email Activity
            add-on): then an unknown submit is looked up by its reference; None: events only.
        keyring: the fingerprint keys a marketing e-mail's unsubscribe link names its recipient by.
    """

    def __init__(self, config: EmailSettings, activity: SendGridActivity | None = None, *, keyring: Keyring) -> None:
        if config.host is None:
            raise InvalidSetting("HERALD_SMTP_HOST", "required for e-mail (the relay every e-mail is handed to)")
        if config.from_address is None:
            raise InvalidSetting(
                "HERALD_EMAIL_FROM", "required when HERALD_SMTP_HOST is set (the sender of every e-mail)"
            )
        self._config = config
        self._activity = activity
        self._keyring = keyring
        # The link marketing e-mail carries: without keys such e-mail is refused, never sent without it.
        self._unsubscribe = UnsubscribeLinks.from_settings(config.unsubscribe)
        if self._unsubscribe is None:
            log.warning("HERALD_UNSUBSCRIBE_KEYS unset: marketing e-mail will be refused (it must carry its link)")
        self._capabilities = Capabilities(
            status_lookup=False,  # SMTP has no "what happened to message X"; evidence comes as events
            # By our reference in the ESP's activity feed, where there is one; its lag bounds "not found".
            lookup_by_reference=activity is not None,
            bounded_queue=False,  # no queue bound: without the feed an unknown submit waits for events
            cancel_accepted=False,
            delivery_reports=config.delivery_events,
        )

    @property
    def name(self) -> str:
        return self._config.provider

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def route(self) -> str:
        return f"smtp://{self._config.host}:{self._config.port}"

    async def aclose(self) -> None:
        """Every submit opens and closes its own connection; only the activity feed's client stays open."""
        if self._activity is not None:
            await self._activity.aclose()

    def message_id(self, attempt_ref: str) -> str:
        """The Message-ID every copy of one attempt carries."""
        return f"<{attempt_ref}@{self._config.message_id_domain}>"

    def build(self, submission: EmailSubmission) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self._config.from_address
        message["To"] = submission.to
        message["Subject"] = submission.subject
        message["Date"] = format_datetime(datetime.now(UTC))
        message["Message-ID"] = self.message_id(submission.message_id_of or submission.attempt_ref)
        message["X-SMTPAPI"] = json.dumps({"unique_args": {REFERENCE_ARG: submission.attempt_ref}}, separators=(",", ":"))
        if submission.list_unsubscribe is not None:  # raw: written as it is (_WIRE)
            message.set_raw(HEADER, submission.list_unsubscribe)
            message.set_raw(POST_HEADER, ONE_CLICK)
        message.set_content(submission.text)
        if submission.html is not None:
            message.add_alternative(submission.html, subtype="html")
        # On a multipart/alternative, add_attachment wraps it as the first part of a multipart/mixed.
        for attachment in submission.attachments:
            maintype, subtype = attachment.media_type.split("/", 1)
            message.add_attachment(attachment.content, maintype=maintype, subtype=subtype, filename=attachment.filename)
        return message

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        """The port's submit: an address the relay could never deliver to is refused here."""
        message = outbound.message
        try:
            submission = EmailSubmission(
                attempt_ref=outbound.attempt_ref,
                to=message.recipient,
                subject=message.subject or "",
                text=message.body,
                html=message.html_body,
                attachments=outbound.attachments,
                message_id_of=outbound.message_id_of,
            )
        except ValidationError as error:
            fields = sorted({str(item["loc"][0]) for item in error.errors(include_input=False)})
            return SubmitOutcome(result=Rejected(reason=f"not a valid e-mail submission: {', '.join(fields)}"))
        try:
            submission = submission.model_copy(update={"list_unsubscribe": self._list_unsubscribe(outbound)})
        except NoLink as error:  # nothing was sent: marketing never goes out without its link
            return SubmitOutcome(result=Rejected(reason=str(error)))
        return await self.send_email(submission)

    def _list_unsubscribe(self, outbound: OutboundMessage) -> str | None:
        """The List-Unsubscribe value a message of its category carries; None when it needs none.

        Raises:
            NoLink: it needs one and none can be written (no keys, no URL).
        """
        message = outbound.message
        if not needs_link(message.category):
            return None
        if self._unsubscribe is None:
            raise NoLink(
                f"category {message.category.value}: an e-mail of this category must carry a one-click "
                "unsubscribe link (RFC 8058), and this worker has no HERALD_UNSUBSCRIBE_KEYS to sign one"
            )
        return self._unsubscribe.header(
            fingerprint=self._keyring.recipient(message.recipient),
            category=message.category,
            receipts_url=outbound.receipts_url,
            now=datetime.now(UTC),
        )

    async def fetch(self, provider_id: str) -> LookupOutcome:
        return LookupOutcome(result=Unavailable(reason="SMTP has no status lookup; evidence arrives as ESP events"))

    async def find_by_reference(self, reference: MessageReference) -> ReferenceSearch:
        """The attempt in the ESP's activity feed by its reference (``unique_args``), where one is configured."""
        if self._activity is None:
            reason = "SMTP has no lookup by reference; evidence arrives as ESP events"
            return ReferenceSearch(result=Unavailable(reason=reason))
        message_id = self.message_id(reference.message_id_of or reference.attempt_ref)
        return await self._activity.find(attempt_ref=reference.attempt_ref, message_id=message_id)

    async def cancel(self, provider_id: str) -> CancelOutcome:
        return CancelOutcome(canceled=False, reason="a relay cannot recall a message it accepted")

    async def send_email(self, submission: EmailSubmission) -> SubmitOutcome:
        """Hand one message to the relay: one connection, one transaction, never retried."""
        config = self._config
        address = _recipient(submission.to)
        try:
            message = self.build(submission.model_copy(update={"to": address.header}))
            wire = message.as_bytes(policy=_WIRE_UTF8 if address.needs_smtputf8 else _WIRE)
        except (ValueError, TypeError) as error:
            # Nothing was sent: what cannot be written as an e-mail never will be, so it is refused now.
            reason = f"subject, body or attachment: cannot be written as an e-mail message ({type(error).__name__})"
            return SubmitOutcome(result=Rejected(reason=reason))
        client = aiosmtplib.SMTP(
            hostname=config.host,
            port=config.port,
            use_tls=config.security == "tls",
            start_tls=config.security == "starttls",
            username=config.username,
            password=config.password.get_secret_value() if config.password else None,
            timeout=config.read_timeout,
        )
        phase = "connect"
        try:
            await client.connect(timeout=config.connect_timeout)
            phase = "envelope"
            options, encoding = [], "ascii"
            if address.needs_smtputf8:
                if not client.supports_extension("smtputf8"):
                    return SubmitOutcome(result=Rejected(reason=_NO_SMTPUTF8))
                options, encoding = ["SMTPUTF8"], "utf-8"
            await client.mail(config.from_address, options=options, encoding=encoding)
            await client.rcpt(address.envelope, encoding=encoding)
            phase = "data"
            await client.data(wire)
        except aiosmtplib.SMTPAuthenticationError as error:
            return SubmitOutcome(
                result=Retryable(
                    reason=f"SMTP {error.code}: the relay refused our credentials",
                    delay_seconds=AUTH_RETRY_DELAY_SECONDS,
                )
            )
        except aiosmtplib.SMTPResponseException as error:
            return SubmitOutcome(result=_answered(phase, error.code))
        except aiosmtplib.SMTPRecipientsRefused as error:  # only from the send() helpers; kept for safety
            codes = [refused.code for refused in error.recipients] or [550]
            return SubmitOutcome(result=_answered("envelope", max(codes)))
        except (aiosmtplib.SMTPException, OSError) as error:
            if phase == "data":
                return SubmitOutcome(
                    result=Unknown(reason=f"{type(error).__name__} during DATA: the relay may have the message")
                )
            return SubmitOutcome(
                result=Unreachable(reason=f"{type(error).__name__} before DATA ({phase}): nothing was sent")
            )
        except (ValueError, TypeError) as error:
            if phase == "data":  # bytes may have been written: never guess
                return SubmitOutcome(result=Unknown(reason=f"{type(error).__name__} during DATA: the relay may have it"))
            # An envelope the relay could never take (an address that cannot be encoded): nothing was sent.
            return SubmitOutcome(result=Rejected(reason=f"to: cannot be sent to this relay ({type(error).__name__})"))
        finally:
            await _close(client)
        return SubmitOutcome(
            result=Accepted(
                provider_id=self.message_id(submission.message_id_of or submission.attempt_ref),
                status=ProviderStatus.QUEUED,
            )
        )


class _Recipient(NamedTuple):
    envelope: str  # RCPT TO
    header: str  # the To header
    needs_smtputf8: bool


def _recipient(to: str) -> _Recipient:
    """The address as the wire needs it: a non-ASCII domain in its IDNA (xn--) form, which every relay
    takes; a non-ASCII local part has no ASCII form and needs SMTPUTF8 (RFC 6531)."""
    checked = validate_email(to, check_deliverability=False)
    if checked.ascii_email is not None:
        return _Recipient(checked.ascii_email, checked.ascii_email, False)
    return _Recipient(checked.normalized, checked.normalized, True)


_NO_SMTPUTF8 = (
    "to: an address with a non-ASCII local part needs a relay that offers SMTPUTF8 (RFC 6531); "
    "this relay does not, so it can never be sent here"
)


def _answered(phase: str, code: int) -> Unreachable | Retryable | Rejected:
    where = "at the end of DATA" if phase == "data" else "to the envelope" if phase == "envelope" else "on connect"
    if code == 421 and phase != "data" or phase == "connect" and 400 <= code < 500:
        # RFC 5321: 421 is "service not available, closing transmission channel": the relay is
        # turning traffic away, which says nothing about this message.
        return Unreachable(reason=f"SMTP {code} {where}: the relay is not taking mail now; nothing was sent")
    if 400 <= code < 500:
        return Retryable(reason=f"SMTP {code} {where}: the relay says not now")
    return Rejected(reason=f"SMTP {code} {where}: the relay refused the message")


async def _close(client: aiosmtplib.SMTP) -> None:
    if not client.is_connected:
        return
    try:
        await client.quit()
    except (aiosmtplib.SMTPException, OSError):
        client.close()
