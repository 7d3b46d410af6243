"""Ledger exporter: `python -m herald.metrics` serves the ledger's numbers on /metrics.

One per deployment: the numbers come from the shared ledger, so a second exporter would only
report them twice. The route's backlog comes from the Temporal server (HERALD_TEMPORAL_*). Listens on HERALD_METRICS_HOST:HERALD_METRICS_PORT (127.0.0.1:9465).
"""

from __future__ import annotations

import logging

from herald.metrics.exporter import build_exporter, ledger_pool
from herald.runtime import exits
from herald.runtime.http_server import serve_app
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.settings import load_settings
from herald.temporal.route_backlog import route_backlog

log = logging.getLogger("herald.metrics")


async def serve() -> None:
    runtime = ProcessRuntime(load_settings())
    telemetry = runtime.settings().telemetry
    # A ledger that is unreachable at start is a misconfiguration until shown otherwise: say so once
    # and exit, rather than serve herald_ledger_up 0 from a pool retrying in the log. Once serving,
    # an outage is what herald_ledger_up 0 is for.
    database_url = await runtime.reach(LEDGER, "required: the metrics exporter reads the ledger")
    # Temporal is asked for the route's backlog on each scrape; connected on the first (a server
    # that is down at start costs herald_route_backlog_up 0, not the ledger's numbers).
    temporal = await runtime.temporal(lazy=True)
    task_queue = runtime.settings().temporal.task_queue
    async with ledger_pool(database_url, telemetry.metrics_query_timeout) as pool:
        app = build_exporter(
            pool,
            query_timeout=telemetry.metrics_query_timeout,
            read_backlog=lambda: route_backlog(temporal, task_queue),
        )
        await serve_app(app, host=telemetry.metrics_host, port=telemetry.metrics_port, log=log,
                        what="metrics exporter", path="/metrics")  # fmt: skip

def main() -> None:
    exits.serve(serve)


if __name__ == "__main__":
    main()
