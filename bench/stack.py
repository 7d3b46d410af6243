"""The bench's own stack: Herald's LocalStack on free ports, plus the floor's worker and receipt handler.

Everything runs on free loopback ports in a fresh temporary state folder (Temporal in memory,
a new embedded PostgreSQL), so the bench never collides with `make run` (7233/8233...) or a
test run, and leaves nothing behind.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import psycopg

from bench.measure import postmaster_pid
from devstack.config import AdapterDev, EmulatorDev, EspDev, ReceiptsDev, StackConfig, TemporalDev
from devstack.processes import ManagedProcess, free_port, wait_for_port
from devstack.stack import START_TIMEOUT_SECONDS, LocalStack
from herald.ledger.roles import APP_ROLE
from herald.settings import TwilioSettings

BENCH_TABLE = """CREATE TABLE IF NOT EXISTS bench_deliveries (
    intent_id    text PRIMARY KEY,
    variant      text NOT NULL,
    provider_sid text,
    status       text NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""


# The bench's ESP holds every naive and floor e-mail of a run (rounds of both passes and both report
# paths, a few thousand), so it is never reset mid-run.
ESP_BENCH_MAX_MESSAGES = 100_000
# The fault-matrix tests arm worker crash points through the environment; a benchmark never does.
NO_FAULTS = {"HERALD_FAULT_POINT": "", "HERALD_FAULT_POINT_MARKER": ""}


class BenchStack:
    def __init__(self, step_ms: int) -> None:
        self.state_dir = Path(tempfile.mkdtemp(prefix="herald-bench-"))
        production = TwilioSettings()
        self.config = StackConfig(
            state_dir=self.state_dir,
            temporal=TemporalDev(port=free_port(), ui_port=free_port(), metrics_port=free_port(), db_filename=None),
            emulator=EmulatorDev(port=free_port(), step_ms=step_ms),
            # The ESP emulator, for the two-channel notice figure (scale-out check); idle otherwise.
            esp=EspDev(smtp_port=free_port(), admin_port=free_port(), step_ms=step_ms),
            receipts=ReceiptsDev(port=free_port()),
            # Production adapter timeouts, not the demo's short ones.
            adapter=AdapterDev(connect_timeout=production.connect_timeout, read_timeout=production.read_timeout),
        )
        # database_url="": always the embedded server, never a DATABASE_URL from the caller's shell.
        self.local = LocalStack(self.config, database_url="")
        self.receiver_port = free_port()
        # The naive sender's and the floor's ESP (`start_email`): SMTP, then admin.
        self.esp_bench_ports = (free_port(), free_port())
        self.pids: dict[str, int] = {}

    @property
    def database_url(self) -> str:
        assert self.local.database_url is not None
        return self.local.database_url

    @property
    def emulator_url(self) -> str:
        return f"http://{self.config.emulator.host}:{self.config.emulator.port}"

    @property
    def receiver_url(self) -> str:
        return f"http://127.0.0.1:{self.receiver_port}"

    @property
    def esp_admin_urls(self) -> tuple[str, str]:
        """The admin APIs of Herald's ESP emulator and of the bench's own (`start_email`)."""
        esp = self.config.esp
        return f"http://{esp.host}:{esp.admin_port}", f"http://127.0.0.1:{self.esp_bench_ports[1]}"

    def env(self) -> dict[str, str]:
        return {
            **self.config.service_env(self.database_url),
            **NO_FAULTS,
            "BENCH_RECEIVER_URL": self.receiver_url,
            "BENCH_RECEIVER_PORT": str(self.receiver_port),
        }

    def start(self) -> None:
        local = self.local
        local.start_postgres()
        local.migrate()
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(BENCH_TABLE)
            # The floor's workers connect as the services' login, like Herald's.
            conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON bench_deliveries TO {APP_ROLE}")
        self.pids["postgres"] = postmaster_pid(self.state_dir / self.config.postgres.data_dir) or 0
        self.pids["temporal"] = local.start_temporal().pid or 0
        self.pids["emulator"] = local.start_emulator().pid or 0
        self.pids["esp"] = local.start_esp().pid or 0
        self.pids["receipts"] = local.start_receipts().pid or 0
        self.pids["worker"] = local.start_worker(extra_env=NO_FAULTS).pid or 0
        self.spawn("floor_worker", [sys.executable, "-m", "bench.floor_worker"])
        receiver = self.spawn("receiver", [sys.executable, "-m", "bench.receiver"])
        wait_for_port("127.0.0.1", self.receiver_port, START_TIMEOUT_SECONDS, receiver.process)

    def start_email(self) -> None:
        """The e-mail bench's own processes: an ESP emulator posting its events to the bench's receiver
        (signed with the key of Herald's ESP, which the receiver is given), and the floor's e-mail worker."""
        esp = self.config.esp
        smtp, admin = self.esp_bench_ports
        process = self.spawn("esp_bench", [
            sys.executable, "-m", "emulator.esp", "--host", "127.0.0.1", "--smtp-port", str(smtp),
            "--admin-port", str(admin), "--webhook-url", f"{self.receiver_url}/sendgrid",
            "--private-key-file", str(self.config.esp_signing_key_path), "--step-ms", str(esp.step_ms),
            "--max-messages", str(ESP_BENCH_MAX_MESSAGES), "--log-level", "warning",
        ])  # fmt: skip
        for port in (smtp, admin):
            wait_for_port("127.0.0.1", port, START_TIMEOUT_SECONDS, process.process)
        self.spawn("floor_email_worker", [sys.executable, "-m", "bench.floor_worker", "email"],
                   extra_env={"BENCH_ESP_SMTP_PORT": str(smtp)})  # fmt: skip

    def spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> ManagedProcess:
        """A child process registered with the LocalStack, so its stop() stops it too."""
        self.local.log_dir.mkdir(parents=True, exist_ok=True)
        process = ManagedProcess(
            name, argv, env={**self.env(), **(extra_env or {})}, log_path=self.local.log_dir / f"{name}.log"
        )
        process.start()
        self.local.processes[name] = process
        self.pids[name] = process.pid or 0
        return process

    def stop_process(self, name: str) -> None:
        process = self.local.processes.pop(name, None)
        if process is not None:
            process.stop()
        self.pids.pop(name, None)

    def stop(self, *, keep_state: bool = False) -> None:
        self.local.stop()
        if not keep_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
