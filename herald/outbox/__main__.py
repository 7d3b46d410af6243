"""The outbox relay process: ``python -m herald.outbox`` (``--apply-schema`` creates the table first).

    HERALD_OUTBOX_DATABASE_URL   the service's database that holds herald_outbox (required)
    HERALD_TEMPORAL_*            where intents are started (as for every Herald process)

Run as many as you like against one outbox: rows are claimed with FOR UPDATE SKIP LOCKED.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import timedelta

import psycopg

from herald import fingerprints, key_encryption
from herald.cli_services import ServiceUnreachable, connect_temporal, reach_database
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.logs import configure_logging
from herald.outbox import apply_schema
from herald.outbox.relay import NoticeStarter, OutboxRelay
from herald.recipient_vault import RecipientVault
from herald.settings import InvalidSetting, load_settings
from herald.tracing import tracer_provider, tracing_interceptors

log = logging.getLogger("herald.outbox")


# How the relay's starts reach Temporal: the client itself, or (in the fault tests' processes) a wrapper.
StartsFactory = Callable[[HeraldClient], NoticeStarter]


async def serve(apply: bool, starts: StartsFactory = lambda herald: herald) -> None:
    settings = load_settings()
    if settings.outbox.database_url is None:
        raise SystemExit("HERALD_OUTBOX_DATABASE_URL: required (the service database that holds herald_outbox)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    outbox_url = settings.outbox.database_url.get_secret_value()
    # Once running, the relay rides out an away database (it retries at the next poll); at start,
    # an unreachable one is more likely a wrong setting, so it is reported once and the relay exits.
    await reach_database(outbox_url, "HERALD_OUTBOX_DATABASE_URL")
    # Each relayed notice's intents carry keyed fingerprints: refused here, in one line, without a key.
    fingerprints.install_from(settings)
    async with AsyncExitStack() as opened:
        pool = await opened.enter_async_context(open_pool(outbox_url, max_size=4))
        # With the ledger configured, intents leave sealed with their recipient's key (erasure reaches
        # Temporal's copy); without it, under the codec key only.
        vault = None
        if settings.database_url is not None:
            ledger_url = settings.database_url.get_secret_value()
            await reach_database(ledger_url, "DATABASE_URL")
            keks = key_encryption.from_settings(settings)  # refused here, in one line, without a KEK
            vault = RecipientVault(await opened.enter_async_context(open_pool(ledger_url, max_size=2)), keks)
        if apply:
            async with pool.connection() as conn:
                await apply_schema(conn)
        # The relay starts most intents, so their traces begin here (when a collector is set).
        tracing = tracer_provider(settings.telemetry, "herald-outbox-relay")
        herald = HeraldClient(
            await connect_temporal(settings.temporal, interceptors=tracing_interceptors(tracing)),
            settings.temporal.task_queue,
            vault=vault,
        )
        relay = OutboxRelay(
            pool,
            starts(herald),
            lease=timedelta(seconds=settings.outbox.lease_seconds),
        )
        log.info("outbox relay polling herald_outbox; starting intents on %s", settings.temporal.task_queue)
        try:
            await relay.run(stop)
        finally:
            if tracing is not None:
                tracing.shutdown()  # flushes the last batch of spans


def main(starts: StartsFactory = lambda herald: herald) -> None:
    parser = argparse.ArgumentParser(prog="python -m herald.outbox", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--apply-schema", action="store_true", help="create herald_outbox in the service database first"
    )
    args = parser.parse_args()
    configure_logging()
    try:
        asyncio.run(serve(args.apply_schema, starts))
    except (InvalidSetting, ServiceUnreachable) as error:  # one line naming the variable, no traceback
        raise SystemExit(str(error)) from None
    except psycopg.Error as error:  # its text may quote row values: the class and SQLSTATE only
        sqlstate = f", SQLSTATE {error.sqlstate}" if error.sqlstate else ""
        raise SystemExit(
            f"HERALD_OUTBOX_DATABASE_URL: the database command failed ({type(error).__name__}{sqlstate})"
        ) from None


if __name__ == "__main__":
    main()
