"""Every environment variable Herald reads, in one typed model: its name, type, default and rule.

``Variables`` is flat on purpose: one field per variable, named after it and aliased to its exact
spelling, so a refusal names what the operator typed. ``herald.settings`` shapes it into the
nested ``Settings`` the code base uses; nothing else reads these fields.

A refusal is one line, ``NAME: rule`` (an ``InvalidSetting``), and never repeats the value:
values here are passwords, tokens, keys and database URLs. Each field's shape carries its
``Rule`` (herald/setting_rules.py); ``RULES`` maps every variable to it.

Blank is unset: ``HERALD_X=`` keeps the default, like an absent variable, and values are stripped.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    EmailStr,
    Field,
    PrivateAttr,
    SecretBytes,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from herald.providers import sendgrid_signature
from herald.providers.twilio import ACCOUNT_SID_PATTERN, MESSAGING_SERVICE_SID_PATTERN
from herald.setting_rules import (
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

GRPC_META_PREFIX = "TEMPORAL_GRPC_META_"


class InvalidSetting(ValueError):
    """An environment variable holds a value Herald cannot use; the message names it and the rule."""

    def __init__(self, name: str, rule: str) -> None:
        self.name = name
        super().__init__(f"{name}: {rule}")


# ---- shapes only one variable has ----------------------------------------------------------------


def _twilio_sender(value: str) -> str:
    """An E.164 number, a short code, or an alphanumeric sender ID (Twilio's three kinds of From)."""
    if re.fullmatch(r"\+[1-9][0-9]{1,14}|[0-9]{3,8}", value):
        return value
    if len(value) <= 11 and re.fullmatch(r"[A-Za-z0-9 ]*[A-Za-z][A-Za-z0-9 ]*", value):
        return value
    raise ValueError("not a sender")


def _sendgrid_key(value: str) -> str:
    sendgrid_signature.load_public_key(value)  # ValueError when it is not a P-256 public key
    return value


_CORS_ORIGINS_RULE = "each origin must be scheme://host[:port], no path and no wildcard, like http://127.0.0.1:8233"
DEFAULT_CORS_ORIGINS = ("http://127.0.0.1:8233", "http://localhost:8233")


def _items(value: str | None) -> list[str]:
    """A comma-separated list; blanks around and between items are dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _origins(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    origins = tuple(origin.rstrip("/") for origin in _items(value))
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
    hosts = tuple(host.lower() for host in _items(value))
    for host in hosts:
        match = _ALLOWED_HOST.fullmatch(host)
        if match is None or (match.group(3) and not 1 <= int(match.group(3)[1:]) <= 65_535):
            raise ValueError("not a host")
    return hosts


def _grpc_meta(value: Any) -> Any:
    """Each TEMPORAL_GRPC_META_<NAME>, kept under its variable's name for Temporal's loader."""
    if isinstance(value, Mapping):
        for name, entry in value.items():
            if any(character in entry for character in "\r\n\0"):
                raise refusal(ONE_LINE, name)
    return value


# ---- payload keys (herald/payload_codec.py) and fingerprint keys (herald/fingerprints.py) ----------------------------------------------------

_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KEY_BYTES = 32  # AES-256 payload keys, HMAC-SHA-256 fingerprint keys


def _key_entry(name: str, where: str, entry: str, keys: dict[str, SecretBytes], purpose: str) -> None:
    """Add one `id:base64key` entry to `keys`. A refusal may name the id, never the key."""
    key_id, colon, encoded = (part.strip() for part in entry.partition(":"))
    if not colon or not _KEY_ID.fullmatch(key_id):
        raise refusal(f"{where}each key must be id:base64key, the id 1-64 letters, digits, '.', '_' or '-'", name)
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise refusal(f"{where}key {key_id}: must be standard base64", name) from None
    if len(key) != _KEY_BYTES:
        raise refusal(f"{where}key {key_id}: must decode to 32 bytes ({purpose}), not {len(key)}", name)
    if key_id in keys:
        raise refusal(f"{where}key id {key_id} is given twice", name)
    keys[key_id] = SecretBytes(key)


def _keys(
    keys_value: str | None, files_value: str | None, *, keys_name: str, files_name: str, purpose: str
) -> dict[str, SecretBytes]:
    """Keys from `keys_name`, then from each file of `files_name` (mounted secrets), one a line."""
    keys: dict[str, SecretBytes] = {}
    for entry in _items(keys_value):
        _key_entry(keys_name, "", entry, keys, purpose)
    for path in _items(files_value):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not UTF-8 text"
            raise refusal(f"{path}: cannot be read ({reason})", files_name) from None
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                _key_entry(files_name, f"{path} line {number}: ", line, keys, purpose)
    return keys


# ---- the model ---------------------------------------------------------------------------------


class Variables(BaseSettings):
    """Every variable Herald reads; unset ones keep the local stack's defaults."""

    # Defaults are Herald's own constants, not input: only what an operator set is validated.
    model_config = SettingsConfigDict(
        case_sensitive=True, extra="ignore", frozen=True, hide_input_in_errors=True, validate_default=False
    )

    # -- Temporal, Herald's own names: each one, when set, wins over Temporal's (below).
    herald_temporal_address: TemporalAddress | None = Field(None, alias="HERALD_TEMPORAL_ADDRESS")
    herald_temporal_namespace: TemporalNamespace | None = Field(None, alias="HERALD_TEMPORAL_NAMESPACE")
    herald_task_queue: Annotated[
        str, Field(pattern=r"^\S{1,1000}$"), Rule("must be 1 to 1000 characters, none of them whitespace")
    ] = Field("herald-notifications", alias="HERALD_TASK_QUEUE")
    herald_temporal_tls: Flag | None = Field(None, alias="HERALD_TEMPORAL_TLS")
    herald_temporal_tls_ca: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_CA")
    herald_temporal_tls_cert: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_CERT")
    herald_temporal_tls_key: ReadableFile | None = Field(None, alias="HERALD_TEMPORAL_TLS_KEY")
    herald_temporal_api_key: Token | None = Field(None, alias="HERALD_TEMPORAL_API_KEY")

    # -- Temporal's own environment configuration, handed to temporalio.envconfig by
    # herald/temporal_profile.py: https://docs.temporal.io/references/client-environment-configuration
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

    # -- Worker Versioning: both or neither (neither: unversioned workers).
    herald_worker_deployment_name: Annotated[
        # Temporal writes a version as <deployment>.<build id>: the name may not hold the dot.
        str, Field(pattern=r"^[^.\s]{1,255}$"), Rule("must be 1 to 255 characters, without '.' or whitespace")
    ] | None = Field(None, alias="HERALD_WORKER_DEPLOYMENT_NAME")
    herald_worker_build_id: Annotated[
        str, Field(pattern=r"^\S{1,255}$"), Rule("must be 1 to 255 characters, none of them whitespace")
    ] | None = Field(None, alias="HERALD_WORKER_BUILD_ID")

    # -- payload encryption: id:base64key entries; a key file holds one a line. Parsed together
    # by _codec below, since an id may not repeat across the two and the active key names either.
    herald_codec_keys: Annotated[str, Rule("must be id:base64key entries separated by commas")] | None = Field(
        None, alias="HERALD_CODEC_KEYS"
    )
    herald_codec_key_files: Annotated[str, Rule("must be paths of key files separated by commas")] | None = Field(
        None, alias="HERALD_CODEC_KEY_FILES"
    )
    herald_codec_active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES")
    ] | None = Field(None, alias="HERALD_CODEC_ACTIVE_KEY")

    # -- fingerprint keys (herald/fingerprints.py): the same id:base64key shapes, a keyring of their own
    # (a payload key and a fingerprint key are never the same secret).
    herald_fingerprint_keys: Annotated[str, Rule("must be id:base64key entries separated by commas")] | None = Field(
        None, alias="HERALD_FINGERPRINT_KEYS"
    )
    herald_fingerprint_key_files: Annotated[
        str, Rule("must be paths of key files separated by commas")
    ] | None = Field(None, alias="HERALD_FINGERPRINT_KEY_FILES")
    herald_fingerprint_active_key: Annotated[
        str, Rule("must be the id of a key in HERALD_FINGERPRINT_KEYS or HERALD_FINGERPRINT_KEY_FILES")
    ] | None = Field(None, alias="HERALD_FINGERPRINT_ACTIVE_KEY")

    # -- Twilio
    herald_twilio_api_base: Url("https://api.twilio.com") = Field(  # type: ignore[valid-type]
        "https://api.twilio.com", alias="HERALD_TWILIO_API_BASE"
    )
    herald_twilio_account_sid: Annotated[
        str,
        Field(pattern=ACCOUNT_SID_PATTERN),
        Rule("must be AC followed by 32 hexadecimal digits (Twilio's Account SID)"),
    ] = Field("", alias="HERALD_TWILIO_ACCOUNT_SID")
    herald_twilio_auth_token: Token = Field(SecretStr(""), alias="HERALD_TWILIO_AUTH_TOKEN")
    herald_twilio_from: Annotated[
        str,
        AfterValidator(_twilio_sender),
        Rule(
            "must be an E.164 number (+ and up to 15 digits), a short code, "
            "or a sender ID of up to 11 letters or digits"
        ),
    ] | None = Field(None, alias="HERALD_TWILIO_FROM")
    herald_twilio_messaging_service_sid: Annotated[
        str,
        Field(pattern=MESSAGING_SERVICE_SID_PATTERN),
        Rule("must be MG followed by 32 hexadecimal digits (a Messaging Service SID)"),
    ] | None = Field(None, alias="HERALD_TWILIO_MESSAGING_SERVICE_SID")
    herald_twilio_connect_timeout: Timeout(600) = Field(  # type: ignore[valid-type]
        3.0, alias="HERALD_TWILIO_CONNECT_TIMEOUT"
    )
    herald_twilio_read_timeout: Timeout(600) = Field(  # type: ignore[valid-type]
        10.0, alias="HERALD_TWILIO_READ_TIMEOUT"
    )
    herald_twilio_max_in_flight: Count(1024) = Field(  # type: ignore[valid-type]
        16, alias="HERALD_TWILIO_MAX_IN_FLIGHT"
    )
    # 0, like unset, is unlimited (settings.py makes it None).
    herald_submit_rate_limit: Annotated[
        float,
        Field(ge=0, allow_inf_nan=False),
        Rule("must be a number of messages per second, at least 0 (0 or unset: unlimited)"),
    ] = Field(0.0, alias="HERALD_SUBMIT_RATE_LIMIT")

    # -- e-mail (the relay's own model, SmtpConfig in herald/providers/smtp.py, has the same shapes)
    herald_smtp_host: Host | None = Field(None, alias="HERALD_SMTP_HOST")
    herald_smtp_port: Port = Field(587, alias="HERALD_SMTP_PORT")
    herald_smtp_security: Annotated[
        Literal["starttls", "tls", "none"], Lowercase, Rule("must be one of starttls, tls, none")
    ] = Field("starttls", alias="HERALD_SMTP_SECURITY")
    # One line: a line break in an SMTP credential would be a second command to the relay.
    herald_smtp_username: OneLine | None = Field(None, alias="HERALD_SMTP_USERNAME")
    herald_smtp_password: SecretOneLine | None = Field(None, alias="HERALD_SMTP_PASSWORD")
    herald_email_from: Annotated[EmailStr, Rule("must be an e-mail address, e.g. notifications@example.com")] | None = (
        Field(None, alias="HERALD_EMAIL_FROM")
    )
    herald_email_message_id_domain: Annotated[
        str,
        Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$"),
        Rule("must be a domain name with at least one dot, e.g. mail.example.com"),
    ] = Field("herald.invalid", alias="HERALD_EMAIL_MESSAGE_ID_DOMAIN")
    herald_email_provider: Annotated[
        str,
        Field(pattern=r"^[a-z][a-z0-9_]{0,31}$"),
        Rule("must be 1 to 32 lowercase letters, digits or '_', starting with a letter, e.g. sendgrid"),
    ] = Field("sendgrid", alias="HERALD_EMAIL_PROVIDER")
    herald_email_delivery_events: Annotated[
        Literal["true", "false"], Lowercase, Rule("must be one of true, false")
    ] = Field("true", alias="HERALD_EMAIL_DELIVERY_EVENTS")
    herald_smtp_connect_timeout: Seconds(300) = Field(  # type: ignore[valid-type]
        10.0, alias="HERALD_SMTP_CONNECT_TIMEOUT"
    )
    herald_smtp_read_timeout: Seconds(600) = Field(30.0, alias="HERALD_SMTP_READ_TIMEOUT")  # type: ignore[valid-type]
    # SendGrid's Email Activity API (a paid add-on): with a key, an unknown e-mail submit is looked up.
    herald_sendgrid_api_key: SecretOneLine | None = Field(None, alias="HERALD_SENDGRID_API_KEY")
    herald_sendgrid_api_base: Url("https://api.sendgrid.com") = Field(  # type: ignore[valid-type]
        "https://api.sendgrid.com", alias="HERALD_SENDGRID_API_BASE"
    )
    herald_sendgrid_activity_lag: PositiveSeconds(86_400) = Field(  # type: ignore[valid-type]
        600.0, alias="HERALD_SENDGRID_ACTIVITY_LAG"
    )
    herald_sendgrid_activity_requests_per_minute: Count(6000) = Field(  # type: ignore[valid-type]
        6, alias="HERALD_SENDGRID_ACTIVITY_REQUESTS_PER_MINUTE"
    )

    # -- the receipt server
    herald_receipt_host: Host = Field("127.0.0.1", alias="HERALD_RECEIPT_HOST")
    herald_receipt_port: Port = Field(8235, alias="HERALD_RECEIPT_PORT")
    herald_receipt_public_url: Url("https://hooks.example.com") = Field(  # type: ignore[valid-type]
        "http://127.0.0.1:8235", alias="HERALD_RECEIPT_PUBLIC_URL"
    )
    herald_receipt_hold_seconds: Seconds(60) = Field(  # type: ignore[valid-type]
        2.0, alias="HERALD_RECEIPT_HOLD_SECONDS"
    )
    herald_receipt_store_timeout: PositiveSeconds(14) = Field(  # type: ignore[valid-type]
        5.0, alias="HERALD_RECEIPT_STORE_TIMEOUT"
    )
    herald_sendgrid_webhook_public_key: Annotated[
        str,
        AfterValidator(_sendgrid_key),
        Rule(
            "must be SendGrid's verification key "
            "(ECDSA P-256, base64 DER or PEM, from the Signed Event Webhook settings)"
        ),
    ] | None = Field(None, alias="HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY")

    # -- telemetry
    herald_worker_metrics_address: ListenAddress | None = Field(None, alias="HERALD_WORKER_METRICS_ADDRESS")
    herald_metrics_host: Host = Field("127.0.0.1", alias="HERALD_METRICS_HOST")
    herald_metrics_port: Port = Field(9465, alias="HERALD_METRICS_PORT")
    herald_metrics_query_timeout: PositiveSeconds(60) = Field(  # type: ignore[valid-type]
        5.0, alias="HERALD_METRICS_QUERY_TIMEOUT"
    )
    herald_otlp_endpoint: Url("http://127.0.0.1:4317") | None = Field(  # type: ignore[valid-type]
        None, alias="HERALD_OTLP_ENDPOINT"
    )
    # The OpenTelemetry standard variable, used when Herald's own is unset (and only then checked).
    otel_exporter_otlp_endpoint: Url("http://127.0.0.1:4317") | None = Field(  # type: ignore[valid-type]
        None, alias="OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    otel_service_name: Annotated[
        str, Field(pattern=r"^[^\x00-\x1f\x7f]{1,255}$"), Rule("must be 1 to 255 characters on one line")
    ] | None = Field(None, alias="OTEL_SERVICE_NAME")

    # -- the codec server
    herald_codec_server_host: Host = Field("127.0.0.1", alias="HERALD_CODEC_SERVER_HOST")
    herald_codec_server_port: Port = Field(8238, alias="HERALD_CODEC_SERVER_PORT")
    herald_codec_server_cors_origins: Annotated[
        tuple[str, ...], BeforeValidator(_origins), Rule(_CORS_ORIGINS_RULE)
    ] = Field(DEFAULT_CORS_ORIGINS, alias="HERALD_CODEC_SERVER_CORS_ORIGINS")
    herald_codec_server_token: Token | None = Field(None, alias="HERALD_CODEC_SERVER_TOKEN")
    # Empty: the host:port it binds, 127.0.0.1:port and localhost:port (herald.codec_server).
    herald_codec_server_allowed_hosts: Annotated[
        tuple[str, ...], BeforeValidator(_allowed_hosts), Rule(_ALLOWED_HOSTS_RULE)
    ] = Field((), alias="HERALD_CODEC_SERVER_ALLOWED_HOSTS")

    # -- databases, state
    database_url: DatabaseUrl | None = Field(None, alias="DATABASE_URL")
    herald_outbox_database_url: DatabaseUrl | None = Field(None, alias="HERALD_OUTBOX_DATABASE_URL")
    herald_migration_database_url: DatabaseUrl | None = Field(None, alias="HERALD_MIGRATION_DATABASE_URL")
    # 0 keeps the default (30 s), as it always has.
    herald_outbox_lease_seconds: Seconds(3600) = Field(  # type: ignore[valid-type]
        30.0, alias="HERALD_OUTBOX_LEASE_SECONDS"
    )
    herald_state_dir: DirectoryPath | None = Field(None, alias="HERALD_STATE_DIR")

    _keys: dict[str, SecretBytes] = PrivateAttr(default_factory=dict)
    _fingerprint_keys: dict[str, SecretBytes] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # One source: the variables read_variables hands in, from os.environ or a test's dict and
        # never both (a test must not see the shell's); no .env file, no secrets directory, no
        # JSON decoding: every variable is plain text, parsed by its field.
        return (init_settings,)

    @field_validator("otel_exporter_otlp_endpoint", mode="before")
    @classmethod
    def _standard_endpoint_only_when_used(cls, value: Any, info: ValidationInfo) -> Any:
        # Other software in the same environment may read OTEL_EXPORTER_OTLP_ENDPOINT in a form
        # Herald would refuse; with Herald's own variable set, it is not Herald's to judge.
        return None if info.data.get("herald_otlp_endpoint") is not None else value

    @model_validator(mode="after")
    def _pairs(self) -> Variables:
        """Variables that mean something only together, or only apart."""
        if (self.herald_worker_deployment_name is None) != (self.herald_worker_build_id is None):
            missing, given = (
                ("HERALD_WORKER_BUILD_ID", "HERALD_WORKER_DEPLOYMENT_NAME")
                if self.herald_worker_build_id is None
                else ("HERALD_WORKER_DEPLOYMENT_NAME", "HERALD_WORKER_BUILD_ID")
            )
            raise refusal(f"required when {given} is set (worker versioning needs both)", missing)
        for path, data in (
            ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA"),
            ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA"),
            ("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA"),
        ):
            if getattr(self, path.lower()) is not None and getattr(self, data.lower()) is not None:
                raise refusal(f"cannot be set together with {path}: one source per certificate or key", data)
        return self

    @model_validator(mode="after")
    def _codec(self) -> Variables:
        self._keys = _keys(
            self.herald_codec_keys, self.herald_codec_key_files,
            keys_name="HERALD_CODEC_KEYS", files_name="HERALD_CODEC_KEY_FILES", purpose="AES-256",
        )  # fmt: skip
        _active_is_held(self.herald_codec_active_key, self._keys, "HERALD_CODEC")
        self._fingerprint_keys = _keys(
            self.herald_fingerprint_keys, self.herald_fingerprint_key_files,
            keys_name="HERALD_FINGERPRINT_KEYS", files_name="HERALD_FINGERPRINT_KEY_FILES", purpose="HMAC-SHA-256",
        )  # fmt: skip
        _active_is_held(self.herald_fingerprint_active_key, self._fingerprint_keys, "HERALD_FINGERPRINT")
        return self

    @property
    def codec_keys(self) -> dict[str, SecretBytes]:
        """Every payload key, HERALD_CODEC_KEYS's then each key file's: id -> 32-byte key."""
        return dict(self._keys)

    @property
    def fingerprint_keys(self) -> dict[str, SecretBytes]:
        """Every fingerprint key, HERALD_FINGERPRINT_KEYS's then each key file's: id -> 32-byte key."""
        return dict(self._fingerprint_keys)


def _active_is_held(active: str | None, keys: dict[str, SecretBytes], prefix: str) -> None:
    # An active id without its key must not quietly mean "no key".
    if active is not None and active not in keys:
        held = ", ".join(keys) or "none"
        raise refusal(
            f"must be the id of a key in {prefix}_KEYS or {prefix}_KEY_FILES (configured ids: {held})",
            f"{prefix}_ACTIVE_KEY",
        )


# ---- reading and refusing ----------------------------------------------------------------------


def _rule_of(field: FieldInfo) -> str:
    """The field's Rule, also when it sits inside `X | None`."""
    pending: list[Any] = [*field.metadata, field.annotation]
    while pending:
        item = pending.pop(0)
        if isinstance(item, Rule):
            return item.text
        if typing.get_origin(item) is Annotated:
            pending.extend(item.__metadata__)
            pending.append(typing.get_args(item)[0])
        else:
            pending.extend(arg for arg in typing.get_args(item) if arg is not type(None))
    raise TypeError(f"{field.alias} declares no Rule")


# Each variable's sentence; built at import, so a field without one fails every process's start.
RULES: dict[str, str] = {str(field.alias): _rule_of(field) for field in Variables.model_fields.values()}


def _as_invalid_setting(error: ValidationError) -> InvalidSetting:
    """The first refusal as one line naming its variable; pydantic's own text, which quotes the
    input, is never used."""
    first = error.errors(include_url=False, include_input=False)[0]
    context = first.get("ctx") or {}
    variable = context.get("variable") or (str(first["loc"][0]) if first["loc"] else "HERALD_*")
    return InvalidSetting(variable, context.get("rule") or RULES.get(variable) or "is not a usable value")


def _given(env: Mapping[str, str]) -> dict[str, Any]:
    """The model's variables found in `env`, by name. Blank is unset and values are stripped (a
    trailing space pasted into a secret store is a mistake, never part of a port); the open-ended
    TEMPORAL_GRPC_META_* family is gathered under the one field that stands for it."""
    present = {name: value.strip() for name, value in env.items() if value and value.strip()}
    given: dict[str, Any] = {name: value for name, value in present.items() if name in RULES}
    grpc_meta = {name: value for name, value in present.items() if name.startswith(GRPC_META_PREFIX)}
    if grpc_meta:
        given[GRPC_META_PREFIX + "*"] = grpc_meta
    return given


def read_variables(env: Mapping[str, str] | None = None) -> Variables:
    """Every variable from `env` alone (a test's dict), or from the process's environment when None;
    InvalidSetting names the first one refused."""
    try:
        return Variables(**_given(os.environ if env is None else env))
    except ValidationError as error:
        raise _as_invalid_setting(error) from None
