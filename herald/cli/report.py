"""`report`: the numbers Herald keeps about itself, from the ledger, the route's queue and the outbox."""

from __future__ import annotations

import argparse

import psycopg
from temporalio.service import RPCError

from herald.ledger.report import ledger_report
from herald.outbox.relay import backlog, describe
from herald.route_backlog import route_backlog
from herald.runtime.process import LEDGER, OUTBOX, ProcessRuntime
from herald.runtime.reach import ServiceUnreachable


async def cmd_report(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    runtime.required_database_url(LEDGER, "required for the report (it is computed from the ledger)")
    has_outbox = runtime.database_url(OUTBOX) is not None  # checked for form before anything is connected to
    async with runtime.pool(LEDGER, "required") as pool:
        print((await ledger_report(pool)).render())
    print(await _route_backlog(runtime))
    if has_outbox:
        print(await _outbox_backlog(runtime))
    return 0


async def _route_backlog(runtime: ProcessRuntime) -> str:
    """The route's queue now, from the Temporal server: the report's one figure the ledger cannot have
    (a submit still queued is not in it yet). Unknown, not fatal, when the server does not answer."""
    try:
        temporal = await runtime.temporal()
        return (await route_backlog(temporal, runtime.settings().temporal.task_queue)).render()
    except (ServiceUnreachable, RPCError) as error:
        return f"route backlog: unknown ({error})"


async def _outbox_backlog(runtime: ProcessRuntime) -> str:
    """The relay's backlog, from the service database; unknown, not fatal, when it is out of reach
    (the service database is not always reachable from where the report runs)."""
    try:
        async with runtime.pool(OUTBOX, "required") as outbox_pool:
            return describe(await backlog(outbox_pool))
    except ServiceUnreachable as error:
        return f"outbox backlog: unknown ({error})"
    except psycopg.Error as error:
        return f"outbox backlog: unknown ({type(error).__name__}: the outbox database did not answer)"
