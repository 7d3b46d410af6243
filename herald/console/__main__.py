"""`python -m herald.console`: the operator's console on HERALD_CONSOLE_HOST:HERALD_CONSOLE_PORT (127.0.0.1:8240).

It reads the ledger as a login of herald_reader (HERALD_CONSOLE_DATABASE_URL, migration 022), in
read-only transactions whose statements PostgreSQL cancels after HERALD_CONSOLE_QUERY_TIMEOUT, and
refuses to start on a login that may write. It names people with the deployment's fingerprint keys
(HERALD_FINGERPRINT_KEYS): an operator's typed number is looked up by its keyed fingerprint. With
HERALD_CONSOLE_OUTBOX_DATABASE_URL it reads the outbox's backlog too, as a login that may not read a
notice (herald.console.outbox_backlog); HERALD_CONSOLE_ROUTES names the routes' task queues beyond
HERALD_TASK_QUEUE whose submit queues the routes page reads.

With HERALD_CONSOLE_OPENER_DATABASE_URL, a login of herald_text_opener (migration 024), an operator
may open a notice's sent text, each opening recorded first (herald.console.sent_text); the console
refuses to start on an opener login that may do more than that one function does.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

from psycopg import Error as DatabaseError
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from herald.console.app import build_console
from herald.console.outbox_backlog import VARIABLE as OUTBOX_VARIABLE
from herald.console.outbox_backlog import OutboxBacklog
from herald.metrics.exporter import ledger_pool
from herald.runtime import exits
from herald.runtime.http_server import serve_app
from herald.runtime.process import ProcessRuntime
from herald.runtime.reach import ServiceUnreachable, database_url, reach_database
from herald.settings import InvalidSetting, load_settings
from herald.temporal.route_backlog import route_backlog

log = logging.getLogger("herald.console")

VARIABLE = "HERALD_CONSOLE_DATABASE_URL"
OPENER_VARIABLE = "HERALD_CONSOLE_OPENER_DATABASE_URL"
# Two pages read at once, a third waits for a connection within the query timeout: an operator's
# console, not a public site.
POOL_SIZE = 3
# Tables whose INSERT or whose personal columns a herald_reader login does not have: one it has is
# not the console's login (the services' or the owner's, given by mistake).
_WRITES = "SELECT has_table_privilege('intents', 'INSERT') OR has_table_privilege('transitions', 'INSERT')"
# A reader that may also open texts (migration 024's function) is refused too: opening is the
# opener login's alone, so the pages' login never holds a text.
_READS_PEOPLE = (
    "SELECT has_column_privilege('intents', 'recipient', 'SELECT') OR coalesce(has_function_privilege("
    "to_regprocedure('open_sent_text(text, text, text)'), 'EXECUTE'), false)"
)
# The opener's login may call open_sent_text and nothing around it: no column of intents (the
# recipient, the text outside the function), no write to text_openings (an opening without its
# text, or a record rewritten), no data key, no write to the ledger.
_OPENS = (
    "SELECT coalesce(has_function_privilege(to_regprocedure('open_sent_text(text, text, text)'), 'EXECUTE'), false)"
)
_OPENER_BEYOND = (
    "SELECT has_any_column_privilege('intents', 'SELECT, INSERT, UPDATE')"
    " OR has_table_privilege('text_openings', 'INSERT, UPDATE, DELETE, TRUNCATE')"
    " OR has_any_column_privilege('recipient_keys', 'SELECT, INSERT')"
    " OR has_table_privilege('transitions', 'INSERT')"
)
_READS = "SELECT has_table_privilege('attempts', 'SELECT') AND has_column_privilege('intents', 'workflow_id', 'SELECT')"


def console_pool(url: str, query_timeout: float) -> AsyncConnectionPool:
    """A pool (not yet open) whose transactions are read-only and whose statements are cancelled
    after `query_timeout`: the exporter's bounded pool, one option more."""
    read_only = make_conninfo(url, options="-c default_transaction_read_only=on")
    return ledger_pool(read_only, query_timeout)


async def require_reader(pool: AsyncConnectionPool) -> None:
    """Refuse a login that may write to the ledger or read a person's fields, or that cannot read it."""
    async with pool.connection() as conn:
        writes = (await (await conn.execute(_WRITES)).fetchone())[0]  # type: ignore[index]
        people = (await (await conn.execute(_READS_PEOPLE)).fetchone())[0]  # type: ignore[index]
        reads = (await (await conn.execute(_READS)).fetchone())[0]  # type: ignore[index]
    if writes or people:
        raise InvalidSetting(
            VARIABLE,
            "must be a login of herald_reader (migration 022): this one may write to the ledger, read recipients "
            "or open texts",
        )
    if not reads:
        raise InvalidSetting(
            VARIABLE, "must be a login of herald_reader (migration 022): this one may not read the ledger"
        )


def opener_pool(url: str, query_timeout: float) -> AsyncConnectionPool:
    """The opener's pool (not yet open): read-write (its one function writes the opening), bounded as the reader's."""
    return ledger_pool(url, query_timeout)


async def require_opener(pool: AsyncConnectionPool) -> None:
    """Refuse an opener login that cannot call open_sent_text, or that may do anything beside it."""
    async with pool.connection() as conn:
        opens = (await (await conn.execute(_OPENS)).fetchone())[0]  # type: ignore[index]
        beyond = (await (await conn.execute(_OPENER_BEYOND)).fetchone())[0]  # type: ignore[index]
    if beyond:
        raise InvalidSetting(
            OPENER_VARIABLE,
            "must be a login of herald_text_opener (migration 024): this one may read intents, write the "
            "ledger or read data keys beside opening texts",
        )
    if not opens:
        raise InvalidSetting(
            OPENER_VARIABLE, "must be a login of herald_text_opener (migration 024): this one may not open texts"
        )


async def serve() -> None:
    runtime = ProcessRuntime(load_settings())
    settings = runtime.settings()
    console = settings.console
    keyring = runtime.keyring()  # a person is found by their keyed fingerprint: refused at start when unset
    if console.database_url is None:
        raise InvalidSetting(VARIABLE, "required: a login of herald_reader (migration 022); the console never writes")
    url = database_url(VARIABLE, console.database_url.get_secret_value())
    await reach_database(url, VARIABLE)
    async with AsyncExitStack() as opened:
        pool = await opened.enter_async_context(console_pool(url, console.query_timeout))
        await require_reader(pool)
        opener = None
        if console.opener_database_url is not None:
            opener_url = database_url(OPENER_VARIABLE, console.opener_database_url.get_secret_value())
            await reach_database(opener_url, OPENER_VARIABLE)
            opener = await opened.enter_async_context(opener_pool(opener_url, console.query_timeout))
            await require_opener(opener)
        outbox = None
        if console.outbox_database_url is not None:
            outbox_url = database_url(OUTBOX_VARIABLE, console.outbox_database_url.get_secret_value())
            outbox = OutboxBacklog(await opened.enter_async_context(console_pool(outbox_url, console.query_timeout)))
            await _check_outbox(outbox, outbox_url, console.query_timeout)
        # Each route's backlog is the Temporal server's to count, asked on each routes page; connected on
        # the first (a server that is down costs those lines of the page, not the console).
        temporal = await runtime.temporal(lazy=True)
        routes = tuple(dict.fromkeys((settings.temporal.task_queue, *console.routes)))
        app = build_console(pool, keyring, console, settings.temporal.namespace, routes=routes, outbox=outbox,
                            read_backlog=lambda task_queue: route_backlog(temporal, task_queue), opener=opener)  # fmt: skip
        # Proxy headers off: the access rules read the TCP peer, which X-Forwarded-For must not replace.
        await serve_app(app, host=console.host, port=console.port, log=log, what="console",
                        access_log=False, proxy_headers=False)  # fmt: skip


async def _check_outbox(outbox: OutboxBacklog, url: str, timeout: float) -> None:
    """Refuse a login that may read a notice now, when the services' database answers; one that does
    not answer at start is checked on the first routes page (until then the page says unknown)."""
    try:
        await reach_database(url, OUTBOX_VARIABLE)
        await asyncio.wait_for(outbox.check(), timeout)
    except (ServiceUnreachable, DatabaseError, PoolTimeout, TimeoutError) as error:
        log.warning("the outbox database did not answer at start (%s); checked when first read", type(error).__name__)


def main() -> None:
    exits.serve(serve, database=VARIABLE)


if __name__ == "__main__":
    main()
