"""The servers' sections: receipts, telemetry, the codec server, the outbox relay, worker versioning.
"""


from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from herald.settings.defaults import (
    CODEC_SERVER_PORT,
    CONSOLE_PORT,
    LEDGER_METRICS_PORT,
    LOOPBACK,
    RECEIPT_PORT,
    TEMPORAL_UI_PORT,
    no_trailing_slash,
)
from herald.settings.keys import UnsubscribeSettings
from herald.settings.providers import InfobipWebhookSettings
from herald.settings.rules import (
    DatabaseUrl,
    Flag,
    Host,
    ListenAddress,
    Lowercase,
    Port,
    PositiveSeconds,
    Rule,
    Seconds,
    Token,
    Url,
    load_public_key,
    refusal,
)
from herald.settings.variables import (
    Section,
    items,
)

# ---- the servers -----------------------------------------------------------------------------


def _sendgrid_key(value: str) -> str:
    load_public_key(value)  # ValueError when it is not a P-256 public key
    return value


class ReceiptSettings(Section):
    """The receipt server (`python -m herald.receipts`, herald/receipts/app.py)."""

    host: Host = Field(LOOPBACK, alias="HERALD_RECEIPT_HOST")
    port: Port = Field(RECEIPT_PORT, alias="HERALD_RECEIPT_PORT")
    # The base URL the provider calls, exactly as it calls it: Twilio signs the full URL,
    # so behind a proxy this is the public address, not the bind address.
    public_url: Annotated[Url("https://hooks.example.com"), AfterValidator(no_trailing_slash)] = Field(  # type: ignore[valid-type]
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
    # Infobip's reports, verified at /infobip/reports (the same variables as the Infobip section's).
    infobip_webhook: InfobipWebhookSettings = InfobipWebhookSettings()


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
    """`python -m herald.codec`, which decrypts payloads for the Web UI and the CLI."""

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


_HEADER_NAME_RULE = "must be an HTTP header name: 1 to 64 letters, digits or '-', like X-Forwarded-User"
_PROXIES_RULE = "each entry must be an IP address or network, like 10.0.0.5 or 10.0.0.0/24"


def _proxies(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    networks = tuple(ipaddress.ip_network(entry, strict=False) for entry in items(value))  # ValueError: refused
    return tuple(str(network) for network in networks)


_ROUTES_RULE = "each entry must be a task queue name: 1 to 1000 characters, none of them whitespace"


def _task_queues(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    names = tuple(items(value))
    if any(len(name) > 1000 or re.search(r"\s", name) for name in names):
        raise ValueError("not a task queue")
    return names


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


class ConsoleSettings(Section):
    """The operator's console (`python -m herald.console`, herald/console/): read-only pages over the ledger.

    Who may read it: on loopback with neither a token nor a proxy header configured, this machine
    only; otherwise a request must carry `Authorization: Bearer <HERALD_CONSOLE_TOKEN>`, or come from
    one of HERALD_CONSOLE_TRUSTED_PROXIES carrying the operator's name in HERALD_CONSOLE_AUTH_HEADER
    (the deployment's single sign-on in front). Anything else is refused (herald/console/access.py).
    """

    host: Host = Field(LOOPBACK, alias="HERALD_CONSOLE_HOST")
    port: Port = Field(CONSOLE_PORT, alias="HERALD_CONSOLE_PORT")
    # A login of herald_reader (migration 022): the console refuses to start on one that may write.
    database_url: DatabaseUrl | None = Field(None, alias="HERALD_CONSOLE_DATABASE_URL")
    # A login of herald_text_opener (migration 024): set, an operator may open a notice's sent text,
    # each opening recorded first; unset, the story says opening is not enabled on this console.
    opener_database_url: DatabaseUrl | None = Field(None, alias="HERALD_CONSOLE_OPENER_DATABASE_URL")
    token: Token | None = Field(None, alias="HERALD_CONSOLE_TOKEN")
    # The header an authenticating proxy sets to the operator it signed in; trusted only from
    # HERALD_CONSOLE_TRUSTED_PROXIES (anyone else could set it too).
    auth_header: Annotated[
        str, Field(pattern=r"^[A-Za-z0-9-]{1,64}$"), Lowercase, Rule(_HEADER_NAME_RULE)
    ] | None = Field(None, alias="HERALD_CONSOLE_AUTH_HEADER")
    trusted_proxies: Annotated[tuple[str, ...], BeforeValidator(_proxies), Rule(_PROXIES_RULE)] = Field(
        (), alias="HERALD_CONSOLE_TRUSTED_PROXIES"
    )
    # The Host headers it answers, as the codec server's (DNS rebinding); empty: the host:port it
    # binds, 127.0.0.1:port and localhost:port.
    allowed_hosts: Annotated[tuple[str, ...], BeforeValidator(_allowed_hosts), Rule(_ALLOWED_HOSTS_RULE)] = Field(
        (), alias="HERALD_CONSOLE_ALLOWED_HOSTS"
    )
    # Where an operator's browser reaches the Temporal Web UI: each story links its workflows there.
    temporal_ui_url: Annotated[Url("https://temporal.example.com"), AfterValidator(no_trailing_slash)] = Field(  # type: ignore[valid-type]
        f"http://{LOOPBACK}:{TEMPORAL_UI_PORT}", alias="HERALD_CONSOLE_TEMPORAL_UI_URL"
    )
    # The routes page's outbox backlog: a login to the services' database holding herald_outbox
    # (HERALD_OUTBOX_DATABASE_URL's) with SELECT on its state and created_at columns only, never
    # the notice (a person's number and data). Unset: the page says the outbox is not configured.
    outbox_database_url: DatabaseUrl | None = Field(None, alias="HERALD_CONSOLE_OUTBOX_DATABASE_URL")
    # The routes page reads the submit queue of HERALD_TASK_QUEUE's route and of these too: the
    # workflow task queues of the deployment's other routes (a paced route's), comma-separated.
    routes: Annotated[tuple[str, ...], BeforeValidator(_task_queues), Rule(_ROUTES_RULE)] = Field(
        (), alias="HERALD_CONSOLE_ROUTES"
    )
    # Every page's queries are cancelled by PostgreSQL after this: a page is slow once, never a
    # pile of queries behind each other.
    query_timeout: PositiveSeconds(60) = Field(5.0, alias="HERALD_CONSOLE_QUERY_TIMEOUT")  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _someone_is_asked(self) -> ConsoleSettings:
        """A proxy's header needs the proxies it is trusted from, and the other way round; a console
        reachable beyond this machine needs a way to tell an operator from anyone."""
        if self.auth_header is not None and not self.trusted_proxies:
            raise refusal("required when HERALD_CONSOLE_AUTH_HEADER is set: the proxies that set it", "HERALD_CONSOLE_TRUSTED_PROXIES")
        if self.trusted_proxies and self.auth_header is None:
            raise refusal("required when HERALD_CONSOLE_TRUSTED_PROXIES is set: the header they set", "HERALD_CONSOLE_AUTH_HEADER")
        if not _is_loopback(self.host) and self.token is None and self.auth_header is None:
            raise refusal(
                "beyond loopback, set HERALD_CONSOLE_TOKEN or HERALD_CONSOLE_AUTH_HEADER (with its trusted proxies): "
                "the console shows the ledger to whoever reaches it",
                "HERALD_CONSOLE_HOST",
            )
        return self


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


