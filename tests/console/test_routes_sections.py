"""The routes page's outbox backlog, recent expiries in the route queue, every route's backlog and its shared report.

The outbox is a real service database on the session's PostgreSQL (the outbox schema applied), read as
a login granted SELECT on two columns; the expiries are ledger rows as the workflow writes them; the
backlogs come from stand-ins for the Temporal server's answer and from a real gRPC client whose
server never answers; the report's runs are counted around the real ``ledger_report``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from devstack.stack import LocalStack
from herald.console import app as console_app
from herald.console.__main__ import console_pool
from herald.console.outbox_backlog import OutboxBacklog
from herald.core.machine.rules import EXPIRED_IN_QUEUE
from herald.ledger.report import LedgerReport, ledger_report
from herald.settings import ConsoleSettings
from herald.temporal.route_backlog import LaneBacklog, PriorityBacklog, RouteBacklog, route_backlog
from tests.console.conftest import console_client
from tests.console.ledger_rows import _intent
from tests.console.test_story import text_of
from tests.intents import fresh_key, fresh_recipient
from tests.stack import create_outbox_database

# ---- the outbox ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def outbox_urls(ledger_stack: LocalStack) -> tuple[str, str]:
    """A service database with herald_outbox (its owner's URL), and a login granted what the README
    says the console's outbox login needs: SELECT on (state, created_at), nothing else."""
    assert ledger_stack.database_url is not None
    owner = await create_outbox_database(ledger_stack.database_url, "console_outbox")
    login, password = f"console_outbox_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
        await conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD '{password}'")
        await conn.execute(f"GRANT SELECT (state, created_at) ON herald_outbox TO {login}")
    return owner, make_conninfo(owner, user=login, password=password)


async def _outbox_row(owner: str, phone: str, state: str, age_seconds: float) -> None:
    async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO herald_outbox (business_key, notice, state, created_at) VALUES (%s, %s, %s, now() - %s)",
            (fresh_key("outbox_seen"), Jsonb({"channels": [{"channel": "sms", "recipient": phone}]}), state,
             timedelta(seconds=age_seconds)),
        )  # fmt: skip


@pytest.fixture
async def outbox_pool(outbox_urls: tuple[str, str]) -> AsyncIterator[AsyncConnectionPool]:
    async with console_pool(outbox_urls[1], 5.0) as opened:
        yield opened


async def test_the_outbox_backlog_is_read_as_a_login_that_cannot_read_a_notice(
    reader_pool: AsyncConnectionPool, outbox_urls: tuple[str, str], outbox_pool: AsyncConnectionPool
) -> None:
    """Rows waiting and the oldest's age, as starter.py report prints them, read on two columns; no number shown."""
    owner, _ = outbox_urls
    phone = fresh_recipient()
    for state, age in (("pending", 95.0), ("pending", 10.0), ("relayed", 300.0), ("refused", 200.0)):
        await _outbox_row(owner, phone, state, age)
    async with console_client(reader_pool, outbox=OutboxBacklog(outbox_pool)) as client:
        answer = await client.get("/routes")
    assert answer.status_code == 200
    text = text_of(answer.text)
    found = re.search(r"outbox backlog (\d+) oldest unrelayed ([0-9.]+)s relayed (\d+) refused (\d+)", text)
    assert found is not None, text
    assert found.group(1) == "2" and 95 <= float(found.group(2)) < 125 and found.groups()[2:] == ("1", "1")
    assert phone not in answer.text and phone[1:] not in answer.text


async def test_an_outbox_login_that_may_read_the_notices_is_refused(
    reader_pool: AsyncConnectionPool, outbox_urls: tuple[str, str]
) -> None:
    """The owner's login (or the relay's, which may read every notice) is not read: the page names the variable and the grant."""
    async with (
        console_pool(outbox_urls[0], 5.0) as owner_pool,
        console_client(reader_pool, outbox=OutboxBacklog(owner_pool)) as client,
    ):
        answer = await client.get("/routes")
    assert answer.status_code == 200
    assert (
        "outbox: not read (HERALD_CONSOLE_OUTBOX_DATABASE_URL: must be a login that may read herald_outbox's state "
        "and created_at only (GRANT SELECT (state, created_at) ON herald_outbox TO &lt;login&gt;): this one may read "
        "the notices (a person's number and data))"
    ) in text_of(answer.text)


async def test_without_an_outbox_login_the_page_says_not_configured(console: httpx.AsyncClient) -> None:
    """No HERALD_CONSOLE_OUTBOX_DATABASE_URL: one line says so, the page is whole."""
    answer = await console.get("/routes")
    assert answer.status_code == 200
    assert "outbox: not configured (HERALD_CONSOLE_OUTBOX_DATABASE_URL unset)" in text_of(answer.text)


# ---- recent expiries in the route queue ---------------------------------------------------------------


async def _expired_in_queue(pool: AsyncConnectionPool, tenant: str, expired_at: datetime) -> str:
    """An SMS whose submit waited in the route queue until the intent expired, as the workflow records it; its key."""
    workflow_id = f"{fresh_key('console_expired')}/sms"
    created = expired_at - timedelta(minutes=10)
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        await _intent(cursor, workflow_id, "sms", fresh_recipient(), created, tenant=tenant,
                      expires_at=expired_at, template_id="flash_sale")  # fmt: skip
        await cursor.execute(
            """INSERT INTO transitions (workflow_id, seq, at, from_state, to_state, reason, source)
               VALUES (%s, 1, %s, 'pending', 'expired', %s, 'clock')""",
            (workflow_id, expired_at, EXPIRED_IN_QUEUE),
        )
    return workflow_id.rsplit("/", 1)[0]


async def test_the_newest_expiries_in_the_route_queue_are_listed_with_links(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Of 21 expiries in the last day and one older, the page lists the newest 20, newest first, each linking to its story."""
    tenant = f"late-{secrets.token_hex(3)}"
    now = datetime.now(UTC)
    older = await _expired_in_queue(pool, tenant, now - timedelta(hours=25))
    # Stamped ahead of the clock: the ledger is the session's, and another test's intent that really
    # expired in the queue a moment ago must not be the newest here.
    ahead = now + timedelta(hours=1)
    keys = [await _expired_in_queue(pool, tenant, ahead - timedelta(minutes=1 + n)) for n in range(21)]
    page = (await console.get("/routes")).text
    section = re.search(r"expired in the route queue, the newest of the last 24 h</h3>(.*?)</table>", page, re.DOTALL)
    assert section is not None
    rows = re.findall(r"<tr data-workflow=\"([^\"]+)\">(.*?)</tr>", section.group(1), re.DOTALL)
    assert [workflow.rsplit("/", 1)[0] for workflow, _ in rows] == keys[:20]
    first = text_of(rows[0][1])
    assert re.fullmatch(rf" \d{{4}}-\d\d-\d\d [0-9:.]+ UTC {keys[0]} sms flash_sale v1 {tenant} ", first), first
    assert f'href="/notice?key={keys[0].replace(":", "%3A")}"' in rows[0][1]
    assert older not in page and keys[20] not in page
    assert 'href="/intents?state=expired"' in page


# ---- every route's backlog --------------------------------------------------------------------------------


async def test_each_route_has_its_backlog_line_or_unknown(reader_pool: AsyncConnectionPool) -> None:
    """One line per route's submit queue: the server's count and the oldest's wait; a route whose server fails or hangs is unknown, not a 500."""
    counted = RouteBacklog(route="herald-notifications-submit", by_priority=[
        PriorityBacklog(priority=1, tasks=3, oldest_seconds=2.0, added_per_second=1, dispatched_per_second=1),
        PriorityBacklog(priority=5, tasks=40, oldest_seconds=12.5, added_per_second=4, dispatched_per_second=4)])  # fmt: skip

    unpolled = LaneBacklog(queue="herald-lane-urgent", tasks=2, oldest_seconds=95.0, pollers=0)
    lane_only = RouteBacklog(route="herald-lane-submit", by_priority=[], lane=unpolled)

    async def read(task_queue: str) -> RouteBacklog:
        if task_queue == "herald-notifications":
            return counted
        if task_queue == "herald-lane":
            return lane_only
        if task_queue == "herald-paced":
            raise RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b"")
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    settings = ConsoleSettings(query_timeout=0.3)
    routes = ("herald-notifications", "herald-paced", "herald-silent", "herald-lane")
    async with console_client(reader_pool, settings, read_backlog=read, routes=routes) as client:
        answer = await client.get("/routes")
    assert answer.status_code == 200
    lines = {route: text_of(row) for route, row in re.findall(r'<tr data-route="([^"]+)">(.*?)</tr>', answer.text)}
    assert lines == {
        "herald-notifications": " herald-notifications-submit 43 12.5 s priority 1: 3 queued, oldest 2.0 s "
                                "priority 5: 40 queued, oldest 12.5 s ",
        "herald-paced": " herald-paced-submit unknown - the Temporal server did not answer: RPCError ",
        "herald-silent": " herald-silent-submit unknown - the Temporal server did not answer: TimeoutError ",
        # An urgent lane with intents waiting and no worker polling it is said, and marked.
        "herald-lane": " herald-lane-submit 0 0.0 s empty urgent lane herald-lane-urgent: 2 workflow tasks waiting,"
                       " oldest 95.0 s, 0 pollers NO WORKER POLLS IT: its intents wait untouched ",
    }  # fmt: skip
    assert '<div class="lane warn">urgent lane herald-lane-urgent' in answer.text


async def test_a_temporal_server_that_never_answers_costs_the_backlog_lines_only(
    reader_pool: AsyncConnectionPool,
) -> None:
    """A real client whose server accepts the connection and says nothing: each route is unknown within the deadline."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepted by the kernel, never read: the gRPC handshake waits for good
    try:
        client = await Client.connect(f"127.0.0.1:{silent.getsockname()[1]}", lazy=True)
        settings = ConsoleSettings(query_timeout=0.5)
        async with console_client(reader_pool, settings, read_backlog=lambda queue: route_backlog(client, queue),
                                  routes=("herald-notifications", "herald-paced")) as console:  # fmt: skip
            started = asyncio.get_running_loop().time()
            answer = await console.get("/routes")
            waited = asyncio.get_running_loop().time() - started
    finally:
        silent.close()
    assert answer.status_code == 200
    rows = re.findall(r'<tr data-route="([^"]+)">(.*?)</tr>', answer.text)
    assert [route for route, _ in rows] == ["herald-notifications", "herald-paced"]
    assert all(re.search(r"unknown - the Temporal server did not answer: (TimeoutError|RuntimeError|RPCError)",
                         text_of(row)) for _, row in rows), rows  # fmt: skip
    assert waited < 5.0


async def test_without_a_temporal_connection_the_page_says_the_backlog_was_not_read(
    console: httpx.AsyncClient,
) -> None:
    """No Temporal client given: one line says the backlog was not read."""
    answer = await console.get("/routes")
    assert "route backlog: not read (the console has no Temporal connection)" in text_of(answer.text)


# ---- the report, computed once for everyone ----------------------------------------------------------


@pytest.fixture
def report_runs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each run of the real ledger_report the console starts, by when it began; each takes at least 0.3 s."""
    runs: list[float] = []

    async def counted(pool: AsyncConnectionPool) -> LedgerReport:
        runs.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0.3)  # long enough that every concurrent reader arrives while it runs
        return await ledger_report(pool)

    monkeypatch.setattr(console_app, "ledger_report", counted)
    return runs


async def test_concurrent_readers_share_one_computation(
    reader_pool: AsyncConnectionPool, report_runs: list[float]
) -> None:
    """Eight readers at once get one report, computed once, and the same "as of" stamp."""
    async with console_client(reader_pool) as client:
        answers = await asyncio.gather(*(client.get("/routes") for _ in range(8)))
        later = await client.get("/routes", params={"hours": "6"})
    assert [a.status_code for a in answers] == [200] * 8 and later.status_code == 200
    assert len(report_runs) == 1
    stamps = {re.search(r"as of (\d\d:\d\d:\d\d) UTC, computed in ([0-9.]+) s", text_of(a.text)).groups()  # type: ignore[union-attr]
              for a in [*answers, later]}  # fmt: skip
    assert len(stamps) == 1 and float(next(iter(stamps))[1]) >= 0.3


async def test_the_report_is_computed_again_once_its_age_has_passed(
    reader_pool: AsyncConnectionPool, report_runs: list[float]
) -> None:
    """Within its freshness a reader gets the last report; after it, the next reader starts one computation."""
    async with console_client(reader_pool, report_fresh_for=1.0) as client:
        await client.get("/routes")
        await client.get("/routes")
        assert len(report_runs) == 1
        await asyncio.sleep(1.1)
        await asyncio.gather(client.get("/routes"), client.get("/routes"))
    assert len(report_runs) == 2


async def test_a_failed_computation_is_not_kept(
    reader_pool: AsyncConnectionPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report the ledger cancelled answers 503 to its readers; the next reader computes it again and gets the page."""
    calls = 0

    async def cancelled_once(pool: AsyncConnectionPool) -> LedgerReport:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.sleep(0.2)
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        return await ledger_report(pool)

    monkeypatch.setattr(console_app, "ledger_report", cancelled_once)
    async with console_client(reader_pool) as client:
        first = await asyncio.gather(client.get("/routes"), client.get("/routes"))
        again = await client.get("/routes")
    assert [a.status_code for a in first] == [503, 503] and calls == 2
    assert again.status_code == 200
