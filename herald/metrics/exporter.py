"""The ledger exporter's HTTP side: ``GET /metrics`` reads the ledger and answers in Prometheus text.

Every scrape queries the ledger afresh (nothing is cached, so two Prometheus replicas see the same
thing), through a small pool whose connections carry a statement timeout: a slow ledger fails one
scrape (``herald_ledger_up 0``, answered 200 so the failure is a series an alert can read)
instead of queueing queries behind each other. The pool's size bounds concurrent scrapes.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg import Error as DatabaseError
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herald.ledger.store import open_pool
from herald.metrics.ledger import LedgerCollector, LedgerNumbers, read_ledger_numbers

log = logging.getLogger("herald.metrics")

# Two scrapes at once (a Prometheus pair); a third waits for a connection, then fails.
POOL_SIZE = 2


def ledger_pool(database_url: str, query_timeout: float) -> AsyncConnectionPool:
    """A pool (not yet open) whose every statement PostgreSQL cancels after `query_timeout`."""
    options = conninfo_to_dict(database_url).get("options") or ""
    bounded = f"{options} -c statement_timeout={max(1, round(query_timeout * 1000))}".strip()
    conninfo = make_conninfo(database_url, options=bounded)
    return open_pool(conninfo, min_size=1, max_size=POOL_SIZE, timeout=query_timeout)


def build_exporter(pool: AsyncConnectionPool) -> Starlette:
    async def metrics(request: Request) -> Response:
        started = time.monotonic()
        numbers: LedgerNumbers | None
        try:
            numbers = await read_ledger_numbers(pool)
        except (DatabaseError, PoolTimeout, OSError) as error:
            log.warning("cannot read the ledger for this scrape: %s", type(error).__name__)
            numbers = None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(LedgerCollector(numbers, time.monotonic() - started))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])
