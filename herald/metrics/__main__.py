"""Ledger exporter: `python -m herald.metrics` serves the ledger's numbers on /metrics.

One per deployment: the numbers come from the shared ledger, so a second exporter would only
report them twice. Listens on HERALD_METRICS_HOST:HERALD_METRICS_PORT (127.0.0.1:9465).
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn

from herald.logs import configure_logging
from herald.metrics.exporter import build_exporter, ledger_pool
from herald.settings import InvalidSetting, load_settings

log = logging.getLogger("herald.metrics")


async def serve() -> None:
    settings = load_settings()
    if settings.database_url is None:
        raise SystemExit("DATABASE_URL is not set: the metrics exporter reads the ledger")
    telemetry = settings.telemetry
    async with ledger_pool(settings.database_url.get_secret_value(), telemetry.metrics_query_timeout) as pool:
        app = build_exporter(pool)
        server = uvicorn.Server(
            uvicorn.Config(app, host=telemetry.metrics_host, port=telemetry.metrics_port, log_level="warning")
        )
        serving = asyncio.create_task(server.serve())
        while not (server.started or serving.done()):
            await asyncio.sleep(0.05)
        if server.started:
            log.info("metrics exporter serving http://%s:%s/metrics", telemetry.metrics_host, telemetry.metrics_port)
        await serving


def main() -> None:
    configure_logging()
    try:
        asyncio.run(serve())
    except InvalidSetting as error:  # one line naming the variable and the rule, no traceback
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main()
