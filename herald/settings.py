"""Herald's settings: one nested model, read from the environment by ``load_settings``.

Every address, namespace, credential and TLS setting is a variable, so the same code runs against
the local stack, a Temporal cluster or Temporal Cloud, a managed PostgreSQL and the real Twilio API.
The local launcher sets these from ``temporal-dev.yaml`` (devstack builds them from these sections);
production sets them from its secret store.

Each section is what one part takes, whole: ``TwilioSettings`` is the Twilio adapter's config,
``EmailSettings`` the SMTP adapter's, ``SendGridActivitySettings`` the Email Activity feed's,
``ReceiptSettings`` the receipt server's, ``OutboxSettings`` the relay's, and so on. Each field
names the variable that sets it (its alias), its default (the one place it is written) and its
shape with the sentence that refuses a bad value (herald/setting_rules.py); ``herald.variables``
reads them, and a bad value is a single ``InvalidSetting`` line naming the variable and the rule.
Blank is unset: ``HERALD_X=`` keeps the default, like an absent variable, and values are stripped.

One section is read in two steps: Temporal's connection. ``TemporalVariables`` holds Herald's own
HERALD_TEMPORAL_* variables beside Temporal's TEMPORAL_* ones, which Temporal's own loader
(``herald.temporal_profile``) reads together with a TOML profile; ``TemporalSettings`` is what
both say, one setting at a time, Herald's variable winning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    EmailStr,
    Field,
    ModelWrapValidatorHandler,
    SecretBytes,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from temporalio.envconfig import ClientConfigProfile, DataSource

from herald.outcomes import Frozen
from herald.providers import sendgrid_signature
from herald.setting_rules import (
    ACCOUNT_SID_PATTERN,
    MESSAGING_SERVICE_SID_PATTERN,
    ONE_LINE,
    Count,
    DatabaseUrl,
    DirectoryPath,
    Flag,
    Host,
    ListenAddress,
    Lowercase,
    OneLine,
    Pem,
    Port,
    PositiveSeconds,
    ReadableFile,
    Rule,
    Seconds,
    SecretOneLine,
    SecretPem,
    TemporalAddress,
    TemporalFlag,
    TemporalNamespace,
    Timeout,
    Token,
    Url,
    refusal,
)
from herald.temporal_profile import load_profile
from herald.variables import GRPC_META_PREFIX, Section, given_variables, items, keyring, read_section, rules_of
from herald.variables import InvalidSetting as InvalidSetting  # every entry point catches it from here

REPO_ROOT = Path(__file__).resolve().parent.parent

# Where every server of a deployment listens unless told otherwise: loopback, so nothing is
# exposed by default. The ports are each server's own (devstack/config.py reads them from here).
LOOPBACK = "127.0.0.1"
TEMPORAL_PORT = 7233
# The Temporal Web UI (the dev server's); the codec server lets it read decrypted payloads.
TEMPORAL_UI_PORT = 8233
RECEIPT_PORT = 8235
# 8238, not 8236: the local stack's Temporal serves its metrics on 8236.
CODEC_SERVER_PORT = 8238
LEDGER_METRICS_PORT = 9465


def _no_trailing_slash(value: str) -> str:
    return value.rstrip("/")


# ---- payload keys and fingerprint keys -----------------------------------------------------------


def _read_keyring(data: Any, prefix: str, purpose: str) -> Any:
    """<prefix>_KEYS and <prefix>_KEY_FILES, when given, parsed together into `keys` (an id may not
    repeat across the two, and the active key may name either)."""
    if not isinstance(data, dict) or not {f"{prefix}_KEYS", f"{prefix}_KEY_FILES", f"{prefix}_ACTIVE_KEY"} & set(data):
        return data
    data = dict(data)
    entries, files = data.pop(f"{prefix}_KEYS", None), data.pop(f"{prefix}_KEY_FILES", None)
    data["keys"] = keyring(entries, files, data.get(f"{prefix}_ACTIVE_KEY"), prefix=prefix, purpose=purpose)
    return data


_KEY_ENTRIES = Annotated[str, Rule("must be id:base64key entries separated by commas")]
_KEY_FILES = Annotated[str, Rule("must be paths of key files separated by commas")]


class CodecSettings(Section):
    """Payload encryption keys (herald/payload_codec.py): key id -> 32-byte AES-256 key.

    The active key encrypts; every key decrypts, so an old key kept here keeps its histories
    readable after a rotation. No keys: payloads reach Temporal in plaintext, as before.
    """

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    # Unset: the first key. Must be the id of one of the keys.
    active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES")
    ] | None = Field(None, alias="HERALD_CODEC_ACTIVE_KEY")
    # Where `keys` come from: id:base64key entries, and files holding one a line. Read into `keys`.
    key_entries: _KEY_ENTRIES | None = Field(None, alias="HERALD_CODEC_KEYS", exclude=True, repr=False)
    key_files: _KEY_FILES | None = Field(None, alias="HERALD_CODEC_KEY_FILES", exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_keys(cls, data: Any) -> Any:
        data = _read_keyring(data, "HERALD_CODEC", "AES-256")
        if isinstance(data, dict) and "keys" in data and data.get("HERALD_CODEC_ACTIVE_KEY") is None:
            data["HERALD_CODEC_ACTIVE_KEY"] = next(iter(data["keys"]), None)
        return data


class FingerprintSettings(Section):
    """Fingerprint keys (herald/fingerprints.py): id -> 32-byte HMAC key; the active one writes.

    A keyring of its own: a payload key and a fingerprint key are never the same secret.
    """

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_FINGERPRINT_KEYS or HERALD_FINGERPRINT_KEY_FILES")
    ] | None = Field(None, alias="HERALD_FINGERPRINT_ACTIVE_KEY")
    key_entries: _KEY_ENTRIES | None = Field(None, alias="HERALD_FINGERPRINT_KEYS", exclude=True, repr=False)
    key_files: _KEY_FILES | None = Field(None, alias="HERALD_FINGERPRINT_KEY_FILES", exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_keys(cls, data: Any) -> Any:
        return _read_keyring(data, "HERALD_FINGERPRINT", "HMAC-SHA-256")


class KeyEncryptionSettings(Section):
    """Key-encryption keys (herald/key_encryption.py): id -> 32-byte AES-256 key; the active one
    wraps each new recipient data key, every one unwraps.

    A keyring of its own, never a payload or fingerprint key, and never in the ledger: a copy of the
    database without these opens no recipient's data key.
    """

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_KEY_ENCRYPTION_KEYS or HERALD_KEY_ENCRYPTION_KEY_FILES")
    ] | None = Field(None, alias="HERALD_KEY_ENCRYPTION_ACTIVE_KEY")
    key_entries: _KEY_ENTRIES | None = Field(None, alias="HERALD_KEY_ENCRYPTION_KEYS", exclude=True, repr=False)
    key_files: _KEY_FILES | None = Field(None, alias="HERALD_KEY_ENCRYPTION_KEY_FILES", exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_keys(cls, data: Any) -> Any:
        return _read_keyring(data, "HERALD_KEY_ENCRYPTION", "AES-256")


def is_https_url(value: str) -> bool:
    """Whether `value` is an https:// URL with a host: the only link RFC 8058 mail clients post to."""
    scheme, _, rest = value.partition("://")
    return scheme.lower() == "https" and bool(rest.split("/")[0])


def _https(value: str) -> str:
    if not is_https_url(value):
        raise ValueError("not an https URL")
    return value


_UNSUBSCRIBE_URL_RULE = (
    "must be an https:// URL with a host (RFC 8058: mail clients post only to HTTPS), e.g. https://hooks.example.com"
)
# Unset, the links fall back to the receipt server's public URL, which is held to the same rule.
_UNSUBSCRIBE_FALLBACK_RULE = (
    "required when HERALD_UNSUBSCRIBE_KEYS are set and HERALD_RECEIPT_PUBLIC_URL, which the links fall back "
    "to, is not https:// (RFC 8058: mail clients post only to HTTPS); set an https:// URL, "
    "e.g. https://hooks.example.com"
)


def _days(value: Any) -> Any:
    """Digits only, as every whole-number variable (int() would also take "+60" and "6_0")."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("not a whole number")
    return value


class UnsubscribeSettings(Section):
    """One-click unsubscribe links in marketing e-mail (herald/unsubscribe.py): the keys that sign
    and verify their tokens, where the links point, how long they work.

    One set of variables, held whole by two sections: the e-mail section's (the SMTP adapter signs)
    and the receipt server's (it verifies). A keyring of its own: neither a fingerprint key nor a
    payload key (herald/unsubscribe.py says why). Without keys, marketing e-mail is refused, never
    sent without its unsubscribe link, and the receipt server refuses every link.
    """

    keys: dict[str, SecretBytes] = Field(default_factory=dict)
    active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_UNSUBSCRIBE_KEYS or HERALD_UNSUBSCRIBE_KEY_FILES")
    ] | None = Field(None, alias="HERALD_UNSUBSCRIBE_ACTIVE_KEY")
    key_entries: _KEY_ENTRIES | None = Field(None, alias="HERALD_UNSUBSCRIBE_KEYS", exclude=True, repr=False)
    key_files: _KEY_FILES | None = Field(None, alias="HERALD_UNSUBSCRIBE_KEY_FILES", exclude=True, repr=False)
    # The public base the links are built on, where the receipt server's /unsubscribe/ path is
    # reached from the internet. HTTPS: RFC 8058 clients post only to an https URI. None: the
    # receipt server's public URL (HERALD_RECEIPT_PUBLIC_URL), which must then be https:// (Settings).
    url: Annotated[
        str, AfterValidator(_https), AfterValidator(_no_trailing_slash), Rule(_UNSUBSCRIBE_URL_RULE)
    ] | None = Field(None, alias="HERALD_UNSUBSCRIBE_URL")
    # An address that also takes unsubscribe requests by mail (listed after the link; Herald does not
    # read that mailbox: whoever does can post the token in the subject to the link).
    mailto: Annotated[EmailStr, Rule("must be an e-mail address, e.g. unsubscribe@example.com")] | None = Field(
        None, alias="HERALD_UNSUBSCRIBE_MAILTO"
    )
    # How long a link works after its message was sent. At least 30 days: CAN-SPAM requires an
    # opt-out to work for 30 days after the message, and a person may read a newsletter weeks late.
    ttl_days: Annotated[
        int,
        BeforeValidator(_days),
        Field(ge=30, le=3650),
        Rule("must be a whole number of days from 30 to 3650 (an unsubscribe link must work for 30 days)"),
    ] = Field(60, alias="HERALD_UNSUBSCRIBE_TTL_DAYS")

    @model_validator(mode="before")
    @classmethod
    def _read_keys(cls, data: Any) -> Any:
        return _read_keyring(data, "HERALD_UNSUBSCRIBE", "HMAC-SHA-256")


# ---- Temporal ------------------------------------------------------------------------------------


def _grpc_meta(value: Any) -> Any:
    """Each TEMPORAL_GRPC_META_<NAME>, kept under its variable's name for Temporal's loader."""
    if isinstance(value, Mapping):
        for name, entry in value.items():
            if any(character in entry for character in "\r\n\0"):
                raise refusal(ONE_LINE, name)
    return value


class TemporalVariables(Section):
    """The variables Temporal's connection is read from: Herald's own names, each of which, when set,
    wins over Temporal's, and Temporal's, handed to temporalio.envconfig by herald/temporal_profile.py
    (https://docs.temporal.io/references/client-environment-configuration)."""

    herald_temporal_address: TemporalAddress | None = Field(None, alias="HERALD_TEMPORAL_ADDRESS")
    herald_temporal_namespace: TemporalNamespace | None = Field(None, alias="HERALD_TEMPORAL_NAMESPACE")
    herald_task_queue: Annotated[
        str, Field(pattern=r"^\S{1,1000}$"), Rule("must be 1 to 1000 characters, none of them whitespace")
    ] | None = Field(None, alias="HERALD_TASK_QUEUE")
    herald_temporal_tls: Flag | None = Field(None, alias="HERALD_TEMPORAL_TLS")
    herald_temporal_tls_ca: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_CA")
    herald_temporal_tls_cert: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_CERT")
    herald_temporal_tls_key: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_KEY")
    herald_temporal_api_key: Token | None = Field(None, alias="HERALD_TEMPORAL_API_KEY")

    temporal_config_file: ReadableFile | None = Field(None, alias="TEMPORAL_CONFIG_FILE")
    temporal_profile: Annotated[
        str, Field(pattern=r"^[A-Za-z0-9._-]{1,128}$"), Rule("must be a profile name: letters, digits, '.', '-' or '_'")
    ] | None = Field(None, alias="TEMPORAL_PROFILE")
    temporal_address: TemporalAddress | None = Field(None, alias="TEMPORAL_ADDRESS")
    temporal_namespace: TemporalNamespace | None = Field(None, alias="TEMPORAL_NAMESPACE")
    temporal_api_key: Token | None = Field(None, alias="TEMPORAL_API_KEY")
    temporal_tls: TemporalFlag | None = Field(None, alias="TEMPORAL_TLS")
    temporal_tls_server_name: Host | None = Field(None, alias="TEMPORAL_TLS_SERVER_NAME")
    temporal_tls_server_ca_cert_path: ReadableFile | None = Field(None, alias="TEMPORAL_TLS_SERVER_CA_CERT_PATH")
    temporal_tls_server_ca_cert_data: Pem | None = Field(None, alias="TEMPORAL_TLS_SERVER_CA_CERT_DATA")
    temporal_tls_client_cert_path: ReadableFile | None = Field(None, alias="TEMPORAL_TLS_CLIENT_CERT_PATH")
    temporal_tls_client_cert_data: Pem | None = Field(None, alias="TEMPORAL_TLS_CLIENT_CERT_DATA")
    temporal_tls_client_key_path: ReadableFile | None = Field(None, alias="TEMPORAL_TLS_CLIENT_KEY_PATH")
    temporal_tls_client_key_data: SecretPem | None = Field(None, alias="TEMPORAL_TLS_CLIENT_KEY_DATA")
    # Every TEMPORAL_GRPC_META_<NAME>: a header on every call (Temporal's loader derives its name).
    temporal_grpc_meta: Annotated[dict[str, str], BeforeValidator(_grpc_meta), Rule(ONE_LINE)] = Field(
        default_factory=dict, alias=GRPC_META_PREFIX + "*"
    )
    # Read here, carried by TemporalSettings: every connect(settings.temporal) then encrypts.
    codec: CodecSettings = CodecSettings()

    @model_validator(mode="after")
    def _one_source_each(self) -> TemporalVariables:
        for path, data in (
            ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA"),
            ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA"),
            ("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA"),
        ):
            if getattr(self, path.lower()) is not None and getattr(self, data.lower()) is not None:
                raise refusal(f"cannot be set together with {path}: one source per certificate or key", data)
        return self


class TemporalSettings(Frozen):
    """The connection every client and worker makes (herald/temporal_client.py), resolved from
    TemporalVariables and Temporal's profile by ``load_settings``."""

    address: str = f"{LOOPBACK}:{TEMPORAL_PORT}"
    namespace: str = "default"
    task_queue: str = "herald-notifications"
    # TLS for a real cluster: a CA to trust and, for mTLS, a client certificate and key, each
    # from a file or, from a Temporal profile or TEMPORAL_TLS_*_DATA, as the PEM itself.
    tls: bool = False
    tls_ca_path: Path | None = None
    tls_cert_path: Path | None = None
    tls_key_path: Path | None = None
    tls_ca_data: bytes | None = None
    tls_cert_data: bytes | None = None
    tls_key_data: SecretBytes | None = None
    # SNI and certificate name override (a profile's tls.server_name, TEMPORAL_TLS_SERVER_NAME).
    tls_server_name: str | None = None
    # Temporal Cloud API key authentication (implies TLS).
    api_key: SecretStr | None = None
    # gRPC headers on every call (a profile's grpc_meta, TEMPORAL_GRPC_META_*); may carry credentials.
    rpc_metadata: dict[str, SecretStr] = Field(default_factory=dict)
    # Here rather than beside it: every connect(settings.temporal) then encrypts, none can forget to.
    codec: CodecSettings = CodecSettings()


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

    api_base: Annotated[Url("https://api.twilio.com"), AfterValidator(_no_trailing_slash)] = Field(  # type: ignore[valid-type]
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
    # task queue across every worker polling it (herald/task_queues.py). None (or 0) = unlimited.
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
    api_base: Annotated[Url("https://api.sendgrid.com"), AfterValidator(_no_trailing_slash)] = Field(  # type: ignore[valid-type]
        "https://api.sendgrid.com", alias="HERALD_SENDGRID_API_BASE"
    )
    # How long after acceptance a message is surely listed in the feed (SendGrid documents none).
    lag_seconds: PositiveSeconds(86_400) = Field(600.0, alias="HERALD_SENDGRID_ACTIVITY_LAG")  # type: ignore[valid-type]
    # SendGrid: "The current limit is 6 requests per minute" for this API; paced per process.
    requests_per_minute: Count(6000) = Field(6, alias="HERALD_SENDGRID_ACTIVITY_REQUESTS_PER_MINUTE")  # type: ignore[valid-type]
    # Each request's own bound (no variable: the feed answers in well under a second or not at all).
    timeout: float = Field(default=10.0, gt=0, le=60)


# ---- the servers -----------------------------------------------------------------------------


def _sendgrid_key(value: str) -> str:
    sendgrid_signature.load_public_key(value)  # ValueError when it is not a P-256 public key
    return value


class ReceiptSettings(Section):
    """The receipt server (`python -m herald.receipts`, herald/receipts/app.py)."""

    host: Host = Field(LOOPBACK, alias="HERALD_RECEIPT_HOST")
    port: Port = Field(RECEIPT_PORT, alias="HERALD_RECEIPT_PORT")
    # The base URL the provider calls, exactly as it calls it: Twilio signs the full URL,
    # so behind a proxy this is the public address, not the bind address.
    public_url: Annotated[Url("https://hooks.example.com"), AfterValidator(_no_trailing_slash)] = Field(  # type: ignore[valid-type]
        f"http://{LOOPBACK}:{RECEIPT_PORT}", alias="HERALD_RECEIPT_PUBLIC_URL"
    )
    # A non-final report (Twilio's `sent`) is held this long so that the final report, when it
    # follows quickly, travels in the same signal: one billed Temporal action instead of two.
    # Final reports are never held. 0 signals every report at once.
    hold_seconds: Seconds(60) = Field(2.0, alias="HERALD_RECEIPT_HOLD_SECONDS")  # type: ignore[valid-type]
    # A report not committed within this is answered 503 (a hung database must not hang the
    # provider's request past its own 15 s timeout; the provider redelivers).
    store_timeout: PositiveSeconds(14) = Field(5.0, alias="HERALD_RECEIPT_STORE_TIMEOUT")  # type: ignore[valid-type]
    # Whether /twilio/inbound answers STOP, START and HELP with a short text of its own. Off: Twilio's
    # default keyword handling (or Advanced Opt-Out) answers the person, and a second answer from us
    # would be one text too many; on, for a sender whose keyword handling Twilio has turned off.
    inbound_replies: Flag = Field(False, alias="HERALD_TWILIO_INBOUND_REPLIES")
    # SendGrid's Signed Event Webhook verification key (base64 DER or PEM, from SendGrid's
    # settings page); None refuses every e-mail event (nothing unsigned is ever stored).
    sendgrid_public_key: Annotated[
        str,
        AfterValidator(_sendgrid_key),
        Rule(
            "must be SendGrid's verification key "
            "(ECDSA P-256, base64 DER or PEM, from the Signed Event Webhook settings)"
        ),
    ] | None = Field(None, alias="HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY")
    # The unsubscribe links marketing e-mail carries, verified at /unsubscribe/ (the same variables
    # as the e-mail section's).
    unsubscribe: UnsubscribeSettings = UnsubscribeSettings()


_OTLP_URL = Url("http://127.0.0.1:4317")


class TelemetrySettings(Section):
    """Where metrics are served and traces sent; every part is off or local unless set."""

    # host:port of the worker's Prometheus endpoint (Temporal SDK metrics and the worker's own
    # Herald metrics); None: the worker serves no metrics. One address per worker process.
    worker_metrics_address: ListenAddress | None = Field(None, alias="HERALD_WORKER_METRICS_ADDRESS")
    # The ledger exporter (`python -m herald.metrics`): one per deployment, the ledger is shared.
    metrics_host: Host = Field(LOOPBACK, alias="HERALD_METRICS_HOST")
    metrics_port: Port = Field(LEDGER_METRICS_PORT, alias="HERALD_METRICS_PORT")
    # A scrape's ledger queries are cancelled by PostgreSQL after this: a slow ledger costs one
    # failed scrape (herald_ledger_up 0), never a pile of queries behind each other.
    metrics_query_timeout: PositiveSeconds(60) = Field(5.0, alias="HERALD_METRICS_QUERY_TIMEOUT")  # type: ignore[valid-type]
    # OTLP/gRPC collector URL for traces; None: no traces. Herald's own name first; the
    # OpenTelemetry standard one otherwise (and only then checked: other software in the same
    # environment may read it in a form Herald would refuse).
    otlp_endpoint: _OTLP_URL | None = Field(  # type: ignore[valid-type]
        None, validation_alias=AliasChoices("HERALD_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    # None: each process names itself (herald-worker, herald-receipts).
    service_name: Annotated[
        str, Field(pattern=r"^[^\x00-\x1f\x7f]{1,255}$"), Rule("must be 1 to 255 characters on one line")
    ] | None = Field(None, alias="OTEL_SERVICE_NAME")


_CORS_ORIGINS_RULE = "each origin must be scheme://host[:port], no path and no wildcard, like http://127.0.0.1:8233"
DEFAULT_CORS_ORIGINS = (f"http://{LOOPBACK}:{TEMPORAL_UI_PORT}", f"http://localhost:{TEMPORAL_UI_PORT}")


def _origins(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    origins = tuple(origin.rstrip("/") for origin in items(value))
    for origin in origins:
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin):
            raise ValueError("not an origin")
    return origins or DEFAULT_CORS_ORIGINS


_ALLOWED_HOSTS_RULE = (
    "each entry must be host or host:port, no scheme, path or wildcard, like codec.example.com or 127.0.0.1:8238"
)
# A name, an IPv4 address or a bracketed IPv6 one, then an optional port: what a Host header holds.
_ALLOWED_HOST = re.compile(r"([A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")


def _allowed_hosts(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    hosts = tuple(host.lower() for host in items(value))
    for host in hosts:
        match = _ALLOWED_HOST.fullmatch(host)
        if match is None or (match.group(3) and not 1 <= int(match.group(3)[1:]) <= 65_535):
            raise ValueError("not a host")
    return hosts


class CodecServerSettings(Section):
    """`python -m herald.codec_server`, which decrypts payloads for the Web UI and the CLI."""

    host: Host = Field(LOOPBACK, alias="HERALD_CODEC_SERVER_HOST")
    port: Port = Field(CODEC_SERVER_PORT, alias="HERALD_CODEC_SERVER_PORT")
    # The Web UI calls the codec server from the browser: its origin, as typed in the address bar.
    cors_origins: Annotated[tuple[str, ...], BeforeValidator(_origins), Rule(_CORS_ORIGINS_RULE)] = Field(
        DEFAULT_CORS_ORIGINS, alias="HERALD_CODEC_SERVER_CORS_ORIGINS"
    )
    # When set, only requests carrying `Authorization: Bearer <token>` see plaintext.
    token: Token | None = Field(None, alias="HERALD_CODEC_SERVER_TOKEN")
    # The Host headers it answers (host, any port; or host:port): a page whose name an attacker
    # pointed at this address (DNS rebinding) is refused. Empty: the host:port it binds,
    # 127.0.0.1:port and localhost:port. Behind a proxy, the name the proxy forwards.
    allowed_hosts: Annotated[tuple[str, ...], BeforeValidator(_allowed_hosts), Rule(_ALLOWED_HOSTS_RULE)] = Field(
        (), alias="HERALD_CODEC_SERVER_ALLOWED_HOSTS"
    )


# ---- the outbox relay, worker versioning -------------------------------------------------------

OUTBOX_LEASE_SECONDS = 30.0


def _default_lease_at_zero(value: float) -> float:
    return value or OUTBOX_LEASE_SECONDS  # 0 keeps the default, as it always has


class OutboxSettings(Section):
    """The outbox relay (`python -m herald.outbox`, herald/outbox/relay.py)."""

    # The service database holding herald_outbox (and the report's backlog line); the relay's own login.
    database_url: DatabaseUrl | None = Field(None, alias="HERALD_OUTBOX_DATABASE_URL")
    # How long a relay holds the rows it claimed; a relay that dies hands them on after this.
    lease_seconds: Annotated[Seconds(3600), AfterValidator(_default_lease_at_zero)] = Field(  # type: ignore[valid-type]
        OUTBOX_LEASE_SECONDS, alias="HERALD_OUTBOX_LEASE_SECONDS"
    )


_BOTH_VERSION_VARIABLES = ("HERALD_WORKER_DEPLOYMENT_NAME", "HERALD_WORKER_BUILD_ID")


class WorkerVersionSettings(Section):
    """The Worker Deployment Version the workers poll as (HERALD_WORKER_DEPLOYMENT_NAME and _BUILD_ID).

    Set, the workers opt in to Temporal's Worker Versioning: a workflow runs on the version the
    deployment's current version says, and moves to a newer one at its next workflow task (auto-upgrade).
    """

    # Temporal writes a version as <deployment>.<build id>: the name may not hold the dot.
    deployment_name: Annotated[
        str, Field(pattern=r"^[^.\s]{1,255}$"), Rule("must be 1 to 255 characters, without '.' or whitespace")
    ] = Field(alias="HERALD_WORKER_DEPLOYMENT_NAME")
    build_id: Annotated[
        str, Field(pattern=r"^\S{1,255}$"), Rule("must be 1 to 255 characters, none of them whitespace")
    ] = Field(alias="HERALD_WORKER_BUILD_ID")

    @model_validator(mode="wrap")
    @classmethod
    def _both(cls, data: Any, handler: ModelWrapValidatorHandler[WorkerVersionSettings]) -> WorkerVersionSettings:
        """Both or neither (neither: no section, unversioned workers); half a version is a mistake,
        reported once the half given has passed its own rule."""
        try:
            return handler(data)
        except ValidationError as error:
            given = [name for name in _BOTH_VERSION_VARIABLES if isinstance(data, dict) and name in data]
            if len(given) == 1 and all(problem["type"] == "missing" for problem in error.errors()):
                (missing,) = set(_BOTH_VERSION_VARIABLES) - set(given)
                raise refusal(f"required when {given[0]} is set (worker versioning needs both)", missing) from None
            raise


# ---- the whole -----------------------------------------------------------------------------------


class Settings(BaseSettings):
    """Every setting of a Herald process, by section; ``load_settings`` reads it from the environment."""

    # One source: the variables load_settings hands in, from os.environ or a test's dict and never
    # both (a test must not see the shell's); no .env file, no secrets directory, no JSON decoding.
    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=False,
        validate_by_name=True,
        validate_by_alias=True,
        hide_input_in_errors=True,
    )

    temporal: TemporalSettings = TemporalSettings()
    twilio: TwilioSettings = TwilioSettings()
    email: EmailSettings = EmailSettings()
    sendgrid_activity: SendGridActivitySettings = SendGridActivitySettings()
    receipts: ReceiptSettings = ReceiptSettings()
    codec_server: CodecServerSettings = CodecServerSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    fingerprints: FingerprintSettings = FingerprintSettings()
    key_encryption: KeyEncryptionSettings = KeyEncryptionSettings()
    outbox: OutboxSettings = OutboxSettings()
    # None means "start the embedded PostgreSQL under state_dir" (the local launcher).
    database_url: DatabaseUrl | None = Field(None, alias="DATABASE_URL")
    # The ledger owner's connection, for migrations only (the services' login may not run DDL);
    # None: DATABASE_URL, as on a single-role development server.
    migration_database_url: DatabaseUrl | None = Field(None, alias="HERALD_MIGRATION_DATABASE_URL")
    state_dir: DirectoryPath = Field(REPO_ROOT / ".state", alias="HERALD_STATE_DIR")
    # None: unversioned workers, as before Worker Versioning.
    worker_version: WorkerVersionSettings | None = None

    @model_validator(mode="after")
    def _unsubscribe_links_over_https(self) -> Settings:
        """With keys to sign links and no HERALD_UNSUBSCRIBE_URL, the links are built on the receipt server's
        public URL: refused here, at load, when that is not https://, rather than at the first marketing e-mail."""
        unsubscribe = self.email.unsubscribe
        if unsubscribe.keys and unsubscribe.url is None and not is_https_url(self.receipts.public_url):
            raise refusal(_UNSUBSCRIBE_FALLBACK_RULE, "HERALD_UNSUBSCRIBE_URL")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


# Every variable Herald reads, with its rule; built at import, so a field without a Rule fails every process's start.
RULES: dict[str, str] = {**rules_of(TemporalVariables), **rules_of(Settings)}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Every variable Herald reads, from `env` alone when given (a test's dict) or from the process's
    environment; unset ones keep their defaults. InvalidSetting names the first bad one."""
    given = given_variables(env)
    temporal = read_section(TemporalVariables, given)
    return read_section(Settings, given, temporal=_temporal(temporal, load_profile(temporal)))


def load_section(section: type[Section], env: Mapping[str, str] | None = None) -> Any:
    """One section alone, for a module that needs only it (herald.fingerprints reads its keys so)."""
    return read_section(section, given_variables(env))


def as_variables(section: BaseModel) -> dict[str, str]:
    """The variables that set what `section` holds, field by field as it was built: the way a
    launcher hands a section to a process (devstack builds the local stack's environment so)."""
    variables: dict[str, str] = {}
    for name in section.model_fields_set:
        field = type(section).model_fields[name]
        alias = field.validation_alias or field.alias
        alias = alias.choices[0] if isinstance(alias, AliasChoices) else alias
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            variables.update(as_variables(value))
        elif isinstance(alias, str):
            variables[alias] = _as_text(value)
    return variables


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _temporal(variables: TemporalVariables, profile: ClientConfigProfile) -> TemporalSettings:
    """Temporal's configuration (TEMPORAL_* and a profile), each setting overridden by Herald's own
    variable when that is set."""
    tls = profile.tls
    ca_path, ca_data = _source(variables.herald_temporal_tls_ca, tls.server_root_ca_cert if tls else None)
    cert_path, cert_data = _source(variables.herald_temporal_tls_cert, tls.client_cert if tls else None)
    key_path, key_data = _source(variables.herald_temporal_tls_key, tls.client_private_key if tls else None)
    if variables.herald_temporal_tls is not None:
        use_tls = variables.herald_temporal_tls
    else:
        # Temporal's reading: a tls section (or any TEMPORAL_TLS_* variable) means TLS unless disabled.
        use_tls = tls is not None and tls.disabled is not True
    api_key = variables.herald_temporal_api_key
    if api_key is None and profile.api_key is not None:
        api_key = SecretStr(profile.api_key)
    # Half a client identity would fail at connect as a handshake error that names nothing.
    has_cert, has_key = cert_path is not None or cert_data is not None, key_path is not None or key_data is not None
    if (use_tls or api_key is not None) and has_cert != has_key:
        missing, given = ("KEY", "certificate") if has_cert else ("CERT", "key")
        raise InvalidSetting(
            f"HERALD_TEMPORAL_TLS_{missing}",
            f"required with a client {given} (mTLS needs both; TEMPORAL_TLS_CLIENT_{missing}_PATH works too)",
        )
    defaults = TemporalSettings()
    return TemporalSettings(
        address=variables.herald_temporal_address or profile.address or defaults.address,
        namespace=variables.herald_temporal_namespace or profile.namespace or defaults.namespace,
        task_queue=variables.herald_task_queue or defaults.task_queue,
        tls=use_tls,
        tls_ca_path=ca_path,
        tls_cert_path=cert_path,
        tls_key_path=key_path,
        tls_ca_data=ca_data,
        tls_cert_data=cert_data,
        tls_key_data=SecretBytes(key_data) if key_data is not None else None,
        tls_server_name=tls.server_name if tls else None,
        api_key=api_key,
        rpc_metadata={name: SecretStr(value) for name, value in profile.grpc_meta.items()},
        codec=variables.codec,
    )


def _source(herald_path: Path | None, temporal: DataSource | None) -> tuple[Path | None, bytes | None]:
    """A certificate or key: Herald's file when set, else Temporal's file or PEM text."""
    if herald_path is not None:
        return herald_path, None
    if isinstance(temporal, Path):
        return temporal, None
    if isinstance(temporal, str):
        return None, temporal.encode()
    return None, temporal
