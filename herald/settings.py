"""The one module that reads the environment.

Every address, namespace, credential and TLS setting is a variable here, so the
same code runs against the local stack, a Temporal cluster or Temporal Cloud, a
managed PostgreSQL and the real Twilio API. The local launcher sets these from
``temporal-dev.yaml``; production sets them from its secret store.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretBytes, SecretStr

from herald.fault_points import FaultPoint
from herald.outcomes import Frozen

REPO_ROOT = Path(__file__).resolve().parent.parent


class CodecSettings(Frozen):
    """Payload encryption keys (herald/payload_codec.py): key id -> 32-byte AES-256 key.

    The active key encrypts; every key decrypts, so an old key kept here keeps its histories
    readable after a rotation. No keys: payloads reach Temporal in plaintext, as before.
    """

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    active_key: str | None = None


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
    # Here rather than beside it: every connect(settings.temporal) then encrypts, none can forget to.
    codec: CodecSettings = CodecSettings()


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


class TelemetrySettings(Frozen):
    """Where metrics are served and traces sent; every part is off or local unless set."""

    # host:port of the worker's Prometheus endpoint (Temporal SDK metrics and the worker's own
    # Herald metrics); None: the worker serves no metrics. One address per worker process.
    worker_metrics_address: str | None = None
    # The ledger exporter (`python -m herald.metrics`): one per deployment, the ledger is shared.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9465
    # A scrape's ledger queries are cancelled by PostgreSQL after this: a slow ledger costs one
    # failed scrape (herald_ledger_up 0), never a pile of queries behind each other.
    metrics_query_timeout: float = Field(default=5.0, gt=0, le=60)
    # OTLP/gRPC collector URL for traces; None: no traces.
    otlp_endpoint: str | None = None
    # OTEL_SERVICE_NAME; None: each process names itself (herald-worker, herald-receipts).
    service_name: str | None = None


class CodecServerSettings(Frozen):
    """`python -m herald.codec_server`, which decrypts payloads for the Web UI and the CLI."""

    host: str = "127.0.0.1"
    # 8238, not 8236: the local stack's Temporal serves its metrics on 8236.
    port: int = 8238
    # The Web UI calls the codec server from the browser: its origin, as typed in the address bar.
    cors_origins: tuple[str, ...] = ("http://127.0.0.1:8233", "http://localhost:8233")
    # When set, only requests carrying `Authorization: Bearer <token>` see plaintext.
    token: SecretStr | None = None


class Settings(Frozen):
    temporal: TemporalSettings = TemporalSettings()
    twilio: TwilioSettings = TwilioSettings()
    email: EmailSettings = EmailSettings()
    receipts: ReceiptSettings = ReceiptSettings()
    codec_server: CodecServerSettings = CodecServerSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
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


def _address(env: Mapping[str, str], name: str) -> str | None:
    """A host:port to listen on ([::1]:9464 for IPv6); unset or empty is None."""
    raw = _opt(env, name)
    if raw is None:
        return None
    host, _, port = raw.rpartition(":")
    if not (host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65_535) or " " in host:
        raise InvalidSetting(name, "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:9464")
    return raw


def _url(env: Mapping[str, str], *names: str) -> str | None:
    """The first of `names` that is set, as an http(s) URL with a host; unset or empty is None."""
    for name in names:
        raw = _opt(env, name)
        if raw is None:
            continue
        scheme, _, rest = raw.partition("://")
        if scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
            raise InvalidSetting(name, "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4317")
        return raw
    return None


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


def _items(env: Mapping[str, str], name: str) -> list[str]:
    """A comma-separated list; blanks around and between items are dropped."""
    return [item.strip() for item in env.get(name, "").split(",") if item.strip()]


_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_CODEC_KEY_BYTES = 32  # AES-256


def _codec_key(name: str, where: str, entry: str, keys: dict[str, SecretBytes]) -> None:
    """Add one `id:base64key` entry to `keys`. A refusal may name the id, never the key."""
    key_id, colon, encoded = (part.strip() for part in entry.partition(":"))
    if not colon or not _KEY_ID.fullmatch(key_id):
        raise InvalidSetting(name, f"{where}each key must be id:base64key, the id 1-64 letters, digits, '.', '_' or '-'")
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise InvalidSetting(name, f"{where}key {key_id}: must be standard base64") from None
    if len(key) != _CODEC_KEY_BYTES:
        raise InvalidSetting(name, f"{where}key {key_id}: must decode to 32 bytes (AES-256), not {len(key)}")
    if key_id in keys:
        raise InvalidSetting(name, f"{where}key id {key_id} is given twice")
    keys[key_id] = SecretBytes(key)


def _codec(env: Mapping[str, str]) -> CodecSettings:
    """Keys from HERALD_CODEC_KEYS, then from each file of HERALD_CODEC_KEY_FILES (mounted secrets)."""
    keys: dict[str, SecretBytes] = {}
    for entry in _items(env, "HERALD_CODEC_KEYS"):
        _codec_key("HERALD_CODEC_KEYS", "", entry, keys)
    for path in _items(env, "HERALD_CODEC_KEY_FILES"):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not UTF-8 text"
            raise InvalidSetting("HERALD_CODEC_KEY_FILES", f"{path}: cannot be read ({reason})") from None
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                _codec_key("HERALD_CODEC_KEY_FILES", f"{path} line {number}: ", line, keys)
    active = _opt(env, "HERALD_CODEC_ACTIVE_KEY")
    if active is not None and active not in keys:
        # An active id without its key must not quietly mean "no encryption".
        held = ", ".join(keys) or "none"
        raise InvalidSetting(
            "HERALD_CODEC_ACTIVE_KEY",
            f"must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES (configured ids: {held})",
        )
    return CodecSettings(keys=keys, active_key=active or next(iter(keys), None))


def _origins(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    origins = tuple(origin.rstrip("/") for origin in _items(env, name))
    for origin in origins:
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
            raise InvalidSetting(name, "each origin must be scheme://host[:port], no path and no wildcard, like http://127.0.0.1:8233")
    return origins or default


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
        codec=_codec(env),
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
    telemetry = TelemetrySettings(
        worker_metrics_address=_address(env, "HERALD_WORKER_METRICS_ADDRESS"),
        metrics_host=env.get("HERALD_METRICS_HOST", TelemetrySettings().metrics_host),
        metrics_port=_port(env, "HERALD_METRICS_PORT", TelemetrySettings().metrics_port),
        metrics_query_timeout=_positive_seconds(
            env, "HERALD_METRICS_QUERY_TIMEOUT", TelemetrySettings().metrics_query_timeout, maximum=60
        ),
        # Herald's own name first; the OpenTelemetry standard variable otherwise.
        otlp_endpoint=_url(env, "HERALD_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        service_name=_opt(env, "OTEL_SERVICE_NAME"),
    )
    codec_server = CodecServerSettings(
        host=env.get("HERALD_CODEC_SERVER_HOST", CodecServerSettings().host),
        port=_port(env, "HERALD_CODEC_SERVER_PORT", CodecServerSettings().port),
        cors_origins=_origins(env, "HERALD_CODEC_SERVER_CORS_ORIGINS", CodecServerSettings().cors_origins),
        token=_opt(env, "HERALD_CODEC_SERVER_TOKEN"),
    )
    return Settings(
        temporal=temporal,
        twilio=twilio,
        email=email,
        receipts=receipts,
        codec_server=codec_server,
        telemetry=telemetry,
        database_url=_opt(env, "DATABASE_URL"),
        outbox_database_url=_opt(env, "HERALD_OUTBOX_DATABASE_URL"),
        outbox_lease_seconds=_seconds(env, "HERALD_OUTBOX_LEASE_SECONDS", 30.0, maximum=3600) or 30.0,
        state_dir=Path(env.get("HERALD_STATE_DIR", str(REPO_ROOT / ".state"))),
        fault_point=_opt(env, "HERALD_FAULT_POINT"),
        fault_point_marker=_opt(env, "HERALD_FAULT_POINT_MARKER"),
    )
