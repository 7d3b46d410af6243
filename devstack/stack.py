"""Starting and stopping the whole local stack in dependency order."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import psycopg
from psycopg import sql

from devstack.config import CONSOLE_OUTBOX_LOGIN, OUTBOX_RELAY_LOGIN, StackConfig
from devstack.embedded_postgres import start_embedded_postgres
from devstack.processes import BIN_DIR, ManagedProcess, require_free, wait_for_port, wait_for_temporal_health
from herald.ledger.migrate import apply_migrations
from herald.ledger.roles import CONSOLE_LOGIN, OPENER_LOGIN, OPENER_ROLE, READER_ROLE, ensure_app_login
from herald.outbox import schema_sql
from herald.temporal.workflow_api import SEARCH_ATTRIBUTES

log = logging.getLogger("devstack")

START_TIMEOUT_SECONDS = 60.0
# The group role herald/outbox/schema.sql creates and grants; the relay's login is a member.
OUTBOX_RELAY_ROLE = "herald_outbox_relay"
# Likewise the console's outbox role (SELECT (state, created_at) on herald_outbox); its login is a member.
OUTBOX_READER_ROLE = "herald_outbox_reader"


def _ensure_login(conn: psycopg.Connection, login: str, password: str, role: str) -> None:
    """Make ``login`` a member of ``role`` that logs in with ``password``.

    The password is set on every call, so a stack whose state folder (where the password lives)
    was recreated still logs in; a server that trusts local sockets (the embedded one) ignores it.
    """
    who, secret = sql.Identifier(login), sql.Literal(password)
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone() is None:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(who, secret, sql.Identifier(role)))
    else:
        conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(who, secret))
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), who))


class LocalStack:
    """Temporal dev server, PostgreSQL, emulator, receipt server and worker for one machine."""

    def __init__(self, config: StackConfig, *, database_url: str | None = None) -> None:
        self.config = config
        self._external_database_url = database_url if database_url is not None else os.environ.get("DATABASE_URL")
        self._postgres = None
        self.database_url: str | None = None
        self.processes: dict[str, ManagedProcess] = {}
        self.log_dir = config.state_path / "logs"

    # ---- checks --------------------------------------------------------------------------

    def check_ports(self, *, services: bool = True) -> None:
        """Fail fast, one line per problem, before anything starts."""
        c = self.config
        require_free(c.temporal.host, c.temporal.port, "temporal.port")
        require_free(c.temporal.host, c.temporal.ui_port, "temporal.ui_port")
        require_free(c.temporal.host, c.temporal.metrics_port, "temporal.metrics_port")
        require_free(c.emulator.host, c.emulator.port, "emulator.port")
        require_free(c.esp.host, c.esp.smtp_port, "esp.smtp_port")
        require_free(c.esp.host, c.esp.admin_port, "esp.admin_port")
        require_free(c.infobip.host, c.infobip.port, "infobip.port")
        if services:
            require_free(c.receipts.host, c.receipts.port, "receipts.port")
            require_free(c.metrics.host, c.metrics.port, "metrics.port")
            require_free(c.metrics.host, c.metrics.worker_port, "metrics.worker_port")
            require_free(c.codec.host, c.codec.port, "codec.port")
            require_free(c.console.host, c.console.port, "console.port")

    # ---- parts -----------------------------------------------------------------------------

    def start_temporal(self) -> ManagedProcess:
        t = self.config.temporal
        argv = [
            str(BIN_DIR / "temporal"), "server", "start-dev",
            "--ip", t.host, "--port", str(t.port), "--ui-port", str(t.ui_port),
            "--metrics-port", str(t.metrics_port), "--namespace", t.namespace,
            "--log-level", t.log_level, "--ui-disable-news-fetch",
            # Payloads are encrypted: the Web UI shows them through the stack's codec server.
            "--ui-codec-endpoint", self.config.codec_endpoint,
        ]  # fmt: skip
        if t.db_filename:
            argv += ["--db-filename", str(self.config.state_path / t.db_filename)]
        for key, value in t.dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        for name, kind in SEARCH_ATTRIBUTES.items():
            argv += ["--search-attribute", f"{name}={kind}"]
        process = self._spawn("temporal", argv)
        wait_for_port(t.host, t.port, START_TIMEOUT_SECONDS, process.process)
        # The port opens before the frontend is healthy: a client connecting in between is refused
        # ("Frontend is not healthy yet"), seen after a restart on a loaded machine.
        wait_for_temporal_health(f"{t.host}:{t.port}", START_TIMEOUT_SECONDS, process.process)
        return process

    def start_postgres(self) -> str:
        if self._external_database_url:
            self.database_url = self._external_database_url
        else:
            self._postgres = start_embedded_postgres(self.config.state_path / self.config.postgres.data_dir)
            self.database_url = self._postgres.get_uri()
        return self.database_url

    def migrate(self) -> list[str]:
        """Apply the ledger's migrations as the owner, then make sure the services' login exists."""
        assert self.database_url is not None
        applied = asyncio.run(apply_migrations(self.database_url))
        ensure_app_login(self.database_url, self.config.app_login_password())
        return applied

    def start_emulator(self, extra_args: list[str] | None = None) -> ManagedProcess:
        e = self.config.emulator
        argv = [
            sys.executable, "-m", "emulator", "--host", e.host, "--port", str(e.port),
            "--account-sid", e.account_sid, "--auth-token", e.auth_token, "--step-ms", str(e.step_ms),
            "--rate-limit-per-sender", str(e.rate_limit_per_sender), "--log-level", "warning",
        ] + (extra_args or [])  # fmt: skip
        process = self._spawn("emulator", argv)
        wait_for_port(e.host, e.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_esp(self) -> ManagedProcess:
        """The SMTP relay that plays SendGrid, posting signed events to the receipt server."""
        c = self.config
        c.esp_public_key()  # creates the signing key on first use
        argv = [
            sys.executable, "-m", "emulator.esp", "--host", c.esp.host,
            "--smtp-port", str(c.esp.smtp_port), "--admin-port", str(c.esp.admin_port),
            "--webhook-url", f"http://{c.receipts.host}:{c.receipts.port}/sendgrid/events",
            "--private-key-file", str(c.esp_signing_key_path), "--step-ms", str(c.esp.step_ms),
            "--log-level", "warning",
        ]  # fmt: skip
        process = self._spawn("esp", argv)
        wait_for_port(c.esp.host, c.esp.smtp_port, START_TIMEOUT_SECONDS, process.process)
        wait_for_port(c.esp.host, c.esp.admin_port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_infobip(self) -> ManagedProcess:
        """The Infobip emulator, posting its delivery reports with the stack's Basic credentials."""
        i = self.config.infobip
        argv = [
            sys.executable, "-m", "emulator.infobip", "--host", i.host, "--port", str(i.port),
            "--step-ms", str(i.step_ms), "--time-factor", str(i.time_factor), "--log-level", "warning",
        ]  # fmt: skip
        # Secrets travel in the environment, not in argv, where any local user's `ps` would read them.
        hidden = {
            "INFOBIP_EMULATOR_API_KEY": i.api_key,
            "INFOBIP_EMULATOR_WEBHOOK_BASIC": f"{i.webhook_username}:{i.webhook_password}",
        }
        process = self._spawn("infobip", argv, extra_env=hidden)
        wait_for_port(i.host, i.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_receipts(self) -> ManagedProcess:
        process = self._spawn("receipts", [sys.executable, "-m", "herald.receipts"], service=True)
        wait_for_port(self.config.receipts.host, self.config.receipts.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_codec_server(self) -> ManagedProcess:
        """The codec server the Web UI decrypts payloads through (herald/codec/server.py)."""
        process = self._spawn("codec-server", [sys.executable, "-m", "herald.codec"], service=True)
        wait_for_port(self.config.codec.host, self.config.codec.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_metrics(self) -> ManagedProcess:
        """The ledger exporter: the ledger's numbers on /metrics for Prometheus (herald/metrics)."""
        m = self.config.metrics
        env = {"HERALD_METRICS_HOST": m.host, "HERALD_METRICS_PORT": str(m.port)}
        process = self._spawn("metrics", [sys.executable, "-m", "herald.metrics"], service=True, extra_env=env)
        wait_for_port(m.host, m.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def start_console(self) -> ManagedProcess:
        """The operator's console, as its own login (a member of herald_reader: reads, never writes), and
        with a second (a member of herald_text_opener: may only call open_sent_text, which records each
        opening), so the demo's operator can open a notice's sent text; and with a third on the demo
        service's database (a member of herald_outbox_reader: two columns of herald_outbox), made by
        create_service_database, which runs first, so the routes page shows the outbox's backlog."""
        assert self.database_url is not None
        c, t = self.config.console, self.config.temporal
        env = {
            "HERALD_CONSOLE_HOST": c.host, "HERALD_CONSOLE_PORT": str(c.port),
            "HERALD_CONSOLE_DATABASE_URL": ensure_app_login(
                self.database_url, self.config.console_login_password(), CONSOLE_LOGIN, READER_ROLE
            ),
            "HERALD_CONSOLE_OPENER_DATABASE_URL": ensure_app_login(
                self.database_url, self.config.console_opener_login_password(), OPENER_LOGIN, OPENER_ROLE
            ),
            "HERALD_CONSOLE_OUTBOX_DATABASE_URL": self.config.console_outbox_database_url(self.database_url),
            "HERALD_CONSOLE_TEMPORAL_UI_URL": f"http://{t.host}:{t.ui_port}",
            # The routes page reads the paced scene's submit queue beside the stack's own route's.
            "HERALD_CONSOLE_ROUTES": self.config.paced_route.task_queue,
        }  # fmt: skip
        process = self._spawn("console", [sys.executable, "-m", "herald.console"], service=True, extra_env=env)
        wait_for_port(c.host, c.port, START_TIMEOUT_SECONDS, process.process)
        return process

    def create_service_database(self) -> str:
        """The demo service's database with its business table and herald_outbox, the relay's login (a
        member of herald_outbox_relay, which the schema grants) and the console's (of herald_outbox_reader,
        likewise); the service's URL."""
        assert self.database_url is not None
        url = self.config.outbox_database_url(self.database_url)
        name = self.config.outbox.service_database
        with psycopg.connect(self.database_url, autocommit=True) as admin:
            if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS payments (id text PRIMARY KEY, amount text NOT NULL)")
            conn.execute(schema_sql())  # type: ignore[arg-type]
            # PostgreSQL 15 and later already withhold this; an older server given as DATABASE_URL
            # would let the relay's login create tables of its own.
            conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            _ensure_login(conn, OUTBOX_RELAY_LOGIN, self.config.outbox_relay_password(), OUTBOX_RELAY_ROLE)
            _ensure_login(conn, CONSOLE_OUTBOX_LOGIN, self.config.console_outbox_login_password(), OUTBOX_READER_ROLE)
        return url

    def start_outbox_relay(self) -> ManagedProcess:
        return self._spawn("outbox-relay", [sys.executable, "-m", "herald.outbox"], service=True)

    def start_worker(self, name: str = "worker", extra_env: dict[str, str] | None = None) -> ManagedProcess:
        return self._spawn(name, [sys.executable, "worker.py"], service=True, extra_env=extra_env)

    def _spawn(
        self, name: str, argv: list[str], *, service: bool = False, extra_env: dict[str, str] | None = None
    ) -> ManagedProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {"PYTHONUNBUFFERED": "1"}
        if service:
            if self.database_url is None:
                raise RuntimeError("start PostgreSQL before the services that use it")
            env.update(self.config.service_env(self.database_url))
        env.update(extra_env or {})
        process = ManagedProcess(name, argv, env=env, log_path=self.log_dir / f"{name}.log")
        process.start()
        self.processes[name] = process
        return process

    def stop(self) -> None:
        """Stop children newest first, then PostgreSQL (when this stack started it)."""
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        self.processes.clear()
        if self._postgres is not None:
            self._postgres.cleanup()
            self._postgres = None

    def log_tail(self, name: str, lines: int = 40) -> str:
        path: Path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
