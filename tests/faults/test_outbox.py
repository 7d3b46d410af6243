"""The transactional outbox with a real service database (a second database on the embedded
server), relay processes that are SIGKILLed at their crash points, and a worker process.

Intents are counted in Temporal and the ledger, messages at the emulator.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.fault_points import FaultPoint
from devstack.processes import ManagedProcess
from devstack.stack import LocalStack
from herald import outbox
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.recipients import NUMBER_RULE
from herald.intake.errors import InvalidIntent
from herald.ledger.store import open_pool
from herald.outbox.relay import backlog, describe
from tests.faults.workers import crashed, service, worker
from tests.intents import fresh_key, fresh_recipient
from tests.stack import Emulator, create_outbox_database

WAIT = 90
ORDER = {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}


def notice(key: str, to: str) -> dict[str, Any]:
    return {"business_key": key, "channels": [
        {"channel": "sms", "recipient": to, "template_id": "order_receipt", "template_version": 1, "render_data": ORDER}
    ]}  # fmt: skip


@pytest.fixture(scope="module")
async def service_db(fault_stack: LocalStack) -> AsyncIterator[str]:
    """A service's own database beside Herald's ledger, with its business table and the outbox."""
    url = await create_outbox_database(fault_stack.database_url, "service")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE payments (id text PRIMARY KEY, settled boolean NOT NULL)")
    yield url


@pytest.fixture(scope="module")
async def service_pool(service_db: str) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(service_db, max_size=2) as pool:
        yield pool


@contextmanager
def relay(stack: LocalStack, service_db: str, name: str, **env: str) -> Iterator[ManagedProcess]:
    """A relay subprocess (short lease, so a dead relay's rows come due in seconds), once it listens."""
    extra = {"HERALD_OUTBOX_DATABASE_URL": service_db, "HERALD_OUTBOX_LEASE_SECONDS": "2", **env}
    # With a fault point: the product's relay, its starts wrapped in the crash points (devstack/fault_points.py).
    crashing = "HERALD_FAULT_POINT" in env
    argv = [sys.executable, "-m", *(["devstack.fault_points", "outbox-relay"] if crashing else ["herald.outbox"])]
    with service(stack, name, argv, "outbox relay polling", extra) as process:
        yield process


async def settle_payment(pool: AsyncConnectionPool, payment_id: str, key: str, to: str, *, commit: bool = True) -> None:
    """The service's transaction: the business row and the outbox row, committed together (or not)."""
    async with pool.connection() as conn:
        transaction = conn.transaction(force_rollback=not commit)
        async with transaction:
            await conn.execute("INSERT INTO payments (id, settled) VALUES (%s, true)", (payment_id,))
            await outbox.enqueue(conn, notice(key, to))


async def _intents_for(pool: AsyncConnectionPool, key: str) -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM intents WHERE business_key = %s", (key,))
        return (await cursor.fetchone())[0]  # type: ignore[index]


async def _row_state(pool: AsyncConnectionPool, key: str) -> str:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT state FROM herald_outbox WHERE business_key = %s", (key,))
        return (await cursor.fetchone())[0]  # type: ignore[index]


@pytest.mark.parametrize("point", [FaultPoint.OUTBOX_BEFORE_START, FaultPoint.OUTBOX_AFTER_START])
async def test_a_relay_killed_around_the_start_still_yields_exactly_one_intent(
    point: FaultPoint, fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool, service_db, service_pool
) -> None:
    """The service commits; the relay dies before starting the workflow, or after starting it and
    before marking the row: after a new relay, exactly one intent and one message."""
    key, to = fresh_key(), fresh_recipient()
    marker = Path(fault_stack.config.state_path) / f"outbox-crash-{key.replace(':', '_')}"
    await settle_payment(service_pool, f"pay_{secrets.token_hex(4)}", key, to)
    with relay(fault_stack, service_db, "relay-crash", HERALD_FAULT_POINT=point.value, HERALD_FAULT_POINT_MARKER=str(marker)) as dying:
        assert await crashed(dying) == -9
    assert await _row_state(service_pool, key) == "pending"
    with worker(fault_stack, "worker-outbox"), relay(fault_stack, service_db, "relay-recovery"):
        for _ in range(300):  # the dead relay's lease (2 s) must end before the row is due again
            if await _row_state(service_pool, key) == "relayed":
                break
            await asyncio.sleep(0.1)
        final = await asyncio.wait_for(fault_herald.wait(key), WAIT)
    assert final.state is IntentState.DELIVERED and len(final.attempts) == 1
    assert await _row_state(service_pool, key) == "relayed"
    assert await _intents_for(fault_pool, key) == 1
    assert len(await fault_emulator.messages(to)) == 1


async def test_a_rolled_back_service_transaction_sends_nothing(
    fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool, service_db, service_pool
) -> None:
    key, to = fresh_key(), fresh_recipient()
    await settle_payment(service_pool, f"pay_{secrets.token_hex(4)}", key, to, commit=False)
    with worker(fault_stack, "worker-outbox"), relay(fault_stack, service_db, "relay-rollback"):
        await asyncio.sleep(2)  # a relay pass or two
    async with service_pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM herald_outbox WHERE business_key = %s", (key,))
        assert (await cursor.fetchone()) == (0,)
    assert await _intents_for(fault_pool, key) == 0
    assert await fault_emulator.messages(to) == []
    with pytest.raises(Exception):  # no workflow was ever started under that key
        await fault_herald.status(key)


async def test_a_poison_row_is_refused_with_its_errors_and_the_batch_goes_on(
    fault_stack, fault_herald: HeraldClient, service_db, service_pool
) -> None:
    good = [fresh_key() for _ in range(3)]
    poison = fresh_key()
    async with service_pool.connection() as conn, conn.transaction():
        await outbox.enqueue(conn, notice(good[0], fresh_recipient()))
        # Written by older code or by hand: enqueue() would have refused it.
        bad = notice(poison, "not-a-number")
        await conn.execute("INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s)",
                           (poison, psycopg.types.json.Jsonb(bad)))  # fmt: skip
        for key in good[1:]:
            await outbox.enqueue(conn, notice(key, fresh_recipient()))
    with relay(fault_stack, service_db, "relay-poison"):
        for _ in range(200):
            states = [await _row_state(service_pool, key) for key in [*good, poison]]
            if "pending" not in states:
                break
            await asyncio.sleep(0.1)
    assert states == ["relayed", "relayed", "relayed", "refused"]
    async with service_pool.connection() as conn:
        cursor = await conn.execute("SELECT last_error FROM herald_outbox WHERE business_key = %s", (poison,))
        (error,) = await cursor.fetchone()  # type: ignore[misc]
    assert error == f"channels.0.recipient: {NUMBER_RULE}"
    with pytest.raises(InvalidIntent):
        async with service_pool.connection() as conn:
            await outbox.enqueue(conn, bad)


async def test_a_row_nested_3000_deep_or_oversized_is_refused_and_the_relay_lives_on(
    fault_stack, fault_herald: HeraldClient, service_db, service_pool
) -> None:
    """A row nested 3,000 levels deep used to raise RecursionError in the driver on every claim: the relay
    died at each start and every row behind it stayed pending. Now it and an oversized row are refused
    with the rule they break, the good rows around them are relayed, and the relay keeps running."""
    good = [fresh_key() for _ in range(2)]
    deep, huge = fresh_key(), fresh_key()
    async with service_pool.connection() as conn, conn.transaction():
        await outbox.enqueue(conn, notice(good[0], fresh_recipient()))
        # Written by hand or by older code: enqueue() validates, these rows never went through it.
        await conn.execute("INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s::jsonb)",
                           (deep, "[" * 3000 + "]" * 3000))  # fmt: skip
        await conn.execute("INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s::jsonb)",
                           (huge, '{"business_key": "' + "x" * 100_000 + '"}'))  # fmt: skip
        await outbox.enqueue(conn, notice(good[1], fresh_recipient()))
    with relay(fault_stack, service_db, "relay-deep") as process:
        for _ in range(200):
            states = [await _row_state(service_pool, key) for key in [*good, deep, huge]]
            if "pending" not in states:
                break
            await asyncio.sleep(0.1)
        assert process.process.poll() is None, "the relay died"
    assert states == ["relayed", "relayed", "refused", "refused"]
    async with service_pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT last_error FROM herald_outbox WHERE business_key IN (%s, %s) ORDER BY business_key = %s DESC",
            (deep, huge, deep),
        )
        errors = [row[0] for row in await cursor.fetchall()]
    assert errors == ["notice: nested deeper than 32 levels", "notice: larger than 65536 bytes of JSON"]


async def test_two_relays_on_one_outbox_of_a_thousand_rows_relay_each_row_once(
    fault_stack, fault_herald: HeraldClient, service_db, service_pool
) -> None:
    """No worker runs: this measures the relays, not delivery. Every row is relayed once and every
    key names exactly one workflow."""
    keys = [fresh_key() for _ in range(1000)]
    async with service_pool.connection() as conn, conn.transaction():
        for key in keys:
            await outbox.enqueue(conn, notice(key, fresh_recipient()))
    started = time.monotonic()
    # The production lease: no relay dies here, and a 2 s lease is shorter than a 50-row batch's
    # starts on a loaded machine (25 rows/s across two relays), so a live relay's rows came due
    # again and were started twice (harmless: idempotent, but not "relayed once").
    lease = {"HERALD_OUTBOX_LEASE_SECONDS": "30"}
    with relay(fault_stack, service_db, "relay-a", **lease), relay(fault_stack, service_db, "relay-b", **lease):
        peak_age = 0.0
        while True:
            now = await backlog(service_pool)
            peak_age = max(peak_age, now.oldest_age_seconds or 0.0)
            if now.pending == 0:
                break
            assert time.monotonic() - started < 120, describe(now)
            await asyncio.sleep(0.2)
    elapsed = time.monotonic() - started
    print(f"\n1,000 outbox rows, two relays: {1000 / elapsed:.0f} rows/s, oldest unrelayed peaked at {peak_age:.1f}s; {describe(now)}")
    async with service_pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT state, count(*), max(tries) FROM herald_outbox WHERE business_key = ANY(%s) GROUP BY state", (keys,)
        )
        assert await cursor.fetchall() == [("relayed", 1000, 1)]
    # One workflow per key, every key: its workflow exists (ids are the key, so never two).
    described = []
    for chunk in range(0, len(keys), 100):
        described += await asyncio.gather(*(fault_herald.handle(k, Channel.SMS).describe() for k in keys[chunk : chunk + 100]))
    assert sorted(d.id for d in described) == sorted(f"{key}/sms" for key in keys)
