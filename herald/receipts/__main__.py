"""Receipt server: `python -m herald.receipts` serves status callbacks and replies, and runs the drainer."""

from __future__ import annotations

import asyncio

from herald.receipts.app import POOL_CONNECTIONS_NEEDED, ReceiptEndpoint, build_receipt_server
from herald.receipts.drainer import run_drainer
from herald.runtime import exits
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.settings import load_settings
from herald.tracing import tracer_provider, tracing_interceptors

DRAIN_INTERVAL_SECONDS = 1.0


async def serve() -> None:
    runtime = ProcessRuntime(load_settings())
    settings = runtime.settings()
    stop = asyncio.Event()
    # Both dependencies are checked once before serving: a server that starts without them would
    # answer every report 503 and leave the reason in a log of pool retries. A short wait for a
    # connection: with the database down, answer 503 fast so the provider redelivers. Sized to the
    # routes' shares (herald.receipts.app), so no route waits for another's connection.
    opened = runtime.pool(LEDGER, "required: the receipt server stores reports in the ledger",
                          max_size=POOL_CONNECTIONS_NEEDED, timeout=1.0)  # fmt: skip
    async with opened as pool:
        # A reply is recorded by its sender's keyed fingerprint: without the keys, refused at start
        # (one line naming HERALD_FINGERPRINT_KEYS), never at the first STOP.
        keyring = runtime.keyring()
        tracing = tracer_provider(settings.telemetry, "herald-receipts")  # traces its signals; flushed at exit
        client = await runtime.temporal(interceptors=tracing_interceptors(tracing))
        endpoint = ReceiptEndpoint(
            settings.receipts, auth_token=settings.twilio.auth_token.get_secret_value(), pool=pool, client=client,
            keyring=keyring, twilio=settings.twilio,
        )  # fmt: skip
        server = build_receipt_server(endpoint, settings.receipts.host, settings.receipts.port)
        drainer = asyncio.create_task(run_drainer(pool, client, DRAIN_INTERVAL_SECONDS, stop))
        try:
            await server.serve()
        finally:
            stop.set()
            await drainer


def main() -> None:
    exits.serve(serve)


if __name__ == "__main__":
    main()
