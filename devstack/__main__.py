"""`make run`: start the local stack from temporal-dev.yaml, play the demo, print the summary, serve.

    python -m devstack [--exit-when-done] [--config temporal-dev.yaml]
    python -m devstack demo [--emulator-url URL]    # the demo again, against the stack already running

Ctrl-C stops every child process it started. A port already in use is reported
in one line naming the port and the setting that changes it. `demo` finds the running stack
through the `stack.env` the launcher writes in its state folder, as `python starter.py` does.
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
from devstack.demo import InboundReplies, PacedRoute, play, refused_input_example, summary
from devstack.failover_demo import play_failover
from devstack.outage_demo import OUTAGE_SECONDS, play_outage
from devstack.private_files import replace_private
from devstack.processes import PortInUse, wait_for_port
from devstack.stack import LocalStack
from devstack.supervisor import Supervisor
from herald.cli import input as cli_input
from herald.client import HeraldClient
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.report import ledger_report
from herald.ledger.store import open_pool
from herald.outbox.relay import backlog, describe
from herald.runtime import exits
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.settings import load_settings
from herald.settings.variables import environment
from herald.temporal.workflow_api import not_delivered_query
from worker import build_providers, build_submit_worker, submit_pacer, workflow_workers

# How often the launcher looks for a child that died (and restarts it).
SUPERVISE_EVERY_SECONDS = 1.0
# The file in the state folder the launcher writes the stack's variables to (starter.py reads it).
STACK_ENV = "stack.env"


def _write_env_file(stack: LocalStack) -> None:
    """Let `starter.py` find this stack without exporting anything; 0600, since it holds the
    services' and the relay's database passwords and the Twilio token."""
    lines = [f"{name}={value}" for name, value in stack.config.service_env(stack.database_url).items()]
    replace_private(stack.config.state_path / STACK_ENV, ("\n".join(lines) + "\n").encode())


async def _demo(config: StackConfig, stack: LocalStack) -> str:
    runtime = ProcessRuntime(load_settings(config.service_env(stack.database_url)))
    settings = runtime.settings()
    client = await runtime.temporal()
    started = time.monotonic()
    async with open_pool(stack.database_url, max_size=2) as pool:
        herald = HeraldClient(  # the demo's intents travel sealed
            client, settings.temporal.task_queue, keyring=runtime.keyring(), policy=config.demo_policy,
            vault=runtime.vault(pool),
        )  # fmt: skip
        route = ProcessRuntime(load_settings(config.paced_route_env(stack.database_url)))
        async with _paced_route(client, route, config) as paced_route:
            rows = await play(
                herald,
                f"http://{config.emulator.host}:{config.emulator.port}",
                esp_url=f"http://{config.esp.host}:{config.esp.admin_port}",
                artifacts=PostgresArtifactStore(pool),
                ledger=pool,
                outbox_url=config.outbox_database_url(stack.database_url),
                agent_env=config.service_env(stack.database_url),
                paced_route=paced_route,
                inbound=InboundReplies.of(config),
            )
        outage_rows, during_outage = await play_outage(
            herald, stack, pool, f"http://{config.esp.host}:{config.esp.admin_port}", config.demo_policy
        )
        rows += outage_rows
        failover = await play_failover(runtime, pool, _emulator_url(config), _infobip_url(config), config.demo_policy)
        elapsed = time.monotonic() - started
        report = await ledger_report(pool, stream_lag=config.demo_policy.event_stream_lag)
    async with open_pool(config.outbox_database_url(stack.database_url), max_size=1) as outbox_pool:
        outbox_line = describe(await backlog(outbox_pool))
    return (
        f"{summary(rows)}\ndemo time: {elapsed:.1f}s\n"
        f"refused input, as a caller sees it: {refused_input_example()}\n\n"
        f"during the outage ({OUTAGE_SECONDS:g} s: receipt server stopped, relay refusing connections):\n"
        + "\n".join(f"  {line}" for line in during_outage)
        + f"\n\n{failover.render()}\n\n"
        f"starter.py report (the whole ledger, earlier runs included):\n{report.render()}\n{outbox_line}"
    )


@asynccontextmanager
async def _paced_route(client: Client, route: ProcessRuntime, config: StackConfig) -> AsyncIterator[PacedRoute]:
    """The priority scene's route, in this process: worker.py's workers on the paced route's
    task queues (config.paced_route), built as worker.py builds them. The workflow workers (its
    standard queue and urgent lane) poll at once; the submit worker, on `release()`."""
    settings, keyring = route.settings(), route.keyring()
    async with AsyncExitStack() as stack:
        pool = await stack.enter_async_context(route.pool(LEDGER, "required", max_size=8))
        adapters = build_providers(settings, keyring)
        for adapter in adapters.values():
            stack.push_async_callback(adapter.aclose)
        vault = route.vault(pool)
        provider = ProviderActivities(
            adapters, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool),
            pacer=submit_pacer(settings), vault=vault, keyring=keyring,
        )  # fmt: skip
        for polling in workflow_workers(client, settings, LedgerActivities(pool, vault), provider):
            await stack.enter_async_context(polling)

        async def release() -> None:
            await stack.enter_async_context(build_submit_worker(client, settings, provider))

        herald = HeraldClient(
            client, settings.temporal.task_queue, keyring=keyring, policy=config.demo_policy, vault=vault
        )
        yield PacedRoute(herald, config.paced_route.submit_rate_limit, release)


async def _demo_again(config: StackConfig, runtime: ProcessRuntime, emulator_url: str | None) -> str:
    """`python -m devstack demo`: the scenario against the stack `make run` started, with the ledger's
    scenes when the stack has one."""
    emulator_url = emulator_url or f"http://{config.emulator.host}:{config.emulator.port}"
    esp_url = f"http://{config.esp.host}:{config.esp.admin_port}"
    herald = HeraldClient(
        await runtime.temporal(), runtime.settings().temporal.task_queue, keyring=runtime.keyring(),
        policy=config.demo_policy,
    )  # fmt: skip
    failover = ""
    if runtime.database_url() is None:
        rows = await play(herald, emulator_url, esp_url=esp_url)
    else:
        async with runtime.pool(LEDGER, "required", max_size=2) as pool:
            sealing = herald.with_vault(runtime.vault(pool))
            rows = await play(
                sealing, emulator_url, esp_url=esp_url, artifacts=PostgresArtifactStore(pool), ledger=pool,
                inbound=InboundReplies.of(config),
            )
            scene = await play_failover(runtime, pool, emulator_url, _infobip_url(config), config.demo_policy)
            failover = f"\n\n{scene.render()}"
    return f"{summary(rows)}\nrefused input, as a caller sees it: {refused_input_example()}{failover}"


def _emulator_url(config: StackConfig) -> str:
    return f"http://{config.emulator.host}:{config.emulator.port}"


def _infobip_url(config: StackConfig) -> str:
    return f"http://{config.infobip.host}:{config.infobip.port}"


def demo_again(config: StackConfig, emulator_url: str | None) -> int:
    """Play the demo again, against the stack found through the variables the launcher wrote to
    `<state folder>/stack.env` (the environment's own win); a failure (the stack not running, say)
    is one line and an exit code. Temporal's runtime is this command's own, stopped before the
    interpreter finalizes, as starter.py's (herald.runtime.process explains why)."""
    runtime = ProcessRuntime(
        lambda: load_settings(environment(config.state_path / STACK_ENV)), own_temporal_runtime=True
    )
    try:
        print(asyncio.run(_demo_again(config, runtime, emulator_url)))
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 (one line, as the product's entry points)
        return exits.fail(*exits.failure(error))
    finally:
        runtime.close()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__.splitlines()[0])
    parser.add_argument("--exit-when-done", action="store_true", help="stop everything after printing the summary")
    parser.add_argument("--config", type=Path, default=DEFAULT_STACK_FILE)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="play the demo scenario again against the running local stack")
    demo.add_argument(
        "--emulator-url", type=cli_input.http_url, help="the emulator's base URL (default: from temporal-dev.yaml)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_stack_config(args.config)
    if args.command == "demo":
        return demo_again(config, args.emulator_url)
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
        stack.start_infobip()
        print(f"Infobip emulator  http://{config.infobip.host}:{config.infobip.port}")
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
        # Before the console: it reads the outbox's backlog as a login this makes on that database.
        stack.create_service_database()
        stack.start_console()
        console = f"http://{config.console.host}:{config.console.port}"
        print(f"console           {console}/ (a notice's story, the routes, lists; read-only but for "
              "opening a sent text, each opening recorded)")
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
        print(f"Herald console: {console}/ (look a notice up by its key, its number or its provider id)")
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
