"""Receipt server: `python -m herald.receipts` serves status callbacks and replies, and runs the drainer."""

from __future__ import annotations

import asyncio

from herald import fingerprints
from herald.cli_services import ServiceUnreachable, connect_temporal, reach_database
from herald.ledger.store import open_pool
from herald.logs import configure_logging
from herald.receipts.app import POOL_CONNECTIONS_NEEDED, ReceiptEndpoint, build_receipt_server
from herald.receipts.drainer import run_drainer
from herald.settings import InvalidSetting, load_settings
from herald.tracing import tracer_provider, tracing_interceptors

DRAIN_INTERVAL_SECONDS = 1.0


async def serve() -> None:
    settings = load_settings()
    if settings.database_url is None:
        raise SystemExit("DATABASE_URL is not set: the receipt server stores reports in the ledger")
    stop = asyncio.Event()
    database_url = settings.database_url.get_secret_value()
    # Both dependencies are checked once before serving: a server that starts without them would
    # answer every report 503 and leave the reason in a log of pool retries.
    await reach_database(database_url)
    # A reply is recorded by its sender's keyed fingerprint: without the keys, refused at start
    # (one line naming HERALD_FINGERPRINT_KEYS), never at the first STOP.
    fingerprints.install_from(settings)
    # A short wait for a connection: with the database down, answer 503 fast so the provider redelivers.
    # Sized to the routes' shares (herald.receipts.app), so no route waits for another's connection.
    async with open_pool(database_url, max_size=POOL_CONNECTIONS_NEEDED, timeout=1.0) as pool:
        tracing = tracer_provider(settings.telemetry, "herald-receipts")  # traces its signals; flushed at exit
        client = await connect_temporal(settings.temporal, interceptors=tracing_interceptors(tracing))
        endpoint = ReceiptEndpoint(
            settings.receipts, auth_token=settings.twilio.auth_token.get_secret_value(), pool=pool, client=client,
            twilio=settings.twilio,
        )  # fmt: skip
        server = build_receipt_server(endpoint, settings.receipts.host, settings.receipts.port)
        drainer = asyncio.create_task(run_drainer(pool, client, DRAIN_INTERVAL_SECONDS, stop))
        try:
            await server.serve()
        finally:
            stop.set()
            await drainer


def main() -> None:
    configure_logging()
    try:
        asyncio.run(serve())
    except (InvalidSetting, ServiceUnreachable) as error:  # one line naming the variable, no traceback
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main()
