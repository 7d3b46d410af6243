"""Herald worker: runs NotificationWorkflow and its activities. Scale out by running more.

    python worker.py            # settings from HERALD_* variables and DATABASE_URL

This is the one place that builds the worker's dependencies: the Temporal
client, the ledger pool and the provider adapter.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AsyncExitStack

from temporalio.client import Client
from temporalio.worker import Worker

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.fault_points import FaultPoints
from herald.ledger.store import open_pool
from herald.providers.twilio import TwilioAdapter, TwilioConfig
from herald.settings import Settings, TwilioSettings, load_settings
from herald.temporal_client import connect
from workflows.notification import NotificationWorkflow

log = logging.getLogger("herald.worker")


def twilio_config(settings: TwilioSettings) -> TwilioConfig:
    return TwilioConfig(
        api_base=settings.api_base,
        account_sid=settings.account_sid,
        auth_token=settings.auth_token,
        from_number=settings.from_number,
        messaging_service_sid=settings.messaging_service_sid,
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        max_in_flight=settings.max_in_flight,
    )


def build_worker(client: Client, settings: Settings, ledger: LedgerActivities, provider: ProviderActivities) -> Worker:
    return Worker(
        client,
        task_queue=settings.temporal.task_queue,
        workflows=[NotificationWorkflow],
        activities=[ledger.record_intent, ledger.append_ledger, ledger.last_attempt_to_recipient, provider.submit, provider.lookup, provider.cancel],
        # Bounded like the adapter's connection pool, so activities queue in Temporal, not in httpx.
        max_concurrent_activities=settings.twilio.max_in_flight * 2,
    )


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    if settings.database_url is None:
        raise SystemExit("DATABASE_URL is not set: the worker needs the ledger (the local launcher sets it)")
    async with AsyncExitStack() as stack:
        pool = open_pool(settings.database_url.get_secret_value())
        await stack.enter_async_context(pool)
        adapter = TwilioAdapter(twilio_config(settings.twilio))
        stack.push_async_callback(adapter.aclose)
        client = await _connect_patiently(settings, stop)
        if client is None:
            return
        faults = FaultPoints(settings.fault_point, settings.fault_point_marker)
        worker = build_worker(
            client, settings, LedgerActivities(pool), ProviderActivities(adapter, settings.receipts.public_url, faults)
        )
        async with worker:
            log.info("worker polling task queue %s", settings.temporal.task_queue)
            await stop.wait()


async def _connect_patiently(settings: Settings, stop: asyncio.Event) -> Client | None:
    """Connect, retrying while the cluster is unreachable: a worker that starts before Temporal
    (or during its restart) waits for it instead of exiting. None if stopped meanwhile."""
    delay = 0.5
    while not stop.is_set():
        try:
            return await connect(settings.temporal)
        except RuntimeError as error:  # the SDK reports connection failures as RuntimeError
            log.warning("cannot reach Temporal at %s (%s); retrying in %.1fs", settings.temporal.address, error, delay)
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 10.0)
    return None


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = asyncio.Event()

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(load_settings(), stop)

    asyncio.run(runner())


if __name__ == "__main__":
    main()
