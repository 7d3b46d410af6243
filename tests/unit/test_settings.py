"""Settings read from the environment: a bad value names its variable and the rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from herald.settings import REPO_ROOT, RULES, InvalidSetting, load_settings
from herald.temporal.client import tls_config


def test_receipt_hold_defaults_to_two_seconds_and_reads_the_variable() -> None:
    """HERALD_RECEIPT_HOLD_SECONDS defaults to 2 s and accepts 0 (hold nothing) and fractions."""
    assert load_settings({}).receipts.hold_seconds == 2.0
    assert load_settings({"HERALD_RECEIPT_HOLD_SECONDS": "0"}).receipts.hold_seconds == 0.0
    assert load_settings({"HERALD_RECEIPT_HOLD_SECONDS": "0.25"}).receipts.hold_seconds == 0.25


@pytest.mark.parametrize("value", ["abc", "-1", "61", "nan"])
def test_a_bad_receipt_hold_is_refused_naming_the_variable(value: str) -> None:
    """A hold that is not a number of seconds from 0 to 60 is refused with the variable's name and the rule."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_RECEIPT_HOLD_SECONDS": value})
    assert str(refused.value) == "HERALD_RECEIPT_HOLD_SECONDS: must be a number of seconds from 0 to 60"


def test_submit_rate_limit_is_unlimited_unless_set() -> None:
    """HERALD_SUBMIT_RATE_LIMIT unset, empty or 0 means no limit; a positive number is the submits per second."""
    assert load_settings({}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": ""}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": "0"}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": "9.7"}).twilio.submit_rate_limit == 9.7


@pytest.mark.parametrize("value", ["ten", "-1", "inf", "nan"])
def test_a_bad_submit_rate_limit_is_refused_naming_the_variable(value: str) -> None:
    """A submit rate that is not a finite number of messages per second, at least 0, is refused naming the variable."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_SUBMIT_RATE_LIMIT": value})
    assert str(refused.value).startswith("HERALD_SUBMIT_RATE_LIMIT: must be a number of messages per second")


@pytest.mark.parametrize(
    "name,value,rule",
    [
        ("HERALD_TWILIO_CONNECT_TIMEOUT", "abc", "must be a number of seconds from 0 to 600"),
        ("HERALD_TWILIO_READ_TIMEOUT", "0", "must be a number of seconds from 0 to 600"),
        ("HERALD_TWILIO_MAX_IN_FLIGHT", "many", "must be a whole number from 1 to 1024"),
        ("HERALD_RECEIPT_PORT", "80x", "must be a port number from 1 to 65535"),
        ("HERALD_SMTP_PORT", "99999", "must be a port number from 1 to 65535"),
        ("HERALD_TEMPORAL_TLS", "ture", "must be one of 1, true, yes, on, 0, false, no, off"),
        ("HERALD_SMTP_SECURITY", "ssl", "must be one of starttls, tls, none"),
    ],
)
def test_a_bad_value_fails_in_one_line_naming_the_variable_and_the_rule(name: str, value: str, rule: str) -> None:
    """No raw traceback, no silent default: the variable and its rule, never a guess."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({name: value})
    assert str(refused.value) == f"{name}: {rule}"


def test_tls_accepts_the_usual_spellings() -> None:
    assert load_settings({"HERALD_TEMPORAL_TLS": "TRUE"}).temporal.tls is True
    assert load_settings({"HERALD_TEMPORAL_TLS": "off"}).temporal.tls is False
    assert load_settings({}).temporal.tls is False


# ---- every variable: one line naming it and its rule, never its value ----------------------------

HERE = Path(__file__).resolve()
WORKER_QUEUES_RULE = "must be all, workflows, or a comma-separated list of standard, urgent and submits"
TASK_QUEUE_RULE = "must be 1 to 990 characters, none of them whitespace, not ending in -urgent or -submit"
KEY_LINE_SECRET = "c2VjcmV0LWtleS1tYXRlcmlhbA=="  # base64 of 19 bytes: not an AES-256 key
NOT_A_FILE = "/nonexistent/herald-settings-test.pem"

# (variable, bad value, the line expected after "VARIABLE: "). Values are chosen to be unlike any
# rule's text, so "the value is not in the message" means something.
BAD_VALUES: list[tuple[str, str, str]] = [
    ("HERALD_TEMPORAL_ADDRESS", "temporal-no-port", "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"),
    ("HERALD_TEMPORAL_NAMESPACE", "name space!", "must be a namespace name: 1 to 255 letters, digits, '.', '-' or '_'"),
    ("HERALD_TASK_QUEUE", "queue with spaces", TASK_QUEUE_RULE),
    ("HERALD_URGENT_LANE", "sometimes", "must be one of 1, true, yes, on, 0, false, no, off"),
    # A base queue may not be named like a lane of another's: its submits would be that one's.
    ("HERALD_TASK_QUEUE", "herald-notifications-urgent", TASK_QUEUE_RULE),
    ("HERALD_TASK_QUEUE", "herald-notifications-submit", TASK_QUEUE_RULE),
    ("HERALD_TASK_QUEUE", "q" * 991, TASK_QUEUE_RULE),
    ("HERALD_TEMPORAL_TLS", "ture", "must be one of 1, true, yes, on, 0, false, no, off"),
    ("HERALD_TEMPORAL_TLS_CA", NOT_A_FILE, "no such file"),
    ("HERALD_TEMPORAL_TLS_CERT", NOT_A_FILE, "no such file"),
    ("HERALD_TEMPORAL_TLS_KEY", str(HERE.parent), "is a directory, not a file"),
    ("HERALD_TEMPORAL_API_KEY", "key with-space-secret", "must be one token, without spaces or line breaks"),
    ("TEMPORAL_CONFIG_FILE", NOT_A_FILE, "no such file"),
    ("TEMPORAL_PROFILE", "prod profile", "must be a profile name: letters, digits, '.', '-' or '_'"),
    ("TEMPORAL_ADDRESS", "temporal-no-port", "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"),
    ("TEMPORAL_NAMESPACE", "name space!", "must be a namespace name: 1 to 255 letters, digits, '.', '-' or '_'"),
    ("TEMPORAL_API_KEY", "key with-space-secret", "must be one token, without spaces or line breaks"),
    ("TEMPORAL_TLS", "yes", "must be one of true, 1, false, 0 (the spellings Temporal's loader reads)"),
    ("TEMPORAL_TLS_SERVER_NAME", "bad host!", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", NOT_A_FILE, "no such file"),
    ("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "not-pem-ca", "must be PEM text, beginning with -----BEGIN"),
    ("TEMPORAL_TLS_CLIENT_CERT_PATH", NOT_A_FILE, "no such file"),
    ("TEMPORAL_TLS_CLIENT_CERT_DATA", "not-pem-cert", "must be PEM text, beginning with -----BEGIN"),
    ("TEMPORAL_TLS_CLIENT_KEY_PATH", NOT_A_FILE, "no such file"),
    ("TEMPORAL_TLS_CLIENT_KEY_DATA", "not-pem-secret", "must be PEM text, beginning with -----BEGIN"),
    ("TEMPORAL_GRPC_META_AUTHORIZATION", "Bearer first\nsecond-secret", "must be one line"),
    ("HERALD_WORKER_DEPLOYMENT_NAME", "herald.v2", "must be 1 to 255 characters, without '.' or whitespace"),
    ("HERALD_WORKER_BUILD_ID", "build 42", "must be 1 to 255 characters, none of them whitespace"),
    ("HERALD_CODEC_KEYS", "not-a-key-entry", "each key must be id:base64key, the id 1-64 letters, digits, '.', '_' or '-'"),
    ("HERALD_CODEC_ACTIVE_KEY", "zz-unknown", "must be the id of a key in HERALD_CODEC_KEYS or HERALD_CODEC_KEY_FILES (configured ids: none)"),
    ("HERALD_FINGERPRINT_KEYS", "k1:c2hvcnQtc2VjcmV0", "key k1: must decode to 32 bytes (HMAC-SHA-256), not 12"),
    ("HERALD_FINGERPRINT_ACTIVE_KEY", "zz-unknown", "must be the id of a key in HERALD_FINGERPRINT_KEYS or HERALD_FINGERPRINT_KEY_FILES (configured ids: none)"),
    ("HERALD_KEY_ENCRYPTION_KEYS", "w1:c2hvcnQtc2VjcmV0", "key w1: must decode to 32 bytes (AES-256), not 12"),
    ("HERALD_KEY_ENCRYPTION_ACTIVE_KEY", "zz-unknown", "must be the id of a key in HERALD_KEY_ENCRYPTION_KEYS or HERALD_KEY_ENCRYPTION_KEY_FILES (configured ids: none)"),
    ("HERALD_UNSUBSCRIBE_KEYS", "u1:c2hvcnQtc2VjcmV0", "key u1: must decode to 32 bytes (HMAC-SHA-256), not 12"),
    ("HERALD_UNSUBSCRIBE_ACTIVE_KEY", "zz-unknown", "must be the id of a key in HERALD_UNSUBSCRIBE_KEYS or HERALD_UNSUBSCRIBE_KEY_FILES (configured ids: none)"),
    ("HERALD_UNSUBSCRIBE_URL", "http://hooks.example.com", "must be an https:// URL with a host (RFC 8058: mail clients post only to HTTPS), e.g. https://hooks.example.com"),
    ("HERALD_UNSUBSCRIBE_MAILTO", "not-an-address", "must be an e-mail address, e.g. unsubscribe@example.com"),
    ("HERALD_UNSUBSCRIBE_TTL_DAYS", "29", "must be a whole number of days from 30 to 3650 (an unsubscribe link must work for 30 days)"),
    ("HERALD_TWILIO_API_BASE", "ftp://api.example", "must be an http:// or https:// URL with a host, e.g. https://api.twilio.com"),
    ("HERALD_TWILIO_ACCOUNT_SID", "ACnot-a-sid", "must be AC followed by 32 hexadecimal digits (Twilio's Account SID)"),
    ("HERALD_TWILIO_AUTH_TOKEN", "token with-space-secret", "must be one token, without spaces or line breaks"),
    ("HERALD_TWILIO_FROM", "not a number!", "must be an E.164 number (+ and up to 15 digits), a short code, or a sender ID of up to 11 letters or digits"),
    ("HERALD_TWILIO_MESSAGING_SERVICE_SID", "MGnot-a-sid", "must be MG followed by 32 hexadecimal digits (a Messaging Service SID)"),
    ("HERALD_TWILIO_CONNECT_TIMEOUT", "ten-seconds", "must be a number of seconds from 0 to 600"),
    ("HERALD_TWILIO_READ_TIMEOUT", "601.5", "must be a number of seconds from 0 to 600"),
    ("HERALD_TWILIO_MAX_IN_FLIGHT", "many", "must be a whole number from 1 to 1024"),
    ("HERALD_SUBMIT_RATE_LIMIT", "ten", "must be a number of messages per second, at least 0 (0 or unset: unlimited)"),
    ("HERALD_WORKFLOW_TASK_SLOTS", "many", "must be a whole number from 1 to 1000"),
    ("HERALD_WORKFLOW_CACHE", "lots", "must be a whole number from 1 to 100000"),
    ("HERALD_WORKER_QUEUES", "both", WORKER_QUEUES_RULE),
    ("HERALD_WORKER_QUEUES", "standard,backlog", WORKER_QUEUES_RULE),
    ("HERALD_WORKER_QUEUES", " ;; ", WORKER_QUEUES_RULE),
    ("HERALD_SMTP_HOST", "smtp://relay.example", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("HERALD_SMTP_PORT", "99999", "must be a port number from 1 to 65535"),
    ("HERALD_SMTP_SECURITY", "ssl", "must be one of starttls, tls, none"),
    ("HERALD_SMTP_USERNAME", "user\nRCPT TO:<someone>", "must be one line"),
    ("HERALD_SMTP_PASSWORD", "pass\nword-secret", "must be one line"),
    ("HERALD_EMAIL_FROM", "not-an-address", "must be an e-mail address, e.g. notifications@example.com"),
    ("HERALD_EMAIL_MESSAGE_ID_DOMAIN", "localhost-only", "must be a domain name with at least one dot, e.g. mail.example.com"),
    ("HERALD_EMAIL_PROVIDER", "Send Grid", "must be 1 to 32 lowercase letters, digits or '_', starting with a letter, e.g. sendgrid"),
    ("HERALD_EMAIL_DELIVERY_EVENTS", "maybe", "must be one of true, false"),
    ("HERALD_SMTP_CONNECT_TIMEOUT", "301", "must be a number of seconds from 0 to 300"),
    ("HERALD_SMTP_READ_TIMEOUT", "-5", "must be a number of seconds from 0 to 600"),
    ("HERALD_SENDGRID_API_KEY", "SG.key\nX-Injected: 1", "must be one line"),
    ("HERALD_SENDGRID_API_BASE", "sendgrid-api", "must be an http:// or https:// URL with a host, e.g. https://api.sendgrid.com"),
    ("HERALD_SENDGRID_ACTIVITY_LAG", "86401", "must be a number of seconds from 0 to 86400"),
    ("HERALD_SENDGRID_ACTIVITY_REQUESTS_PER_MINUTE", "lots", "must be a whole number from 1 to 6000"),
    ("HERALD_INFOBIP_BASE_URL", "abc12.infobip-host", "must be an http:// or https:// URL with a host, e.g. https://xxxxx.api.infobip.com"),
    ("HERALD_INFOBIP_API_KEY", "App key-secret", "must be one token, without spaces or line breaks"),
    ("HERALD_INFOBIP_SENDER", "A-very-long-sender", "must be a numeric sender of up to 15 digits (a leading + allowed) or an alphanumeric one of up to 11"),
    ("HERALD_INFOBIP_CONNECT_TIMEOUT", "-3", "must be a number of seconds from 0 to 600"),
    ("HERALD_INFOBIP_READ_TIMEOUT", "601", "must be a number of seconds from 0 to 600"),
    ("HERALD_INFOBIP_MAX_IN_FLIGHT", "many", "must be a whole number from 1 to 1024"),
    ("HERALD_INFOBIP_LOGS_REQUESTS_PER_MINUTE", "+120", "must be a whole number from 1 to 6000"),
    ("HERALD_INFOBIP_IDEMPOTENCY_GRACE_SECONDS", "one hour", "must be a whole number from 1 to 2592000"),
    ("HERALD_INFOBIP_WEBHOOK_KEYS", "k1:not-base64-secret", "key k1: must be standard base64"),
    ("HERALD_INFOBIP_WEBHOOK_ACTIVE_KEY", "k9", "must be the id of a key in HERALD_INFOBIP_WEBHOOK_KEYS or HERALD_INFOBIP_WEBHOOK_KEY_FILES (configured ids: none)"),
    ("HERALD_INFOBIP_WEBHOOK_BASIC", "nocolon-secret", "must be user:password, each 1 to 255 characters on one line (the subscription profile's BASIC credentials)"),
    ("HERALD_RECEIPT_HOST", "0.0.0.0:8235", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("HERALD_RECEIPT_PORT", "80x", "must be a port number from 1 to 65535"),
    ("HERALD_RECEIPT_PUBLIC_URL", "hooks.example.com/twilio", "must be an http:// or https:// URL with a host, e.g. https://hooks.example.com"),
    ("HERALD_RECEIPT_HOLD_SECONDS", "61", "must be a number of seconds from 0 to 60"),
    ("HERALD_TWILIO_INBOUND_REPLIES", "maybe", "must be one of 1, true, yes, on, 0, false, no, off"),
    ("HERALD_RECEIPT_STORE_TIMEOUT", "15", "must be a number of seconds from 0 to 14"),
    ("HERALD_SENDGRID_WEBHOOK_PUBLIC_KEY", "not-a-public-key", "must be SendGrid's verification key (ECDSA P-256, base64 DER or PEM, from the Signed Event Webhook settings)"),
    ("HERALD_WORKER_METRICS_ADDRESS", "metrics-host-only", "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:9464"),
    ("HERALD_METRICS_HOST", "http://0.0.0.0", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("HERALD_METRICS_PORT", "http", "must be a port number from 1 to 65535"),
    ("HERALD_METRICS_QUERY_TIMEOUT", "600", "must be a number of seconds from 0 to 60"),
    ("HERALD_OTLP_ENDPOINT", "collector:4317", "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4317"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x", "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4317"),
    ("OTEL_SERVICE_NAME", "herald\nworker", "must be 1 to 255 characters on one line"),
    ("HERALD_CODEC_SERVER_HOST", "codec host", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("HERALD_CODEC_SERVER_PORT", "http", "must be a port number from 1 to 65535"),
    ("HERALD_CODEC_SERVER_CORS_ORIGINS", "http://*.example.com", "each origin must be scheme://host[:port], no path and no wildcard, like http://127.0.0.1:8233"),
    ("HERALD_CODEC_SERVER_TOKEN", "token with-space-secret", "must be one token, without spaces or line breaks"),
    ("HERALD_CODEC_SERVER_ALLOWED_HOSTS", "localhost:8238,https://codec.example.com", "each entry must be host or host:port, no scheme, path or wildcard, like codec.example.com or 127.0.0.1:8238"),
    ("HERALD_CONSOLE_HOST", "console host", "must be a host name or IP address, without scheme or port, e.g. 127.0.0.1"),
    ("HERALD_CONSOLE_PORT", "http", "must be a port number from 1 to 65535"),
    ("HERALD_CONSOLE_DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_CONSOLE_OPENER_DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_CONSOLE_TOKEN", "token with-space-secret", "must be one token, without spaces or line breaks"),
    ("HERALD_CONSOLE_AUTH_HEADER", "X User", "must be an HTTP header name: 1 to 64 letters, digits or '-', like X-Forwarded-User"),
    ("HERALD_CONSOLE_TRUSTED_PROXIES", "10.0.0.1,proxy.internal", "each entry must be an IP address or network, like 10.0.0.5 or 10.0.0.0/24"),
    ("HERALD_CONSOLE_ALLOWED_HOSTS", "https://console.example.com", "each entry must be host or host:port, no scheme, path or wildcard, like codec.example.com or 127.0.0.1:8238"),
    ("HERALD_CONSOLE_TEMPORAL_UI_URL", "temporal.internal:8233", "must be an http:// or https:// URL with a host, e.g. https://temporal.example.com"),
    ("HERALD_CONSOLE_QUERY_TIMEOUT", "600", "must be a number of seconds from 0 to 60"),
    ("HERALD_CONSOLE_OUTBOX_DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_CONSOLE_ROUTES", "herald-paced,herald fast", "each entry must be a task queue name: 1 to 1000 characters, none of them whitespace"),
    ("DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_OUTBOX_DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_MIGRATION_DATABASE_URL", "host=db password=hunter2 nonsense", "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
    ("HERALD_OUTBOX_LEASE_SECONDS", "3601", "must be a number of seconds from 0 to 3600"),
    ("HERALD_STATE_DIR", str(HERE), "must be a directory, or a path where one can be created"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "rule"), BAD_VALUES, ids=[f"{name}={value!r}" for name, value, _ in BAD_VALUES]
)
def test_every_variable_refuses_a_bad_value_in_one_line_without_echoing_it(name: str, value: str, rule: str) -> None:
    """Each variable of the model refuses a value it cannot use: `NAME: rule`, one line, the value nowhere in it."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({name: value})
    message = str(refused.value)
    assert message == f"{name}: {rule}"
    assert refused.value.name == name
    assert "\n" not in message and value not in message and "input_value" not in message


def test_a_bad_line_of_a_key_file_is_refused_without_the_line(tmp_path: Path) -> None:
    """HERALD_CODEC_KEY_FILES names the file and the line, never the key written there."""
    keys = tmp_path / "keys"
    keys.write_text(f"a:{KEY_LINE_SECRET}\n")
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_CODEC_KEY_FILES": str(keys)})
    rule = "key a: must decode to 32 bytes (AES-256), not 19"
    assert str(refused.value) == f"HERALD_CODEC_KEY_FILES: {keys} line 1: {rule}"
    assert KEY_LINE_SECRET not in str(refused.value)


def test_the_bad_value_table_covers_every_variable_of_the_model() -> None:
    """A variable added to the model without a bad-value case here fails this test."""
    covered = {name for name, _, _ in BAD_VALUES} | {
        "HERALD_CODEC_KEY_FILES", "HERALD_FINGERPRINT_KEY_FILES", "HERALD_UNSUBSCRIBE_KEY_FILES",
        "HERALD_KEY_ENCRYPTION_KEY_FILES", "HERALD_INFOBIP_WEBHOOK_KEY_FILES",
    }
    declared = {name.replace("*", "AUTHORIZATION") for name in RULES}
    assert declared == covered


def test_blank_is_unset_for_every_variable() -> None:
    """`NAME=` and `NAME=   ` keep the default, like an absent variable (a blank line in a secret store)."""
    defaults = load_settings({})
    assert load_settings({name: "" for name in RULES}) == defaults
    assert load_settings({name: "   " for name in RULES}) == defaults


OURS = ("HERALD_", "TEMPORAL_", "OTEL_", "DATABASE_URL")


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process's environment without any variable Herald reads (whatever the developer's shell exports)."""
    for name in [name for name in os.environ if name.startswith(OURS)]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_only_the_given_mapping_is_read(clean_environ: pytest.MonkeyPatch) -> None:
    """With a mapping, the process's environment is not consulted at all; without one, it is."""
    monkeypatch = clean_environ
    monkeypatch.setenv("HERALD_RECEIPT_PORT", "80x")
    monkeypatch.setenv("HERALD_TASK_QUEUE", "from-the-shell")
    assert load_settings({}).temporal.task_queue == "herald-notifications"
    monkeypatch.delenv("HERALD_RECEIPT_PORT")
    assert load_settings().temporal.task_queue == "from-the-shell"


def test_the_standard_otlp_variable_is_judged_only_when_it_is_used() -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT is other software's too: with Herald's own set, its form is not Herald's concern."""
    env = {"HERALD_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}
    assert load_settings(env).telemetry.otlp_endpoint == "http://collector:4317"


# ---- Temporal's own configuration: TEMPORAL_* and profiles -------------------------------------

PROFILES = """
[profile.default]
address = "default.example:7233"
namespace = "default-ns"

[profile.prod]
address = "prod.tmprl.example:7233"
namespace = "herald-prod.a1b2c"
api_key = "profile-api-key-secret"
"""


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    path = tmp_path / "temporal.toml"
    path.write_text(PROFILES)
    return path


def test_a_temporal_profile_sets_the_connection(profiles: Path) -> None:
    """TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE select a profile; its address, namespace and API key are used."""
    temporal = load_settings({"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "prod"}).temporal
    assert (temporal.address, temporal.namespace) == ("prod.tmprl.example:7233", "herald-prod.a1b2c")
    assert temporal.api_key is not None and temporal.api_key.get_secret_value() == "profile-api-key-secret"
    assert tls_config(temporal)  # an API key means TLS, as in Temporal's own reading
    default = load_settings({"TEMPORAL_CONFIG_FILE": str(profiles)}).temporal
    assert (default.address, default.namespace, default.api_key) == ("default.example:7233", "default-ns", None)


def test_herald_variables_win_over_temporal_ones_and_temporal_ones_over_the_file(profiles: Path) -> None:
    """HERALD_TEMPORAL_* over TEMPORAL_* over the profile, one setting at a time."""
    env = {"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "prod"}
    over_file = load_settings({**env, "TEMPORAL_ADDRESS": "env.example:7233"}).temporal
    assert (over_file.address, over_file.namespace) == ("env.example:7233", "herald-prod.a1b2c")
    herald = load_settings(
        {**env, "TEMPORAL_ADDRESS": "env.example:7233", "HERALD_TEMPORAL_ADDRESS": "herald.example:7233"}
    ).temporal
    assert (herald.address, herald.namespace) == ("herald.example:7233", "herald-prod.a1b2c")
    assert herald.api_key is not None  # the profile still supplies what Herald's variables leave unset
    named = load_settings({**env, "HERALD_TEMPORAL_NAMESPACE": "herald-eu", "HERALD_TEMPORAL_API_KEY": "herald-key"})
    assert named.temporal.namespace == "herald-eu"
    assert named.temporal.api_key is not None and named.temporal.api_key.get_secret_value() == "herald-key"


def test_temporal_variables_work_without_a_file() -> None:
    """TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY and TEMPORAL_TLS alone configure the connection."""
    temporal = load_settings(
        {"TEMPORAL_ADDRESS": "cloud.example:7233", "TEMPORAL_NAMESPACE": "ns.acct", "TEMPORAL_TLS": "true"}
    ).temporal
    assert (temporal.address, temporal.namespace, temporal.tls) == ("cloud.example:7233", "ns.acct", True)
    assert load_settings({"TEMPORAL_TLS": "TRUE", "HERALD_TEMPORAL_TLS": "off"}).temporal.tls is False


def test_tls_material_from_a_profile_reaches_the_client(tmp_path: Path) -> None:
    """A profile's certificate and key (as PEM text) and server name become the client's TLS config."""
    path = tmp_path / "temporal.toml"
    path.write_text(
        '[profile.mtls]\naddress = "mtls.example:7233"\n[profile.mtls.tls]\nserver_name = "temporal.internal"\n'
        'client_cert_data = "-----BEGIN CERTIFICATE-----\\ncert\\n"\n'
        'client_key_data = "-----BEGIN PRIVATE KEY-----\\nkey\\n"\n'
    )
    temporal = load_settings({"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "mtls"}).temporal
    assert temporal.tls is True
    config = tls_config(temporal)
    assert not isinstance(config, bool)
    assert config.client_cert == b"-----BEGIN CERTIFICATE-----\ncert\n"
    assert config.client_private_key == b"-----BEGIN PRIVATE KEY-----\nkey\n"
    assert config.domain == "temporal.internal"
    assert "key\\n" not in repr(temporal)  # the key is a secret in reprs and logs
    env = {"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "mtls", "TEMPORAL_TLS": "false"}
    assert load_settings(env).temporal.tls is False


def test_grpc_metadata_variables_become_call_headers() -> None:
    """TEMPORAL_GRPC_META_<NAME> is sent as a header on every call, its value kept secret in reprs."""
    temporal = load_settings({"TEMPORAL_GRPC_META_X_TENANT": "eu-secret-tenant"}).temporal
    headers = {name: value.get_secret_value() for name, value in temporal.rpc_metadata.items()}
    assert headers == {"x-tenant": "eu-secret-tenant"}
    assert "eu-secret-tenant" not in repr(temporal)


def test_a_missing_profile_is_refused_naming_temporal_profile(profiles: Path) -> None:
    """A profile the file does not have is one line naming TEMPORAL_PROFILE, not a silent default."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"TEMPORAL_CONFIG_FILE": str(profiles), "TEMPORAL_PROFILE": "staging"})
    assert str(refused.value) == (
        "TEMPORAL_PROFILE: must name a profile of the Temporal config file "
        "(TEMPORAL_CONFIG_FILE, else Temporal's default temporal.toml)"
    )


def test_a_config_file_that_is_not_toml_is_refused_without_quoting_it(tmp_path: Path) -> None:
    """Temporal's parser quotes the bad line; Herald names the file's variable and the position only."""
    path = tmp_path / "temporal.toml"
    path.write_text('[profile.default]\napi_key = "unterminated-secret\n')
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"TEMPORAL_CONFIG_FILE": str(path)})
    assert str(refused.value) == "TEMPORAL_CONFIG_FILE: the config file is not valid TOML (line 2, column 31)"
    assert "secret" not in str(refused.value)


def test_a_bad_address_in_a_profile_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A profile's address gets TEMPORAL_ADDRESS's rule, reported against TEMPORAL_CONFIG_FILE."""
    path = tmp_path / "temporal.toml"
    path.write_text('[profile.default]\naddress = "no-port-here"\n')
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"TEMPORAL_CONFIG_FILE": str(path)})
    assert str(refused.value) == (
        "TEMPORAL_CONFIG_FILE: the profile's address must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"
    )
    # ...unless a variable replaces it: then the file's value is never used.
    replaced = load_settings({"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_ADDRESS": "ok.example:7233"})
    assert replaced.temporal.address == "ok.example:7233"


def test_path_and_data_of_one_certificate_are_refused_together() -> None:
    """Two sources for one certificate would leave which one is used to chance."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"TEMPORAL_TLS_CLIENT_CERT_PATH": str(HERE), "TEMPORAL_TLS_CLIENT_CERT_DATA": "-----BEGIN x"})
    assert str(refused.value) == (
        "TEMPORAL_TLS_CLIENT_CERT_DATA: cannot be set together with TEMPORAL_TLS_CLIENT_CERT_PATH: "
        "one source per certificate or key"
    )


def test_a_client_certificate_without_its_key_is_refused() -> None:
    """mTLS with a certificate and no key fails at load, in one line, not as a handshake error at connect."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_TEMPORAL_TLS": "true", "HERALD_TEMPORAL_TLS_CERT": str(HERE)})
    assert str(refused.value).startswith("HERALD_TEMPORAL_TLS_KEY: required with a client certificate")


def test_the_default_config_file_is_read_only_when_a_profile_is_named(
    tmp_path: Path, clean_environ: pytest.MonkeyPatch
) -> None:
    """~/.config/temporalio/temporal.toml is read when TEMPORAL_PROFILE names one of its profiles,
    never implicitly: the same variables give the same answer with os.environ or a dict."""
    monkeypatch = clean_environ
    config_dir = tmp_path / ".config" / "temporalio"
    config_dir.mkdir(parents=True)
    (config_dir / "temporal.toml").write_text(PROFILES)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    assert load_settings({}).temporal.address == "127.0.0.1:7233"
    assert load_settings().temporal.address == "127.0.0.1:7233"
    assert load_settings({"TEMPORAL_PROFILE": "prod"}).temporal.address == "prod.tmprl.example:7233"
    monkeypatch.setenv("TEMPORAL_PROFILE", "prod")
    assert load_settings().temporal.address == "prod.tmprl.example:7233"


# ---- worker versioning -------------------------------------------------------------------------


def test_worker_versioning_is_off_unless_both_variables_are_set() -> None:
    """Neither set: unversioned workers, as before; both: the deployment version the workers poll as."""
    assert load_settings({}).worker_version is None
    env = {"HERALD_WORKER_DEPLOYMENT_NAME": "herald", "HERALD_WORKER_BUILD_ID": "2026-12-01.3"}
    version = load_settings(env).worker_version
    assert version is not None and (version.deployment_name, version.build_id) == ("herald", "2026-12-01.3")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HERALD_WORKER_DEPLOYMENT_NAME": "herald"},
         "HERALD_WORKER_BUILD_ID: required when HERALD_WORKER_DEPLOYMENT_NAME is set (worker versioning needs both)"),
        ({"HERALD_WORKER_BUILD_ID": "2026-12-01.3"},
         "HERALD_WORKER_DEPLOYMENT_NAME: required when HERALD_WORKER_BUILD_ID is set (worker versioning needs both)"),
    ],
)  # fmt: skip
def test_one_worker_versioning_variable_without_the_other_is_refused(env: dict[str, str], message: str) -> None:
    """Half a version is a mistake, never "unversioned": the missing variable is named."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings(env)
    assert str(refused.value) == message


# ---- the processes: one line on stderr, no traceback -------------------------------------------


def _clean_env(**overrides: str) -> dict[str, str]:
    """The test process's environment without any variable Herald reads, plus `overrides`."""
    return {**{name: value for name, value in os.environ.items() if not name.startswith(OURS)}, **overrides}


@pytest.mark.parametrize(
    ("argv", "name", "value"),
    [
        (["worker.py"], "HERALD_TWILIO_CONNECT_TIMEOUT", "abc"),
        (["-m", "herald.receipts"], "HERALD_RECEIPT_PORT", "80x"),
    ],
)
def test_a_process_with_a_bad_variable_stops_in_one_line(argv: list[str], name: str, value: str) -> None:
    """The worker and the receipt server exit non-zero with one stderr line naming the variable, no traceback."""
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=_clean_env(**{name: value}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(f"{name}: must be ")
    assert "Traceback" not in done.stderr and value not in done.stderr
