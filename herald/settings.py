"""Herald's settings, from the environment: the one entry point, ``load_settings``.

Every address, namespace, credential and TLS setting is a variable, so the same code
runs against the local stack, a Temporal cluster or Temporal Cloud, a managed
PostgreSQL and the real Twilio API. The local launcher sets these from
``temporal-dev.yaml``; production sets them from its secret store.

Reading is two steps: ``herald.variables`` parses and checks every variable through
one typed model (a bad one is a single ``InvalidSetting`` line naming it), and
``herald.temporal_profile`` asks Temporal's own loader what TEMPORAL_* and a profile
say about the connection. This module shapes both into the nested ``Settings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretBytes, SecretStr
from temporalio.envconfig import ClientConfigProfile, DataSource

from herald.outcomes import Frozen
from herald.temporal_profile import load_profile
from herald.variables import InvalidSetting as InvalidSetting  # every entry point catches it from here
from herald.variables import Variables, read_variables

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
    # SendGrid's Email Activity API, where the account has the add-on: None means events only.
    activity_api_key: SecretStr | None = None
    activity_api_base: str = "https://api.sendgrid.com"
    # How long after acceptance a message is surely listed in the feed (SendGrid documents none).
    activity_lag_seconds: float = 600.0
    activity_requests_per_minute: int = 6


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
    # The Host headers it answers (host, any port; or host:port): a page whose name an attacker
    # pointed at this address (DNS rebinding) is refused. Empty: the host:port it binds,
    # 127.0.0.1:port and localhost:port. Behind a proxy, the name the proxy forwards.
    allowed_hosts: tuple[str, ...] = ()


class WorkerVersionSettings(Frozen):
    """The Worker Deployment Version the workers poll as (HERALD_WORKER_DEPLOYMENT_NAME and _BUILD_ID).

    Set, the workers opt in to Temporal's Worker Versioning: a workflow runs on the version the
    deployment's current version says, and moves to a newer one at its next workflow task (auto-upgrade).
    """

    deployment_name: str
    build_id: str


class Settings(Frozen):
    temporal: TemporalSettings = TemporalSettings()
    twilio: TwilioSettings = TwilioSettings()
    email: EmailSettings = EmailSettings()
    receipts: ReceiptSettings = ReceiptSettings()
    codec_server: CodecServerSettings = CodecServerSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    # Fingerprint keys (herald/fingerprints.py): id -> 32-byte HMAC key; the active one writes.
    fingerprint_keys: dict[str, SecretBytes] = Field(default_factory=dict)
    fingerprint_active_key: str | None = None
    # None means "start the embedded PostgreSQL under state_dir".
    database_url: SecretStr | None = None
    # The ledger owner's connection, for migrations only (the services' login may not run DDL);
    # None: DATABASE_URL, as on a single-role development server.
    migration_database_url: SecretStr | None = None
    # The service database holding herald_outbox, for the outbox relay (and the report's backlog line).
    outbox_database_url: SecretStr | None = None
    # How long a relay holds the rows it claimed; a relay that dies hands them on after this.
    outbox_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    state_dir: Path = REPO_ROOT / ".state"
    # None: unversioned workers, as before Worker Versioning.
    worker_version: WorkerVersionSettings | None = None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Every variable Herald reads, from `env` alone when given (a test's dict) or from the process's
    environment; unset ones keep local-stack defaults. InvalidSetting names the first bad one."""
    variables = read_variables(env)
    return Settings(
        temporal=_temporal(variables, load_profile(variables)),
        fingerprint_keys=variables.fingerprint_keys,
        fingerprint_active_key=variables.herald_fingerprint_active_key,
        twilio=TwilioSettings(
            api_base=variables.herald_twilio_api_base,
            account_sid=variables.herald_twilio_account_sid,
            auth_token=variables.herald_twilio_auth_token,
            from_number=variables.herald_twilio_from,
            messaging_service_sid=variables.herald_twilio_messaging_service_sid,
            connect_timeout=variables.herald_twilio_connect_timeout,
            read_timeout=variables.herald_twilio_read_timeout,
            max_in_flight=variables.herald_twilio_max_in_flight,
            submit_rate_limit=variables.herald_submit_rate_limit or None,  # 0: unlimited
        ),
        email=EmailSettings(
            smtp_host=variables.herald_smtp_host,
            smtp_port=variables.herald_smtp_port,
            smtp_security=variables.herald_smtp_security,
            smtp_username=variables.herald_smtp_username,
            smtp_password=variables.herald_smtp_password,
            from_address=variables.herald_email_from,
            message_id_domain=variables.herald_email_message_id_domain,
            provider=variables.herald_email_provider,
            delivery_events=variables.herald_email_delivery_events == "true",
            connect_timeout=variables.herald_smtp_connect_timeout,
            read_timeout=variables.herald_smtp_read_timeout,
            activity_api_key=variables.herald_sendgrid_api_key,
            activity_api_base=variables.herald_sendgrid_api_base,
            activity_lag_seconds=variables.herald_sendgrid_activity_lag,
            activity_requests_per_minute=variables.herald_sendgrid_activity_requests_per_minute,
        ),
        receipts=ReceiptSettings(
            host=variables.herald_receipt_host,
            port=variables.herald_receipt_port,
            public_url=variables.herald_receipt_public_url.rstrip("/"),
            hold_seconds=variables.herald_receipt_hold_seconds,
            store_timeout=variables.herald_receipt_store_timeout,
            sendgrid_public_key=variables.herald_sendgrid_webhook_public_key,
        ),
        codec_server=CodecServerSettings(
            host=variables.herald_codec_server_host,
            port=variables.herald_codec_server_port,
            cors_origins=variables.herald_codec_server_cors_origins,
            token=variables.herald_codec_server_token,
            allowed_hosts=variables.herald_codec_server_allowed_hosts,
        ),
        telemetry=TelemetrySettings(
            worker_metrics_address=variables.herald_worker_metrics_address,
            metrics_host=variables.herald_metrics_host,
            metrics_port=variables.herald_metrics_port,
            metrics_query_timeout=variables.herald_metrics_query_timeout,
            # Herald's own name first; the OpenTelemetry standard variable otherwise.
            otlp_endpoint=variables.herald_otlp_endpoint or variables.otel_exporter_otlp_endpoint,
            service_name=variables.otel_service_name,
        ),
        database_url=variables.database_url,
        migration_database_url=variables.herald_migration_database_url,
        outbox_database_url=variables.herald_outbox_database_url,
        outbox_lease_seconds=variables.herald_outbox_lease_seconds or 30.0,  # 0: the default
        state_dir=variables.herald_state_dir or REPO_ROOT / ".state",
        worker_version=(
            WorkerVersionSettings(
                deployment_name=variables.herald_worker_deployment_name, build_id=variables.herald_worker_build_id
            )
            if variables.herald_worker_deployment_name is not None and variables.herald_worker_build_id is not None
            else None
        ),
    )


def _temporal(variables: Variables, profile: ClientConfigProfile) -> TemporalSettings:
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
    return TemporalSettings(
        address=variables.herald_temporal_address or profile.address or TemporalSettings().address,
        namespace=variables.herald_temporal_namespace or profile.namespace or TemporalSettings().namespace,
        task_queue=variables.herald_task_queue,
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
        codec=CodecSettings(
            keys=variables.codec_keys,
            active_key=variables.herald_codec_active_key or next(iter(variables.codec_keys), None),
        ),
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
