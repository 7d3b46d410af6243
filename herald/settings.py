"""The one module that reads the environment.

Every address, namespace, credential and TLS setting is a variable here, so the
same code runs against the local stack, a Temporal cluster or Temporal Cloud, a
managed PostgreSQL and the real Twilio API. The local launcher sets these from
``temporal-dev.yaml``; production sets them from its secret store.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr

from herald.fault_points import FaultPoint
from herald.outcomes import Frozen

REPO_ROOT = Path(__file__).resolve().parent.parent


class TemporalSettings(Frozen):
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "herald-notifications"
    # TLS for a real cluster: a CA to trust and, for mTLS, a client certificate and key.
    tls: bool = False
    tls_ca_path: Path | None = None
    tls_cert_path: Path | None = None
    tls_key_path: Path | None = None
    # Temporal Cloud API key authentication (implies TLS).
    api_key: SecretStr | None = None


class TwilioSettings(Frozen):
    api_base: str = "https://api.twilio.com"
    account_sid: str = ""
    auth_token: SecretStr = SecretStr("")
    from_number: str | None = None
    messaging_service_sid: str | None = None
    connect_timeout: float = 3.0
    read_timeout: float = 10.0
    max_in_flight: int = 16
    # Provider submits per second for this sender, enforced by the Temporal server on the submit
    # task queue across every worker polling it (herald/task_queues.py). None = unlimited. Every
    # worker must set the same value: the server keeps the one the latest poll carried.
    submit_rate_limit: float | None = Field(default=None, gt=0)


class EmailSettings(Frozen):
    """The SMTP relay e-mail intents are handed to, and whether its ESP posts events about them.

    Any relay works (Amazon SES, SendGrid, Postmark, Mailgun, a company's Postfix); None of host
    means the e-mail channel is not configured and the worker refuses e-mail submits as permanent.
    """

    smtp_host: str | None = None
    smtp_port: int = Field(default=587, ge=1, le=65_535)
    # starttls (submission port 587), tls (implicit TLS, 465) or none (loopback relays only).
    smtp_security: str = Field(default="starttls", pattern=r"^(starttls|tls|none)$")
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    # Required with smtp_host: the sender every e-mail carries (an address the relay lets us use).
    from_address: str | None = None
    # The right-hand side of our Message-IDs: a domain we control.
    message_id_domain: str = "herald.invalid"
    # How the ledger names the ESP whose events report on these messages.
    provider: str = "sendgrid"
    # False for a relay that posts no delivery events: an accepted message then ends `relayed`.
    delivery_events: bool = True
    connect_timeout: float = 10.0
    read_timeout: float = 30.0


class ReceiptSettings(Frozen):
    host: str = "127.0.0.1"
    port: int = 8235
    # The base URL the provider calls, exactly as it calls it: Twilio signs the full URL,
    # so behind a proxy this is the public address, not the bind address.
    public_url: str = "http://127.0.0.1:8235"
    # A non-final report (Twilio's `sent`) is held this long so that the final report, when it
    # follows quickly, travels in the same signal: one billed Temporal action instead of two.
    # Final reports are never held. 0 signals every report at once.
    hold_seconds: float = Field(default=2.0, ge=0, le=60)
    # A report not committed within this is answered 503 (a hung database must not hang the
    # provider's request past its own 15 s timeout; the provider redelivers).
    store_timeout: float = Field(default=5.0, gt=0, le=14)
    # SendGrid's Signed Event Webhook verification key (base64 DER or PEM, from SendGrid's
    # settings page); None refuses every e-mail event (nothing unsigned is ever stored).
    sendgrid_public_key: str | None = None


class Settings(Frozen):
    temporal: TemporalSettings = TemporalSettings()
    twilio: TwilioSettings = TwilioSettings()
    email: EmailSettings = EmailSettings()
    receipts: ReceiptSettings = ReceiptSettings()
    # None means "start the embedded PostgreSQL under state_dir".
    database_url: SecretStr | None = None
    # The service database holding herald_outbox, for the outbox relay (and the report's backlog line).
    outbox_database_url: SecretStr | None = None
    # How long a relay holds the rows it claimed; a relay that dies hands them on after this.
    outbox_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    state_dir: Path = REPO_ROOT / ".state"
    # Fault-matrix tests only: a crash point in the worker, and the marker file that makes it fire once.
    fault_point: FaultPoint | None = None
    fault_point_marker: Path | None = None


class InvalidSetting(ValueError):
    """An environment variable holds a value Herald cannot use; the message names it and the rule."""

    def __init__(self, name: str, rule: str) -> None:
        self.name = name
        super().__init__(f"{name}: {rule}")


def _opt(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _seconds(env: Mapping[str, str], name: str, default: float, *, maximum: float) -> float:
    """A duration in seconds between 0 and `maximum`; unset or empty keeps the default."""
    raw = _opt(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= maximum:  # also refuses NaN
        raise InvalidSetting(name, f"must be a number of seconds from 0 to {maximum:g}")
    return value


def _positive_seconds(env: Mapping[str, str], name: str, default: float, *, maximum: float) -> float:
    value = _seconds(env, name, default, maximum=maximum)
    if value == 0:
        raise InvalidSetting(name, f"must be a number of seconds above 0, at most {maximum:g}")
    return value


def _rate(env: Mapping[str, str], name: str) -> float | None:
    """A per-second rate: unset, empty or 0 means unlimited (None)."""
    raw = _opt(env, name)
    if raw is None:
        return None
    try:
        rate = float(raw)
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or rate < 0:
        raise InvalidSetting(name, "must be a number of messages per second, at least 0 (0 or unset: unlimited)")
    return rate or None


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _opt(env, name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 65_535):
        raise InvalidSetting(name, "must be a port number from 1 to 65535")
    return int(raw)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A yes/no setting; anything but the listed spellings is refused (a typo must not mean "off")."""
    raw = _opt(env, name)
    if raw is None:
        return False
    if raw.lower() not in _TRUE + _FALSE:
        raise InvalidSetting(name, "must be one of " + ", ".join(_TRUE + _FALSE))
    return raw.lower() in _TRUE


def _timeout(env: Mapping[str, str], name: str, default: float) -> float:
    """A timeout in seconds, above 0 and at most 600."""
    value = _seconds(env, name, default, maximum=600)
    if value <= 0:
        raise InvalidSetting(name, "must be a number of seconds from 0 to 600")
    return value


def _count(env: Mapping[str, str], name: str, default: int, *, maximum: int) -> int:
    raw = _opt(env, name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= maximum):
        raise InvalidSetting(name, f"must be a whole number from 1 to {maximum}")
    return int(raw)


def _choice(env: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = _opt(env, name)
    if raw is None:
        return default
    if raw.lower() not in allowed:
        raise InvalidSetting(name, "must be one of " + ", ".join(allowed))
    return raw.lower()


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read every HERALD_* variable (and DATABASE_URL); unset ones keep local-stack defaults."""
    env = os.environ if env is None else env
    temporal = TemporalSettings(
        address=env.get("HERALD_TEMPORAL_ADDRESS", TemporalSettings().address),
        namespace=env.get("HERALD_TEMPORAL_NAMESPACE", TemporalSettings().namespace),
        task_queue=env.get("HERALD_TASK_QUEUE", TemporalSettings().task_queue),
        tls=_flag(env, "HERALD_TEMPORAL_TLS"),
        tls_ca_path=_opt(env, "HERALD_TEMPORAL_TLS_CA"),
        tls_cert_path=_opt(env, "HERALD_TEMPORAL_TLS_CERT"),
        tls_key_path=_opt(env, "HERALD_TEMPORAL_TLS_KEY"),
        api_key=_opt(env, "HERALD_TEMPORAL_API_KEY"),
    )
    twilio = TwilioSettings(
        api_base=env.get("HERALD_TWILIO_API_BASE", TwilioSettings().api_base),
        account_sid=env.get("HERALD_TWILIO_ACCOUNT_SID", ""),
        auth_token=SecretStr(env.get("HERALD_TWILIO_AUTH_TOKEN", "")),
        from_number=_opt(env, "HERALD_TWILIO_FROM"),
        messaging_service_sid=_opt(env, "HERALD_TWILIO_MESSAGING_SERVICE_SID"),
        connect_timeout=_timeout(env, "HERALD_TWILIO_CONNECT_TIMEOUT", TwilioSettings().connect_timeout),
        read_timeout=_timeout(env, "HERALD_TWILIO_READ_TIMEOUT", TwilioSettings().read_timeout),
        max_in_flight=_count(env, "HERALD_TWILIO_MAX_IN_FLIGHT", TwilioSettings().max_in_flight, maximum=1024),
        submit_rate_limit=_rate(env, "HERALD_SUBMIT_RATE_LIMIT"),
    )
    email = EmailSettings(
        smtp_host=_opt(env, "HERALD_SMTP_HOST"),
        smtp_port=_port(env, "HERALD_SMTP_PORT", EmailSettings().smtp_port),
        smtp_security=_choice(env, "HERALD_SMTP_SECURITY", ("starttls", "tls", "none"), "starttls"),
        smtp_username=_opt(env, "HERALD_SMTP_USERNAME"),
        smtp_password=_opt(env, "HERALD_SMTP_PASSWORD"),
        from_address=_opt(env, "HERALD_EMAIL_FROM"),
        message_id_domain=env.get("HERALD_EMAIL_MESSAGE_ID_DOMAIN", EmailSettings().message_id_domain),
        provider=env.get("HERALD_EMAIL_PROVIDER", EmailSettings().provider),
        delivery_events=_choice(env, "HERALD_EMAIL_DELIVERY_EVENTS", ("true", "false"), "true") == "true",
        connect_timeout=_seconds(env, "HERALD_SMTP_CONNECT_TIMEOUT", EmailSettings().connect_timeout, maximum=300),
        read_timeout=_seconds(env, "HERALD_SMTP_READ_TIMEOUT", EmailSettings().read_timeout, maximum=600),
    )
    receipts = ReceiptSettings(
        host=env.get("HERALD_RECEIPT_HOST", ReceiptSettings().host),
        port=_port(env, "HERALD_RECEIPT_PORT", ReceiptSettings().port),
        public_url=env.get("HERALD_RECEIPT_PUBLIC_URL", ReceiptSettings().public_url).rstrip("/"),
        hold_seconds=_seconds(env, "HERALD_RECEIPT_HOLD_SECONDS", ReceiptSettings().hold_seconds, maximum=60),
        store_timeout=_positive_seconds(env, "HERALD_RECEIPT_STORE_TIMEOUT", ReceiptSettings().store_timeout, maximum=14),
        sendgrid_public_key=_opt(env, "HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY"),
    )
    return Settings(
        temporal=temporal,
        twilio=twilio,
        email=email,
        receipts=receipts,
        database_url=_opt(env, "DATABASE_URL"),
        outbox_database_url=_opt(env, "HERALD_OUTBOX_DATABASE_URL"),
        outbox_lease_seconds=_seconds(env, "HERALD_OUTBOX_LEASE_SECONDS", 30.0, maximum=3600) or 30.0,
        state_dir=Path(env.get("HERALD_STATE_DIR", str(REPO_ROOT / ".state"))),
        fault_point=_opt(env, "HERALD_FAULT_POINT"),
        fault_point_marker=_opt(env, "HERALD_FAULT_POINT_MARKER"),
    )
