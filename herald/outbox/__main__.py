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

from herald.client import HeraldClient
from herald.outbox import apply_schema
from herald.outbox.relay import NoticeStarter, OutboxRelay
from herald.runtime import exits
from herald.runtime.process import OUTBOX, ProcessRuntime
from herald.settings import load_settings
from herald.temporal.tracing import tracer_provider, tracing_interceptors

log = logging.getLogger("herald.outbox")


# How the relay's starts reach Temporal: the client itself, or (in the fault tests' processes) a wrapper.
StartsFactory = Callable[[HeraldClient], NoticeStarter]


async def serve(apply: bool, starts: StartsFactory = lambda herald: herald) -> None:
    runtime = ProcessRuntime(load_settings())
    settings = runtime.settings()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncExitStack() as opened:
        # Once running, the relay rides out an away database (it retries at the next poll); at start,
        # an unreachable one is more likely a wrong setting, so it is reported once and the relay exits.
        pool = await opened.enter_async_context(
            runtime.pool(OUTBOX, "required (the service database that holds herald_outbox)", max_size=4)
        )
        # Each relayed notice's intents carry keyed fingerprints: refused here, in one line, without a key.
        keyring = runtime.keyring()
        # With the ledger configured, intents leave sealed with their recipient's key (erasure reaches
        # Temporal's copy); without it, under the codec key only. No KEK: refused here, in one line.
        vault = await opened.enter_async_context(runtime.optional_vault())
        if apply:
            async with pool.connection() as conn:
                await apply_schema(conn)
        # The relay starts most intents, so their traces begin here (when a collector is set).
        tracing = tracer_provider(settings.telemetry, "herald-outbox-relay")
        herald = HeraldClient(
            await runtime.temporal(interceptors=tracing_interceptors(tracing)),
            settings.temporal.task_queue,
            keyring=keyring,
            vault=vault,
            urgent_lane=settings.temporal.urgent_lane,
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
    exits.serve(lambda: serve(args.apply_schema, starts), database=OUTBOX)


if __name__ == "__main__":
    main()
