"""Herald's settings: one nested model, read from the environment by ``load_settings``.

Every address, namespace, credential and TLS setting is a variable, so the same code runs against
the local stack, a Temporal cluster or Temporal Cloud, a managed PostgreSQL and the real Twilio API.
The local launcher sets these from ``temporal-dev.yaml`` (devstack builds them from these sections);
production sets them from its secret store.

Each section is what one part takes, whole: ``TwilioSettings`` is the Twilio adapter's config,
``InfobipSettings`` the Infobip adapter's, ``EmailSettings`` the SMTP adapter's, ``SendGridActivitySettings`` the Email Activity feed's,
``ReceiptSettings`` the receipt server's, ``OutboxSettings`` the relay's, and so on. Each field
names the variable that sets it (its alias), its default (the one place it is written) and its
shape with the sentence that refuses a bad value (herald/settings/rules.py); ``herald.settings.variables``
reads them, and a bad value is a single ``InvalidSetting`` line naming the variable and the rule.
Blank is unset: ``HERALD_X=`` keeps the default, like an absent variable, and values are stripped.

One section is read in two steps: Temporal's connection. ``TemporalVariables`` holds Herald's own
HERALD_TEMPORAL_* variables beside Temporal's TEMPORAL_* ones, which Temporal's own loader
(``herald.settings.temporal_profile``) reads together with a TOML profile; ``TemporalSettings`` is what
both say, one setting at a time, Herald's variable winning.

The package's modules: ``keys`` (the keyrings' sections), ``temporal`` (the connection),
``providers`` (Twilio, Infobip, SMTP, SendGrid's feed), ``servers`` (receipts, telemetry, codec server, outbox,
worker versioning), ``defaults`` (where things listen), ``rules`` (each value's shape and the
sentence that refuses it), ``variables`` (the one reader of the environment). What callers use is
named here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from herald.settings.defaults import (
    CODEC_SERVER_PORT,
    LEDGER_METRICS_PORT,
    LOOPBACK,
    RECEIPT_PORT,
    REPO_ROOT,
    TEMPORAL_PORT,
    TEMPORAL_UI_PORT,
    WORKFLOW_CACHE,
    WORKFLOW_TASK_SLOTS,
)
from herald.settings.keys import (
    _UNSUBSCRIBE_FALLBACK_RULE,
    CodecSettings,
    FingerprintSettings,
    KeyEncryptionSettings,
    UnsubscribeSettings,
    is_https_url,
)
from herald.settings.providers import (
    EmailSettings,
    InfobipSettings,
    InfobipWebhookSettings,
    SendGridActivitySettings,
    TwilioSettings,
)
from herald.settings.rules import Count, DatabaseUrl, DirectoryPath, Rule, refusal
from herald.settings.servers import (
    OUTBOX_LEASE_SECONDS,
    CodecServerSettings,
    ConsoleSettings,
    OutboxSettings,
    ReceiptSettings,
    TelemetrySettings,
    WorkerVersionSettings,
)
from herald.settings.temporal import TemporalSettings, TemporalVariables, _temporal
from herald.settings.temporal_profile import load_profile
from herald.settings.variables import InvalidSetting, Section, given_variables, items, read_section, rules_of

__all__ = [
    "CODEC_SERVER_PORT", "LEDGER_METRICS_PORT", "LOOPBACK", "OUTBOX_LEASE_SECONDS", "RECEIPT_PORT", "REPO_ROOT",
    "RULES", "TEMPORAL_PORT", "TEMPORAL_UI_PORT", "CodecServerSettings", "CodecSettings", "ConsoleSettings", "EmailSettings",
    "FingerprintSettings", "InfobipSettings", "InfobipWebhookSettings", "InvalidSetting", "KeyEncryptionSettings", "OutboxSettings", "ReceiptSettings",
    "SendGridActivitySettings", "Settings", "TelemetrySettings", "TemporalSettings", "TemporalVariables",
    "TwilioSettings", "UnsubscribeSettings", "WorkerVersionSettings", "as_variables", "is_https_url",
    "load_section", "load_settings",
]  # fmt: skip


# ---- the whole -----------------------------------------------------------------------------------


# The queues a worker process may poll: its route's standard workflow queue, its urgent lane, its submits.
WorkerQueue = Literal["standard", "urgent", "submits"]
WORKER_QUEUES: tuple[WorkerQueue, ...] = ("standard", "urgent", "submits")
# Names for several: `workflows` is every workflow task (so a split into workflows and submits
# leaves no lane unpolled), `all` every queue.
_WORKER_QUEUE_GROUPS: dict[str, tuple[WorkerQueue, ...]] = {"workflows": ("standard", "urgent"), "all": WORKER_QUEUES}
_WORKER_QUEUES_RULE = "must be all, workflows, or a comma-separated list of standard, urgent and submits"


def _worker_queues(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    names = items(value)
    chosen = {queue for name in names for queue in _WORKER_QUEUE_GROUPS.get(name, (name,))}
    if not names or not chosen <= set(WORKER_QUEUES):
        raise ValueError("not a set of queues")
    return frozenset(chosen)


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
    infobip: InfobipSettings = InfobipSettings()
    email: EmailSettings = EmailSettings()
    sendgrid_activity: SendGridActivitySettings = SendGridActivitySettings()
    receipts: ReceiptSettings = ReceiptSettings()
    codec_server: CodecServerSettings = CodecServerSettings()
    console: ConsoleSettings = ConsoleSettings()
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
    # Workflow tasks one worker runs at once. The server hands out workflow tasks by the start's
    # priority, but a worker slot is taken before the poll and carries none: with many slots an
    # urgent intent's task, once polled, shares the CPU with every backlog task polled beside it;
    # with few, the rest wait in the server's queue, in priority order (bench/RESULTS.md, backlog).
    workflow_task_slots: Count(1000) = Field(WORKFLOW_TASK_SLOTS, alias="HERALD_WORKFLOW_TASK_SLOTS")  # type: ignore[valid-type]
    # Open workflows one worker keeps in memory between their tasks. One evicted (the least recently
    # used, once more are open) replays its whole history at its next task: CPU on the worker and
    # the server, and a slower task.
    workflow_cache: Count(100_000) = Field(WORKFLOW_CACHE, alias="HERALD_WORKFLOW_CACHE")  # type: ignore[valid-type]
    # What this worker process polls (herald/temporal/task_queues.py): every queue of its route (one
    # process does everything, as `make run`), or some of them, so the submits of a route, or its
    # urgent lane, have a process (an event loop, a core) of their own and a burst of workflow starts
    # cannot slow them (bench/RESULTS.md, the backlog pass). `workflows` is both workflow queues.
    worker_queues: Annotated[
        frozenset[WorkerQueue], BeforeValidator(_worker_queues), Rule(_WORKER_QUEUES_RULE)
    ] = Field(frozenset(WORKER_QUEUES), alias="HERALD_WORKER_QUEUES")

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
    """One section alone, for a module that needs only it (herald.privacy.fingerprints reads its keys so)."""
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


