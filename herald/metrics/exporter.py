"""The ledger exporter's HTTP side: ``GET /metrics`` reads the ledger and answers in Prometheus text.

Every scrape queries the ledger afresh (nothing is cached, so two Prometheus replicas see the same
thing), through a small pool whose connections carry a statement timeout: a slow ledger fails one
scrape (``herald_ledger_up 0``, answered 200 so the failure is a series an alert can read)
instead of queueing queries behind each other. The pool's size bounds concurrent scrapes.

The statement timeout is PostgreSQL's to enforce, so it does nothing when the server never hears
the query (a dead network path, a frozen host): each scrape also carries its own deadline here,
past which the reading is abandoned and the scrape answers ``herald_ledger_up 0`` all the same.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg import Error as DatabaseError
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from temporalio.service import RPCError

from herald.ledger.store import open_pool
from herald.metrics.ledger import LedgerCollector, LedgerNumbers, read_ledger_numbers
from herald.metrics.route import RouteBacklogCollector
from herald.temporal.route_backlog import RouteBacklog

log = logging.getLogger("herald.metrics")

# Two scrapes at once (a Prometheus pair); a third waits for a connection, then fails.
POOL_SIZE = 2
# The scrape's own deadline is the query timeout plus this: a ledger that answers, however slowly,
# gets the whole statement timeout (and its QueryCanceled) before the exporter stops waiting.
SCRAPE_DEADLINE_MARGIN_SECONDS = 1.0
# libpq waits at least 2 s for a connection whatever it is told; below that it is not a bound.
MIN_CONNECT_TIMEOUT_SECONDS = 2


def ledger_pool(database_url: str, query_timeout: float) -> AsyncConnectionPool:
    """A pool (not yet open) whose every statement PostgreSQL cancels after `query_timeout`, and
    whose new connections give up when the server has not answered within about as long."""
    settings = conninfo_to_dict(database_url)
    options = settings.get("options") or ""
    bounded = {"options": f"{options} -c statement_timeout={max(1, round(query_timeout * 1000))}".strip()}
    if "connect_timeout" not in settings:  # a silent server would otherwise hold a pool worker for good
        bounded["connect_timeout"] = str(max(MIN_CONNECT_TIMEOUT_SECONDS, math.ceil(query_timeout)))
    conninfo = make_conninfo(database_url, **bounded)
    return open_pool(conninfo, min_size=1, max_size=POOL_SIZE, timeout=query_timeout)


class ScrapeDeadline(Exception):
    """The ledger did not answer within the scrape's deadline (a hung server or network path)."""


def build_exporter(
    pool: AsyncConnectionPool,
    *,
    query_timeout: float,
    read_backlog: Callable[[], Awaitable[RouteBacklog]] | None = None,
) -> Starlette:
    """The /metrics app over `pool` (from `ledger_pool` with the same `query_timeout`); with
    `read_backlog`, each scrape also asks the Temporal server for the route's backlog, under the
    same deadline, and a server that does not answer costs only ``herald_route_backlog_up 0``."""
    deadline = query_timeout + SCRAPE_DEADLINE_MARGIN_SECONDS

    async def metrics(request: Request) -> Response:
        started = time.monotonic()
        numbers: LedgerNumbers | None
        try:
            numbers = await _within(deadline, read_ledger_numbers(pool))
        except (DatabaseError, PoolTimeout, OSError, ScrapeDeadline) as error:
            log.warning("cannot read the ledger for this scrape: %s", type(error).__name__)
            numbers = None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(LedgerCollector(numbers, time.monotonic() - started))
        if read_backlog is not None:
            registry.register(RouteBacklogCollector(await _backlog(read_backlog, deadline)))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


async def _backlog(read_backlog: Callable[[], Awaitable[RouteBacklog]], deadline: float) -> RouteBacklog | None:
    try:
        return await asyncio.wait_for(read_backlog(), deadline)
    except (RPCError, RuntimeError, TimeoutError) as error:  # RuntimeError: the lazy client's failed connect
        log.warning("cannot read the route's backlog for this scrape: %s", type(error).__name__)
        return None


async def _within(deadline: float, reading: Coroutine[Any, Any, LedgerNumbers]) -> LedgerNumbers:
    """The reading's result, or ScrapeDeadline once `deadline` seconds pass.

    The reading runs in its own task and is abandoned at the deadline, not awaited: cancelling a
    query on a server that hears nothing can itself wait for psycopg's cancel request, and
    Prometheus is owed an answer inside its scrape timeout. The task keeps its pool connection
    until the cancellation lands; the pool's size bounds how many can be held that way.
    """
    task = asyncio.ensure_future(reading)
    done, _ = await asyncio.wait({task}, timeout=deadline)
    if not done:
        task.cancel()
        task.add_done_callback(_consume_outcome)
        raise ScrapeDeadline(f"the ledger did not answer within {deadline:g} s")
    return task.result()


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    # An abandoned reading's late error is expected (its query was cancelled); it is read here so
    # asyncio does not log it as never retrieved.
    if not task.cancelled():
        task.exception()
