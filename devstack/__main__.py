"""`make run`: start the local stack from temporal-dev.yaml, play the demo, print the summary, serve.

    python -m devstack [--exit-when-done] [--config temporal-dev.yaml]

Ctrl-C stops every child process it started. A port already in use is reported
in one line naming the port and the setting that changes it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from urllib.parse import quote

from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.config import DEFAULT_STACK_FILE, StackConfig, load_stack_config
from devstack.demo import PacedRoute, play, refused_input_example, summary
from devstack.outage_demo import OUTAGE_SECONDS, play_outage
from devstack.private_files import replace_private
from devstack.processes import PortInUse, wait_for_port
from devstack.stack import LocalStack
from devstack.supervisor import Supervisor
from herald import fingerprints, key_encryption
from herald.artifacts import PostgresArtifactStore
from herald.client import HeraldClient
from herald.ledger.report import ledger_report
from herald.ledger.store import open_pool
from herald.outbox.relay import backlog, describe
from herald.recipient_vault import RecipientVault
from herald.settings import Settings, load_settings
from herald.temporal_client import connect
from herald.workflow_api import not_delivered_query
from worker import build_providers, build_submit_worker, build_worker, submit_pacer

# How often the launcher looks for a child that died (and restarts it).
SUPERVISE_EVERY_SECONDS = 1.0


def _write_env_file(stack: LocalStack) -> None:
    """Let `starter.py` find this stack without exporting anything; 0600, since it holds the
    services' and the relay's database passwords and the Twilio token."""
    lines = [f"{name}={value}" for name, value in stack.config.service_env(stack.database_url).items()]
    replace_private(stack.config.state_path / "stack.env", ("\n".join(lines) + "\n").encode())


async def _demo(config: StackConfig, stack: LocalStack) -> str:
    settings = load_settings(config.service_env(stack.database_url))
    fingerprints.install_from(settings)
    client = await connect(settings.temporal)
    started = time.monotonic()
    async with open_pool(stack.database_url, max_size=2) as pool:
        vault = RecipientVault(pool, key_encryption.from_settings(settings))  # the demo's intents travel sealed
        herald = HeraldClient(client, settings.temporal.task_queue, policy=config.demo_policy, vault=vault)
        route_settings = load_settings(config.paced_route_env(stack.database_url))
        async with _paced_route(client, route_settings, config) as paced_route:
            rows = await play(
                herald,
                f"http://{config.emulator.host}:{config.emulator.port}",
                esp_url=f"http://{config.esp.host}:{config.esp.admin_port}",
                artifacts=PostgresArtifactStore(pool),
                ledger=pool,
                outbox_url=config.outbox_database_url(stack.database_url),
                agent_env=config.service_env(stack.database_url),
                paced_route=paced_route,
            )
        outage_rows, during_outage = await play_outage(
            herald, stack, pool, f"http://{config.esp.host}:{config.esp.admin_port}", config.demo_policy
        )
        rows += outage_rows
        elapsed = time.monotonic() - started
        report = await ledger_report(pool, stream_lag=config.demo_policy.event_stream_lag)
    async with open_pool(config.outbox_database_url(stack.database_url), max_size=1) as outbox_pool:
        outbox_line = describe(await backlog(outbox_pool))
    return (
        f"{summary(rows)}\ndemo time: {elapsed:.1f}s\n"
        f"refused input, as a caller sees it: {refused_input_example()}\n\n"
        f"during the outage ({OUTAGE_SECONDS:g} s: receipt server stopped, relay refusing connections):\n"
        + "\n".join(f"  {line}" for line in during_outage)
        + "\n\n"
        f"starter.py report (the whole ledger, earlier runs included):\n{report.render()}\n{outbox_line}"
    )


@asynccontextmanager
async def _paced_route(client: Client, settings: Settings, config: StackConfig) -> AsyncIterator[PacedRoute]:
    """The priority scene's route, in this process: worker.py's two workers on the paced route's
    task queue (config.paced_route), built as worker.py builds them. The workflow worker polls at
    once; the submit worker, on `release()`."""
    assert settings.database_url is not None
    async with AsyncExitStack() as stack:
        pool = await stack.enter_async_context(open_pool(settings.database_url.get_secret_value()))
        adapters = build_providers(settings)
        for adapter in adapters.values():
            stack.push_async_callback(adapter.aclose)
        vault = RecipientVault(pool, key_encryption.from_settings(settings))
        provider = ProviderActivities(
            adapters, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool),
            pacer=submit_pacer(settings), vault=vault,
        )  # fmt: skip
        await stack.enter_async_context(build_worker(client, settings, LedgerActivities(pool, vault), provider))

        async def release() -> None:
            await stack.enter_async_context(build_submit_worker(client, settings, provider))

        herald = HeraldClient(client, settings.temporal.task_queue, policy=config.demo_policy, vault=vault)
        yield PacedRoute(herald, config.paced_route.submit_rate_limit, release)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__.splitlines()[0])
    parser.add_argument("--exit-when-done", action="store_true", help="stop everything after printing the summary")
    parser.add_argument("--config", type=Path, default=DEFAULT_STACK_FILE)
    args = parser.parse_args()
    config = load_stack_config(args.config)
    stack = LocalStack(config)
    # Turn SIGTERM into the same clean stop as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        stack.check_ports()
        config.state_path.mkdir(parents=True, exist_ok=True)
        print(f"state folder      {config.state_path}")
        stack.start_postgres()
        applied = stack.migrate()
        print(f"PostgreSQL        {'DATABASE_URL' if stack._external_database_url else 'embedded'}; migrations applied now: {applied or 'none (up to date)'}")
        stack.start_temporal()
        print(f"Temporal          {config.temporal.host}:{config.temporal.port} namespace {config.temporal.namespace}")
        stack.start_emulator()
        print(f"emulator          http://{config.emulator.host}:{config.emulator.port}")
        stack.start_esp()
        print(f"ESP emulator      smtp://{config.esp.host}:{config.esp.smtp_port}; received mail: http://{config.esp.host}:{config.esp.admin_port}/")
        stack.start_receipts()
        receipts = f"http://{config.receipts.host}:{config.receipts.port}"
        print(f"receipt server    {receipts}/twilio/status and {receipts}/sendgrid/events")
        stack.start_codec_server()
        print(f"codec server      {config.codec_endpoint} (the Web UI decrypts payloads through it; key: {config.codec_key_file()})")
        worker_metrics = f"{config.metrics.host}:{config.metrics.worker_port}"
        stack.start_worker(extra_env={"HERALD_WORKER_METRICS_ADDRESS": worker_metrics})
        stack.start_metrics()
        print(f"metrics           http://{config.metrics.host}:{config.metrics.port}/metrics (ledger), "
              f"http://{worker_metrics}/metrics (worker: Temporal SDK and herald_* series)")
        stack.create_service_database()
        stack.start_outbox_relay()
        print(f"outbox relay      herald_outbox in database {config.outbox.service_database} (the demo service's)")
        print(f"worker            task queue {config.temporal.task_queue}; logs in {stack.log_dir}")
        _write_env_file(stack)
        wait_for_port(config.temporal.host, config.temporal.ui_port, 30)
        print()
        print(asyncio.run(_demo(config, stack)))
        print()
        ui = f"http://{config.temporal.host}:{config.temporal.ui_port}"
        print(f"Temporal Web UI: {ui}/namespaces/{config.temporal.namespace}/workflows")
        print(f"  intents that ended without delivery: {ui}/namespaces/{config.temporal.namespace}/workflows?query={quote(not_delivered_query())}")
        if args.exit_when_done:
            return 0
        print("serving; Ctrl-C stops every process")
        supervisor = Supervisor(stack.processes, stack.log_tail)
        while True:
            for line in supervisor.check():
                print(line, flush=True)
            time.sleep(SUPERVISE_EVERY_SECONDS)
    except PortInUse as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping")
        return 0
    except Exception as error:  # print the cause and the logs' tails instead of a bare traceback
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        for name in list(stack.processes):
            tail = stack.log_tail(name, 15)
            if tail:
                print(f"--- {name} log (last lines) ---\n{tail}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
