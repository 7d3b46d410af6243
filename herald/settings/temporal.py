"""Temporal's connection, read in two steps: Herald's own HERALD_TEMPORAL_* variables beside
Temporal's TEMPORAL_* ones and a TOML profile (``herald.settings.temporal_profile``);
``TemporalSettings`` is what both say, one setting at a time, Herald's variable winning.
"""


from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretBytes,
    SecretStr,
    model_validator,
)
from temporalio.envconfig import ClientConfigProfile, DataSource

from herald.core.outcomes import Frozen
from herald.settings.defaults import (
    LOOPBACK,
    TEMPORAL_PORT,
)
from herald.settings.keys import CodecSettings
from herald.settings.rules import (
    ONE_LINE,
    Flag,
    Host,
    Pem,
    ReadableFile,
    Rule,
    SecretPem,
    TemporalAddress,
    TemporalFlag,
    TemporalNamespace,
    Token,
    refusal,
)
from herald.settings.variables import (
    GRPC_META_PREFIX,
    InvalidSetting,
    Section,
)

# ---- Temporal ------------------------------------------------------------------------------------


def _grpc_meta(value: Any) -> Any:
    """Each TEMPORAL_GRPC_META_<NAME>, kept under its variable's name for Temporal's loader."""
    if isinstance(value, Mapping):
        for name, entry in value.items():
            if any(character in entry for character in "\r\n\0"):
                raise refusal(ONE_LINE, name)
    return value


_TASK_QUEUE_RULE = "must be 1 to 990 characters, none of them whitespace, not ending in -urgent or -submit"
# The suffixes herald/temporal/task_queues.py names a route's urgent lane and its submit queue with
# (spelled here, not imported: herald.temporal's client imports the settings; a unit test ties the two).
LANE_SUFFIXES = ("-urgent", "-submit")


def _base_task_queue(value: str) -> str:
    if value.endswith(LANE_SUFFIXES):
        raise ValueError("a lane's name, not a route's")
    return value


class TemporalVariables(Section):
    """The variables Temporal's connection is read from: Herald's own names, each of which, when set,
    wins over Temporal's, and Temporal's, handed to temporalio.envconfig by herald/settings/temporal_profile.py
    (https://docs.temporal.io/references/client-environment-configuration)."""

    herald_temporal_address: TemporalAddress | None = Field(None, alias="HERALD_TEMPORAL_ADDRESS")
    herald_temporal_namespace: TemporalNamespace | None = Field(None, alias="HERALD_TEMPORAL_NAMESPACE")
    # A route's base queue: its urgent lane and its submits are named from it (herald/temporal/task_queues.py),
    # so it may not itself end the way they do, and leaves room for their suffix.
    herald_task_queue: Annotated[
        str, Field(pattern=r"^\S{1,990}$"), AfterValidator(_base_task_queue), Rule(_TASK_QUEUE_RULE)
    ] | None = Field(None, alias="HERALD_TASK_QUEUE")
    herald_temporal_tls: Flag | None = Field(None, alias="HERALD_TEMPORAL_TLS")
    herald_urgent_lane: Flag | None = Field(None, alias="HERALD_URGENT_LANE")
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
    """The connection every client and worker makes (herald/temporal/client.py), resolved from
    TemporalVariables and Temporal's profile by ``load_settings``."""

    address: str = f"{LOOPBACK}:{TEMPORAL_PORT}"
    namespace: str = "default"
    task_queue: str = "herald-notifications"
    # Clients start priority-1 intents on the route's urgent lane (herald/temporal/task_queues.py).
    # Off, every intent starts on the task queue itself: for a rolling deploy whose workers do not
    # poll the lane yet (turn it on once every worker does).
    urgent_lane: bool = True
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
        urgent_lane=defaults.urgent_lane if variables.herald_urgent_lane is None else variables.herald_urgent_lane,
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
