"""``temporal-dev.yaml`` as a typed model, and the HERALD_* environment it implies.

The stack's servers listen where the product's settings say by default (herald/settings/defaults.py holds
those defaults); the environment handed to its processes is built from the settings' own sections,
so every variable name, and every rule a value must meet, comes from there too.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from psycopg.conninfo import make_conninfo
from pydantic import Field, SecretStr, model_validator

from devstack.private_files import create_private_once, make_private
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.outcomes import Frozen
from herald.ledger.roles import app_database_url
from herald.providers.sendgrid_signature import new_private_key, public_key_text
from herald.settings.defaults import CONSOLE_PORT
from herald.settings import (
    CODEC_SERVER_PORT,
    LEDGER_METRICS_PORT,
    LOOPBACK,
    RECEIPT_PORT,
    REPO_ROOT,
    TEMPORAL_PORT,
    TEMPORAL_UI_PORT,
    CodecServerSettings,
    CodecSettings,
    EmailSettings,
    FingerprintSettings,
    InfobipSettings,
    InfobipWebhookSettings,
    KeyEncryptionSettings,
    OutboxSettings,
    ReceiptSettings,
    Settings,
    TemporalSettings,
    TemporalVariables,
    TwilioSettings,
    UnsubscribeSettings,
    as_variables,
)
from herald.settings.temporal_profile import TEMPORAL_VARIABLES

DEFAULT_STACK_FILE = REPO_ROOT / "temporal-dev.yaml"
# The outbox relay's login on the demo service's database; its grants come from its group role,
# herald_outbox_relay (herald/outbox/schema.sql).
OUTBOX_RELAY_LOGIN = "herald_outbox_relay_login"
# The console's login on the same database, for the routes page's outbox backlog; its one grant,
# SELECT (state, created_at) on herald_outbox, comes from its group role, herald_outbox_reader.
CONSOLE_OUTBOX_LOGIN = "herald_console_outbox"
# Under state_dir: the stack's fingerprint key, `id:base64key` (0600, created on first use).
FINGERPRINT_KEY_FILE = "fingerprint-keys"
# Under state_dir: the key that signs marketing e-mail's one-click unsubscribe links (0600, first use).
UNSUBSCRIBE_KEY_FILE = "unsubscribe-keys"
INFOBIP_WEBHOOK_KEY_FILE = "infobip-webhook-keys"
# Under state_dir: the key-encryption key that wraps recipients' data keys (0600, first use); never
# in the ledger, so a copy of the stack's database opens no sealed payload without it.
KEY_ENCRYPTION_KEY_FILE = "key-encryption-keys"


# One partition per task queue. Temporal splits a task queue's rate limit evenly across its read
# partitions (each enforces limit / partitions), so with the default 4 the submit queue's pace
# (HERALD_SUBMIT_RATE_LIMIT) holds only while all 4 have a backlog: 100 submits paced at 9.7/s
# arrived at 0.86x of 10/s overall and 0.74x over their later half (the unevenly spread tail),
# against 0.97-1.0x and 0.97x with one partition. Partitions spread one queue over several matching
# hosts; a dev server is one host, so they buy nothing here. A cluster's dynamic config file can set this for the submit queue alone
# (`constraints: {taskQueueName: herald-notifications-submit}`); `temporal server start-dev
# --dynamic-config-value` takes plain values only (a constrained list is ignored with a warning),
# hence every queue of the dev server.
DEV_SERVER_MATCHING: dict[str, int | float | str | bool] = {
    "matching.numTaskqueueReadPartitions": 1,
    "matching.numTaskqueueWritePartitions": 1,
    # Fairness keys (the intent's tenant) share a backlogged queue by weight; off by default in the
    # pinned server (1.32), which orders by priority keys with no switch (issue 23).
    "matching.enableFairness": True,
}


class TemporalDev(Frozen):
    host: str = LOOPBACK
    port: int = TEMPORAL_PORT
    ui_port: int = TEMPORAL_UI_PORT
    metrics_port: int = 8236
    namespace: str = TemporalSettings().namespace
    task_queue: str = TemporalSettings().task_queue
    # None keeps workflows in memory only (the tests); a file survives restarts.
    db_filename: str | None = "temporal.db"
    log_level: str = "error"
    # Server dynamic config (KEY -> JSON value); the tests lower the continue-as-new suggestion with it.
    dynamic_config: dict[str, int | float | str | bool] = Field(
        default_factory=lambda: dict(DEV_SERVER_MATCHING)
    )


class PostgresDev(Frozen):
    data_dir: str = "pgdata"


class EmulatorDev(Frozen):
    host: str = "127.0.0.1"
    port: int = 8234
    account_sid: str = "AC00000000000000000000000000000001"
    auth_token: str = "herald-local-emulator-token"
    from_number: str = "+15005550006"
    step_ms: int = 150
    rate_limit_per_sender: float = 0


class InfobipDev(Frozen):
    """The Infobip emulator (emulator/infobip): the second SMS provider's stand-in (demo and tests only)."""

    host: str = "127.0.0.1"
    port: int = 8239
    api_key: str = "herald-local-infobip-key"
    step_ms: int = 150
    # Infobip's report-retry minutes become 0.6 s: a receipt server that was down gets its reports soon.
    time_factor: float = 0.01
    # The Basic credentials the emulator posts delivery reports with (a subscription's BASIC profile).
    webhook_username: str = "herald-infobip"
    webhook_password: str = "herald-local-infobip-webhook"


class EspDev(Frozen):
    """The ESP emulator: an SMTP relay that plays SendGrid and posts signed events (demo and tests only)."""

    host: str = "127.0.0.1"
    smtp_port: int = 2525
    admin_port: int = 8237
    step_ms: int = 150
    # example.com: email-validator refuses special-use domains such as .test as a sender.
    from_address: str = "notifications@example.com"
    message_id_domain: str = "herald.test"
    # Under state_dir; created on first use. The receipt server gets its public half.
    signing_key_file: str = "esp-signing-key.pem"


class OutboxDev(Frozen):
    # A database beside Herald's ledger on the same server, standing in for a service's own
    # database: it holds the demo's business rows and herald_outbox.
    service_database: str = "herald_demo_service"


class ReceiptsDev(Frozen):
    host: str = LOOPBACK
    port: int = RECEIPT_PORT


class CodecDev(Frozen):
    """Payload encryption for every process of the stack, and the codec server the Web UI reads through."""

    host: str = LOOPBACK
    port: int = CODEC_SERVER_PORT
    # Under state_dir, created on first use (mode 0600): `id:base64key` lines (HERALD_CODEC_KEY_FILES).
    # The first line's key encrypts; add a line to keep an old key decrypting.
    key_file: str = "codec-keys"


class MetricsDev(Frozen):
    """Prometheus endpoints: the ledger exporter's (one per deployment) and the worker's SDK runtime."""

    host: str = LOOPBACK
    port: int = LEDGER_METRICS_PORT  # python -m herald.metrics: the ledger's numbers
    worker_port: int = 9464  # the worker's HERALD_WORKER_METRICS_ADDRESS: Temporal SDK and herald_* series


class ConsoleDev(Frozen):
    """The operator's console (python -m herald.console), read-only over the ledger as herald_reader; its
    second login, of herald_text_opener, lets the demo's operator open a notice's sent text (recorded)."""

    host: str = LOOPBACK
    port: int = CONSOLE_PORT


class AdapterDev(Frozen):
    connect_timeout: float = 2.0
    read_timeout: float = 2.0
    # HERALD_SUBMIT_RATE_LIMIT: submits/s the Temporal server lets out of the submit queue; 0 = unlimited.
    submit_rate_limit: float = Field(default=0, ge=0)


class PacedRouteDev(Frozen):
    """The demo's priority scene runs on a route of its own: worker.py's workers, in the launcher's
    process, on this task queue, whose submits the Temporal server lets out at `submit_rate_limit`
    a second (HERALD_SUBMIT_RATE_LIMIT), as a provider's limit paces a real route. The stack's own
    route stays unlimited, so the rest of the demo is not slowed."""

    task_queue: str = "herald-paced"
    # 40 promotions drain in about 10 s: long enough to overtake, short enough to watch.
    submit_rate_limit: float = Field(default=4, gt=0)


class StackConfig(Frozen):
    state_dir: Path = Path(".state")
    # The fingerprint key file, when several stacks must name recipients alike (a test session's);
    # None: FINGERPRINT_KEY_FILE under state_dir.
    fingerprint_keys: Path | None = None
    # Likewise the key-encryption key file (a test session's); None: KEY_ENCRYPTION_KEY_FILE under state_dir.
    key_encryption_keys: Path | None = None
    temporal: TemporalDev = TemporalDev()
    postgres: PostgresDev = PostgresDev()
    emulator: EmulatorDev = EmulatorDev()
    esp: EspDev = EspDev()
    infobip: InfobipDev = InfobipDev()
    outbox: OutboxDev = OutboxDev()
    receipts: ReceiptsDev = ReceiptsDev()
    metrics: MetricsDev = MetricsDev()
    console: ConsoleDev = ConsoleDev()
    adapter: AdapterDev = AdapterDev()
    paced_route: PacedRouteDev = PacedRouteDev()
    codec: CodecDev = CodecDev()
    demo_policy: DeliveryPolicy = DeliveryPolicy()

    @model_validator(mode="after")
    def _two_routes(self) -> StackConfig:
        # One task queue polled with two rate limits takes whichever the latest poll carried.
        if self.paced_route.task_queue == self.temporal.task_queue:
            raise ValueError("paced_route.task_queue: must differ from temporal.task_queue (the stack's own route)")
        return self

    @property
    def state_path(self) -> Path:
        return self.state_dir if self.state_dir.is_absolute() else REPO_ROOT / self.state_dir

    @property
    def esp_signing_key_path(self) -> Path:
        return self.state_path / self.esp.signing_key_file

    def esp_public_key(self) -> str:
        """The ESP emulator's verification key (base64 DER, as SendGrid shows it); the signing key
        is generated under state_dir on first use, so the emulator and receipt server agree."""
        path = self.esp_signing_key_path
        if path.exists():
            make_private(path)
        else:
            pem = new_private_key().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            create_private_once(path, pem)
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return public_key_text(key)

    def fingerprint_key_file(self) -> Path:
        """The stack's fingerprint key file (HERALD_FINGERPRINT_KEY_FILES), made like the payload key:
        random on first use, 0600, shared by every process of the stack, never in the environment."""
        path = self.fingerprint_keys or self.state_path / FINGERPRINT_KEY_FILE
        if path.exists():
            make_private(path)
        else:
            line = f"fp-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
            create_private_once(path, line.encode())
        return path

    def key_encryption_key_file(self) -> Path:
        """The stack's key-encryption key file (HERALD_KEY_ENCRYPTION_KEY_FILES): random on first use,
        0600, shared by every process of the stack, kept out of the ledger and the environment."""
        path = self.key_encryption_keys or self.state_path / KEY_ENCRYPTION_KEY_FILE
        if path.exists():
            make_private(path)
        else:
            line = f"kek-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
            create_private_once(path, line.encode())
        return path

    def unsubscribe_settings(self) -> UnsubscribeSettings:
        """The stack's unsubscribe-link key (HERALD_UNSUBSCRIBE_KEY_FILES), random on first use, 0600,
        shared by the worker that signs links and the receipt server that verifies them; and the links'
        base (HERALD_UNSUBSCRIBE_URL): https://, as Herald writes every link (RFC 8058), on the receipt
        server's own host and port. The stack has no TLS in front of that server, so nothing but the demo's
        mail client (and the tests) follows such a link: it stands where a deployment's TLS proxy would and
        calls the same host, port and path over plain HTTP on loopback (devstack/demo.py, over_loopback)."""
        path = self.state_path / UNSUBSCRIBE_KEY_FILE
        if path.exists():
            make_private(path)
        else:
            line = f"unsub-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
            create_private_once(path, line.encode())
        url = f"https://{self.receipts.host}:{self.receipts.port}"
        return UnsubscribeSettings(key_files=str(path), key_entries=None, active_key=None, url=url)

    def infobip_webhook_settings(self) -> InfobipWebhookSettings:
        """The stack's Infobip report keys (HERALD_INFOBIP_WEBHOOK_KEY_FILES): random on first use, 0600,
        shared by the worker that signs each message's callbackData and the receipt server that verifies
        it; and the Basic credentials the emulator's report posts carry (a subscription profile's)."""
        path = self.state_path / INFOBIP_WEBHOOK_KEY_FILE
        if path.exists():
            make_private(path)
        else:
            line = f"ib-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
            create_private_once(path, line.encode())
        basic = SecretStr(f"{self.infobip.webhook_username}:{self.infobip.webhook_password}")
        return InfobipWebhookSettings(key_files=str(path), key_entries=None, active_key=None, basic=basic)

    @property
    def codec_endpoint(self) -> str:
        return f"http://{self.codec.host}:{self.codec.port}"

    def codec_key_file(self) -> Path:
        """The stack's payload key file; a fresh random key is written on first use, so every process
        of the stack shares one key and the key itself never travels in the environment."""
        path = self.state_path / self.codec.key_file
        if path.exists():
            make_private(path)
        else:
            # A random id: a regenerated key never reuses an id that older ciphertext names.
            line = f"dev-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
            create_private_once(path, line.encode())  # another process of the stack may win: its key stands
        return path

    def _password(self, file_name: str) -> str:
        """A login password made on first use and kept in the state folder (mode 0600), so every
        process of the stack, and every later run, uses the same one."""
        path = self.state_path / file_name
        create_private_once(path, secrets.token_urlsafe(24).encode())
        return path.read_text(encoding="utf-8").strip()

    def app_login_password(self) -> str:
        """The services' login password (herald_service, a member of herald_app)."""
        return self._password("app-login-password")

    def console_login_password(self) -> str:
        """The console's login password (herald_console, a member of herald_reader)."""
        return self._password("console-login-password")

    def console_opener_login_password(self) -> str:
        """The console's second login's password (herald_console_opener, a member of herald_text_opener)."""
        return self._password("console-opener-login-password")

    def console_outbox_login_password(self) -> str:
        """The console's outbox login's password (CONSOLE_OUTBOX_LOGIN, a member of herald_outbox_reader)."""
        return self._password("console-outbox-login-password")

    def outbox_relay_password(self) -> str:
        """The outbox relay's login password (OUTBOX_RELAY_LOGIN, a member of herald_outbox_relay)."""
        return self._password("outbox-relay-password")

    def outbox_database_url(self, database_url: str) -> str:
        """The demo service's database as the service itself connects: the ledger's server and login
        (the owner), another database name. The service writes its rows and the outbox with it."""
        return make_conninfo(database_url, dbname=self.outbox.service_database)

    def outbox_relay_database_url(self, database_url: str) -> str:
        """The demo service's database as the relay connects: its own login, which may read
        herald_outbox and update the relay's columns and nothing else (herald/outbox/schema.sql)."""
        return make_conninfo(
            self.outbox_database_url(database_url), user=OUTBOX_RELAY_LOGIN, password=self.outbox_relay_password()
        )

    def console_outbox_database_url(self, database_url: str) -> str:
        """The demo service's database as the console connects for the outbox backlog: its own login,
        which may read herald_outbox's state and created_at and nothing else (herald/outbox/schema.sql)."""
        return make_conninfo(
            self.outbox_database_url(database_url),
            user=CONSOLE_OUTBOX_LOGIN,
            password=self.console_outbox_login_password(),
        )

    def paced_route_env(self, database_url: str) -> dict[str, str]:
        """service_env for the paced route's worker: its task queue and its submit rate limit."""
        route = self.model_copy(
            update={
                "temporal": self.temporal.model_copy(update={"task_queue": self.paced_route.task_queue}),
                "adapter": self.adapter.model_copy(update={"submit_rate_limit": self.paced_route.submit_rate_limit}),
            }
        )
        return route.service_env(database_url)

    def service_env(self, database_url: str) -> dict[str, str]:
        """The HERALD_* variables that point the worker and receipt server at this stack.

        ``database_url`` is the owner's connection; the services get the application login's.
        Built from the settings' sections (each one checked as a process would check it), then
        written out by their variable names.
        """
        temporal = TemporalVariables(
            herald_temporal_address=f"{self.temporal.host}:{self.temporal.port}",
            herald_temporal_namespace=self.temporal.namespace,
            herald_task_queue=self.temporal.task_queue,
            # The stack's key file alone: keys exported in the caller's shell stay out of it.
            codec=CodecSettings(key_files=str(self.codec_key_file()), key_entries=None, active_key=None),
        )
        receipts_url = f"http://{self.receipts.host}:{self.receipts.port}"
        infobip_webhook = self.infobip_webhook_settings()
        settings = Settings(
            # Services connect as the application's login (herald_app: SELECT and INSERT on the
            # ledger, nothing else); `database_url` is the owner's, which migrates and administers.
            database_url=app_database_url(database_url, self.app_login_password()),
            migration_database_url=database_url,
            state_dir=self.state_path,
            twilio=TwilioSettings(
                api_base=f"http://{self.emulator.host}:{self.emulator.port}",
                account_sid=self.emulator.account_sid,
                auth_token=self.emulator.auth_token,
                from_number=self.emulator.from_number,
                connect_timeout=self.adapter.connect_timeout,
                read_timeout=self.adapter.read_timeout,
                submit_rate_limit=self.adapter.submit_rate_limit,
            ),
            receipts=ReceiptSettings(
                host=self.receipts.host,
                port=self.receipts.port,
                public_url=receipts_url,
                sendgrid_public_key=self.esp_public_key(),
                unsubscribe=self.unsubscribe_settings(),
                infobip_webhook=infobip_webhook,
            ),
            # The second SMS provider: the Infobip emulator, with the webhook keys the receipt server verifies.
            infobip=InfobipSettings(
                base_url=f"http://{self.infobip.host}:{self.infobip.port}",
                api_key=SecretStr(self.infobip.api_key),
                webhook=infobip_webhook,
            ),
            email=EmailSettings(
                host=self.esp.host,
                port=self.esp.smtp_port,
                security="none",  # the emulator listens on loopback only
                from_address=self.esp.from_address,
                message_id_domain=self.esp.message_id_domain,
                connect_timeout=self.adapter.connect_timeout,
                read_timeout=self.adapter.read_timeout,
                unsubscribe=self.unsubscribe_settings(),
            ),
            # The relay's own login, not the service's: it claims and marks outbox rows, nothing else.
            outbox=OutboxSettings(database_url=self.outbox_relay_database_url(database_url)),
            fingerprints=FingerprintSettings(
                key_files=str(self.fingerprint_key_file()), key_entries=None, active_key=None
            ),
            key_encryption=KeyEncryptionSettings(
                key_files=str(self.key_encryption_key_file()), key_entries=None, active_key=None
            ),
            codec_server=CodecServerSettings(
                host=self.codec.host,
                port=self.codec.port,
                cors_origins=(
                    f"http://{self.temporal.host}:{self.temporal.ui_port}",
                    f"http://localhost:{self.temporal.ui_port}",
                ),
            ),
        )
        return {
            **as_variables(temporal),
            **as_variables(settings),
            # Blank is unset: a Temporal Cloud profile or API key in the caller's shell must not
            # reach this stack's processes (they inherit the shell; herald/settings/temporal_profile.py).
            **{name: "" for name in TEMPORAL_VARIABLES},
        }


def load_stack_config(path: Path = DEFAULT_STACK_FILE) -> StackConfig:
    with path.open(encoding="utf-8") as handle:
        return StackConfig.model_validate(yaml.safe_load(handle) or {})
