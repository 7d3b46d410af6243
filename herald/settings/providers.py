"""The providers' sections: Twilio, Infobip, the SMTP relay, SendGrid's Email Activity feed.
"""


from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    EmailStr,
    Field,
    SecretStr,
    model_validator,
)

from herald.settings.defaults import (
    no_trailing_slash,
)
from herald.settings.keys import KeyringSection, UnsubscribeSettings, keyring_variables
from herald.settings.rules import (
    ACCOUNT_SID_PATTERN,
    MESSAGING_SERVICE_SID_PATTERN,
    Count,
    Host,
    Lowercase,
    OneLine,
    Port,
    PositiveSeconds,
    Rule,
    SecretOneLine,
    Timeout,
    Token,
    Url,
    refusal,
)
from herald.settings.variables import (
    Section,
)

# ---- the providers ---------------------------------------------------------------------------


def _twilio_sender(value: str) -> str:
    """An E.164 number, a short code, or an alphanumeric sender ID (Twilio's three kinds of From)."""
    if re.fullmatch(r"\+[1-9][0-9]{1,14}|[0-9]{3,8}", value):
        return value
    if len(value) <= 11 and re.fullmatch(r"[A-Za-z0-9 ]*[A-Za-z][A-Za-z0-9 ]*", value):
        return value
    raise ValueError("not a sender")


def _unlimited_at_zero(value: float) -> float | None:
    return value or None


class TwilioSettings(Section):
    """Where and as whom the Twilio adapter (herald/providers/twilio.py) talks to Twilio.

    The adapter refuses to start without an Account SID and a sender; every other process reads
    only what it needs (the receipt server, the auth token). ``auth_token`` is a ``SecretStr``.
    """

    api_base: Annotated[Url("https://api.twilio.com"), AfterValidator(no_trailing_slash)] = Field(  # type: ignore[valid-type]
        "https://api.twilio.com", alias="HERALD_TWILIO_API_BASE"
    )
    account_sid: Annotated[
        str, Field(pattern=ACCOUNT_SID_PATTERN), Rule("must be AC followed by 32 hexadecimal digits (Twilio's Account SID)")
    ] = Field("", alias="HERALD_TWILIO_ACCOUNT_SID")
    auth_token: Token = Field(SecretStr(""), alias="HERALD_TWILIO_AUTH_TOKEN")
    # Exactly one sender: a From number (or short code, or sender ID), or a Messaging Service.
    from_number: Annotated[
        str,
        AfterValidator(_twilio_sender),
        Rule(
            "must be an E.164 number (+ and up to 15 digits), a short code, "
            "or a sender ID of up to 11 letters or digits"
        ),
    ] | None = Field(None, alias="HERALD_TWILIO_FROM")
    messaging_service_sid: Annotated[
        str,
        Field(pattern=MESSAGING_SERVICE_SID_PATTERN),
        Rule("must be MG followed by 32 hexadecimal digits (a Messaging Service SID)"),
    ] | None = Field(None, alias="HERALD_TWILIO_MESSAGING_SERVICE_SID")
    connect_timeout: Timeout(600) = Field(3.0, alias="HERALD_TWILIO_CONNECT_TIMEOUT")  # type: ignore[valid-type]
    read_timeout: Timeout(600) = Field(10.0, alias="HERALD_TWILIO_READ_TIMEOUT")  # type: ignore[valid-type]
    # httpx slows sharply past ~20 requests in flight on one client.
    max_in_flight: Count(1024) = Field(16, alias="HERALD_TWILIO_MAX_IN_FLIGHT")  # type: ignore[valid-type]
    # Provider submits per second for this sender, enforced by the Temporal server on the submit
    # task queue across every worker polling it (herald/temporal/task_queues.py). None (or 0) = unlimited.
    # Every worker must set the same value: the server keeps the one the latest poll carried.
    submit_rate_limit: Annotated[
        float,
        Field(ge=0, allow_inf_nan=False),
        AfterValidator(_unlimited_at_zero),
        Rule("must be a number of messages per second, at least 0 (0 or unset: unlimited)"),
    ] | None = Field(None, alias="HERALD_SUBMIT_RATE_LIMIT")

    @model_validator(mode="after")
    def _one_sender(self) -> TwilioSettings:
        if self.from_number is not None and self.messaging_service_sid is not None:
            raise refusal(
                "cannot be set together with HERALD_TWILIO_FROM: one sender, a number or a Messaging Service",
                "HERALD_TWILIO_MESSAGING_SERVICE_SID",
            )
        return self


def _infobip_sender(value: str) -> str:
    """A numeric sender (up to 15 digits, a leading + allowed) or an alphanumeric one of up to 11."""
    if re.fullmatch(r"\+?[0-9]{1,15}", value):
        return value
    if len(value) <= 11 and re.fullmatch(r"[A-Za-z0-9 ]*[A-Za-z][A-Za-z0-9 ]*", value):
        return value
    raise ValueError("not a sender")


def _basic_credentials(value: Any) -> Any:
    """user:password, each part 1 to 255 characters (Infobip's BASIC security limits), one line."""
    if isinstance(value, str):
        user, colon, password = value.partition(":")
        if not (colon and 0 < len(user) <= 255 and 0 < len(password) <= 255) or any(c in value for c in "\r\n\0"):
            raise ValueError("not user:password")
    return value


class InfobipWebhookSettings(KeyringSection):
    """How Infobip's delivery reports are authenticated (herald/providers/infobip_signature.py,
    herald/receipts/infobip_reports.py): the keys that sign each message's ``callbackData`` and verify
    it on every report, and the Basic credentials of a subscription profile, if one is set up.

    One set of variables, held whole by two sections: the Infobip section's (the adapter signs) and
    the receipt server's (it verifies). A keyring of its own, never a fingerprint or payload key:
    the receipt server faces the internet. Rotation: add the new key, make it active, keep the old one
    for as long as Infobip may still report on messages it signed (48 h: validity's maximum, plus the
    webhook retry cycle).
    """

    model_config = keyring_variables("HERALD_INFOBIP_WEBHOOK")
    PURPOSE, FIRST_KEY_ACTIVE = "HMAC-SHA-256", True
    # user:password a subscription profile (security type BASIC) sends; None: the route asks none.
    basic: Annotated[
        SecretStr,
        BeforeValidator(_basic_credentials),
        Rule(
            "must be user:password, each 1 to 255 characters on one line (the subscription profile's BASIC credentials)"
        ),
    ] | None = Field(None, alias="HERALD_INFOBIP_WEBHOOK_BASIC")


class InfobipSettings(Section):
    """Where and as whom the Infobip adapter (herald/providers/infobip.py) talks to Infobip's SMS API v3.

    The base URL is per account (``https://xxxxx.api.infobip.com``, from Infobip's portal) and has no
    default: the adapter refuses to start without it, an API key and a webhook key. ``api_key`` is a
    ``SecretStr``, sent as ``Authorization: App <key>``.
    """

    base_url: Annotated[  # type: ignore[valid-type]
        Url("https://xxxxx.api.infobip.com"), AfterValidator(no_trailing_slash)
    ] | None = Field(None, alias="HERALD_INFOBIP_BASE_URL")
    api_key: Token = Field(SecretStr(""), alias="HERALD_INFOBIP_API_KEY")
    # None: Infobip's default sender for the account (v3 makes `sender` optional).
    sender: Annotated[
        str,
        AfterValidator(_infobip_sender),
        Rule("must be a numeric sender of up to 15 digits (a leading + allowed) or an alphanumeric one of up to 11"),
    ] | None = Field(None, alias="HERALD_INFOBIP_SENDER")
    connect_timeout: Timeout(600) = Field(3.0, alias="HERALD_INFOBIP_CONNECT_TIMEOUT")  # type: ignore[valid-type]
    read_timeout: Timeout(600) = Field(10.0, alias="HERALD_INFOBIP_READ_TIMEOUT")  # type: ignore[valid-type]
    max_in_flight: Count(1024) = Field(16, alias="HERALD_INFOBIP_MAX_IN_FLIGHT")  # type: ignore[valid-type]
    # GET /sms/3/logs: "120 requests/minute" (x-throttling-info), per account; paced per process.
    logs_requests_per_minute: Count(6000) = Field(  # type: ignore[valid-type]
        120, alias="HERALD_INFOBIP_LOGS_REQUESTS_PER_MINUTE"
    )
    # Idempotent sending, as Infobip Support enabled it for the account's SMS channel: the grace
    # period within which a repeated messageId is rejected as a duplicate. None (unset): off, and
    # Herald never resubmits to Infobip. Set it only to the grace Infobip confirmed, never longer.
    idempotency_grace_seconds: Count(30 * 86_400) | None = Field(  # type: ignore[valid-type]
        None, alias="HERALD_INFOBIP_IDEMPOTENCY_GRACE_SECONDS"
    )
    webhook: InfobipWebhookSettings = InfobipWebhookSettings()


def _true_or_false(value: Any) -> Any:
    if isinstance(value, str):
        if value.lower() not in ("true", "false"):
            raise ValueError("not true or false")
        return value.lower() == "true"
    return value


class EmailSettings(Section):
    """The SMTP relay e-mail intents are handed to (herald/providers/smtp.py), and whether its ESP
    posts events about them.

    Any relay works (Amazon SES, SendGrid, Postmark, Mailgun, a company's Postfix); no host means
    the e-mail channel is not configured (the worker refuses e-mail submits as permanent), and a
    host requires a sender (the adapter refuses to start without one).
    """

    host: Host | None = Field(None, alias="HERALD_SMTP_HOST")
    port: Port = Field(587, alias="HERALD_SMTP_PORT")
    # starttls: upgrade on the submission port (587); tls: TLS from the first byte (465);
    # none: plaintext, for a relay on loopback only (the local ESP emulator).
    security: Annotated[
        Literal["starttls", "tls", "none"], Lowercase, Rule("must be one of starttls, tls, none")
    ] = Field("starttls", alias="HERALD_SMTP_SECURITY")
    # One line: a line break in an SMTP credential would be a second command to the relay.
    username: OneLine | None = Field(None, alias="HERALD_SMTP_USERNAME")
    password: SecretOneLine | None = Field(None, alias="HERALD_SMTP_PASSWORD")
    # The sender every e-mail carries (an address the relay lets us use).
    from_address: Annotated[EmailStr, Rule("must be an e-mail address, e.g. notifications@example.com")] | None = (
        Field(None, alias="HERALD_EMAIL_FROM")
    )
    # The right-hand side of our Message-IDs: a domain we control.
    message_id_domain: Annotated[
        str,
        Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$"),
        Rule("must be a domain name with at least one dot, e.g. mail.example.com"),
    ] = Field("herald.invalid", alias="HERALD_EMAIL_MESSAGE_ID_DOMAIN")
    # How the ledger names the ESP whose events report on these messages.
    provider: Annotated[
        str,
        Field(pattern=r"^[a-z][a-z0-9_]{0,31}$"),
        Rule("must be 1 to 32 lowercase letters, digits or '_', starting with a letter, e.g. sendgrid"),
    ] = Field("sendgrid", alias="HERALD_EMAIL_PROVIDER")
    # False for a relay that posts no delivery events: an accepted message then ends `relayed`.
    delivery_events: Annotated[bool, BeforeValidator(_true_or_false), Rule("must be one of true, false")] = Field(
        True, alias="HERALD_EMAIL_DELIVERY_EVENTS"
    )
    connect_timeout: PositiveSeconds(300) = Field(10.0, alias="HERALD_SMTP_CONNECT_TIMEOUT")  # type: ignore[valid-type]
    read_timeout: PositiveSeconds(600) = Field(30.0, alias="HERALD_SMTP_READ_TIMEOUT")  # type: ignore[valid-type]
    # The one-click unsubscribe link every marketing e-mail carries (signed here).
    unsubscribe: UnsubscribeSettings = UnsubscribeSettings()


class SendGridActivitySettings(Section):
    """SendGrid's Email Activity API (a paid add-on, herald/providers/sendgrid_activity.py): with a
    key, an e-mail submit whose outcome is unknown is looked up; without one, events only."""

    api_key: SecretOneLine | None = Field(None, alias="HERALD_SENDGRID_API_KEY")
    api_base: Annotated[Url("https://api.sendgrid.com"), AfterValidator(no_trailing_slash)] = Field(  # type: ignore[valid-type]
        "https://api.sendgrid.com", alias="HERALD_SENDGRID_API_BASE"
    )
    # How long after acceptance a message is surely listed in the feed (SendGrid documents none).
    lag_seconds: PositiveSeconds(86_400) = Field(600.0, alias="HERALD_SENDGRID_ACTIVITY_LAG")  # type: ignore[valid-type]
    # SendGrid: "The current limit is 6 requests per minute" for this API; paced per process.
    requests_per_minute: Count(6000) = Field(6, alias="HERALD_SENDGRID_ACTIVITY_REQUESTS_PER_MINUTE")  # type: ignore[valid-type]
    # Each request's own bound (no variable: the feed answers in well under a second or not at all).
    timeout: float = Field(default=10.0, gt=0, le=60)


