"""What operators see: search attributes in Temporal, reconciliation views and the report in the ledger."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.intake.errors import IntentConflict
from herald.ledger.report import ledger_report
from herald.temporal.workflow_api import delivered_quietly_query, not_delivered_query
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.stack import Emulator


async def test_search_attributes_list_intents_by_state_template_and_attempts(herald: HeraldClient, emulator: Emulator) -> None:
    """The Web UI's filters work: a straight delivery is listed as closed with no state shown (by
    channel and template), an intent that ended otherwise by its state and attempt count."""
    key, to = fresh_key(), fresh_recipient()
    failed_key, failed_to = fresh_key(), fresh_recipient()
    await emulator.arm(failed_to, "undelivered")
    receipt = await herald.send(receipt_request(key, to))
    failed = await herald.send(receipt_request(failed_key, failed_to))
    finals = await asyncio.wait_for(asyncio.gather(herald.wait(key), herald.wait(failed_key)), 60)
    assert [f.state for f in finals] == [IntentState.DELIVERED, IntentState.UNDELIVERED]
    both = f'WorkflowId IN ("{receipt.workflow_id}", "{failed.workflow_id}") AND HeraldChannel = "sms" AND HeraldTemplate = "order_receipt.v1"'
    queries = {
        receipt.workflow_id: f"{both} AND ({delivered_quietly_query()})",
        failed.workflow_id: f'{both} AND HeraldState = "undelivered" AND HeraldAttempts = 1',
    }
    for expected, query in queries.items():
        found: list[str] = []
        for _ in range(50):  # visibility is eventually consistent
            found = [w.id async for w in herald.temporal.list_workflows(query)]
            if found:
                break
            await asyncio.sleep(0.2)
        assert found == [expected], query


async def test_reconciliation_views_name_the_awkward_cases(herald: HeraldClient, emulator: Emulator, pool) -> None:
    """The views list a refused attempt without provider id and a cancelled intent whose message was delivered."""
    refused_key, refused_to = fresh_key(), fresh_recipient()
    await emulator.arm(refused_to, "error_500", count=1)
    await herald.send(receipt_request(refused_key, refused_to))
    cancelled_key, cancelled_to = fresh_key(), fresh_recipient()
    await emulator.arm(cancelled_to, "delayed_callback", delay_seconds=2, count=1)
    await herald.send(receipt_request(cancelled_key, cancelled_to))
    await reads.eventually(lambda: emulator.messages(cancelled_to), "the message at the provider", 5, every=0.05)
    await herald.cancel(cancelled_key, reason="refunded", operator="dana")
    await asyncio.wait_for(asyncio.gather(herald.wait(refused_key), herald.wait(cancelled_key)), 60)

    without_id = await reads.tuples(pool, "SELECT number FROM attempts_without_provider_id WHERE workflow_id = %s", f"{refused_key}/sms")
    assert without_id == [(1,)]
    late = await reads.tuples(pool, "SELECT workflow_id FROM cancelled_then_delivered WHERE workflow_id = %s", f"{cancelled_key}/sms")
    assert late == [(f"{cancelled_key}/sms",)]
    state = await reads.tuples(pool, "SELECT state FROM intent_current_state WHERE workflow_id = %s", f"{cancelled_key}/sms")
    assert state == [("cancelled",)]


async def test_report_counts_key_conflicts_and_keeps_coverage_apart(herald: HeraldClient, pool) -> None:
    """A refused key reuse is counted by the report, whose coverage and delivered shares are separate numbers."""
    before = await ledger_report(pool)
    key, to = fresh_key(), fresh_recipient()
    await herald.send(receipt_request(key, to))
    with pytest.raises(IntentConflict):
        await herald.send(receipt_request(key, fresh_recipient()))
    await asyncio.wait_for(herald.wait(key), 60)
    after = await ledger_report(pool)
    assert after.key_conflicts == before.key_conflicts + 1
    assert after.intents >= before.intents + 1
    assert after.coverage_pct >= after.delivered_pct
    assert after.submit_to_accept_p50_ms is not None and after.submit_to_accept_p50_ms > 0


async def test_ledger_refuses_updates_and_deletes(
    herald: HeraldClient, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """Audit tables are append-only at the database: UPDATE, DELETE and (since migration 012) TRUNCATE
    are refused by triggers even for the owner, and the services' login may not even try, nor switch a
    trigger off or drop one (before, the services connected as a superuser that could)."""
    key = fresh_key()
    await herald.send(receipt_request(key, fresh_recipient()))
    await asyncio.wait_for(herald.wait(key), 60)  # rows exist, so the row triggers have something to refuse
    for statement in ("UPDATE transitions SET reason = 'rewritten'", "DELETE FROM observations", "TRUNCATE intents CASCADE"):
        async with owner_pool.connection() as conn:
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                await conn.execute(statement)
    for statement in (
        "UPDATE transitions SET reason = 'rewritten'",
        "DELETE FROM observations",
        "TRUNCATE receipt_inbox CASCADE",
        "ALTER TABLE intents DISABLE TRIGGER ALL",
        "DROP TRIGGER intents_append_only ON intents",
        "CREATE TABLE intruder (id int)",
    ):
        async with pool.connection() as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)
    async with pool.connection() as conn:
        user = await (await conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")).fetchone()
    assert user == ("herald_service", False)
    assert await reads.tuples(pool, "SELECT count(*) > 0 FROM intents") == [(True,)]


async def test_the_failure_query_lists_every_intent_that_ended_without_delivery(
    herald: HeraldClient, emulator: Emulator
) -> None:
    """The launcher's failure link selects undelivered and permanent failures too, not only unknown
    (before it printed HeraldState="unknown"), and never a delivered intent."""
    undelivered_key, undelivered_to = fresh_key(), fresh_recipient()
    await emulator.arm(undelivered_to, "undelivered")
    refused_key, refused_to = fresh_key(), fresh_recipient()
    await emulator.arm(refused_to, "reject", code=21211, count=1)  # Twilio's "invalid To number"
    delivered_key = fresh_key()
    await herald.send(receipt_request(undelivered_key, undelivered_to))
    await herald.send(receipt_request(refused_key, refused_to))
    await herald.send(receipt_request(delivered_key, fresh_recipient()))
    finals = await asyncio.wait_for(
        asyncio.gather(herald.wait(undelivered_key), herald.wait(refused_key), herald.wait(delivered_key)), 60
    )
    assert [f.state for f in finals] == [IntentState.UNDELIVERED, IntentState.PERMANENT_FAILURE, IntentState.DELIVERED]
    ids = [f"{key}/sms" for key in (undelivered_key, refused_key, delivered_key)]
    query = f'({not_delivered_query()}) AND WorkflowId IN ("{ids[0]}", "{ids[1]}", "{ids[2]}")'
    found: set[str] = set()
    for _ in range(50):  # visibility is eventually consistent
        found = {w.id async for w in herald.temporal.list_workflows(query)}
        if len(found) >= 2:
            break
        await asyncio.sleep(0.2)
    assert found == {ids[0], ids[1]}


async def test_policy_list_and_show_read_version_one_in_force_from_the_beginning(pool: AsyncConnectionPool, settings) -> None:
    """Version 1 is in force from '-infinity', which psycopg cannot load into a datetime: before, `starter.py
    policy list` and `policy show 1` failed with "timestamp too small" on every real ledger."""
    import os
    import subprocess
    import sys

    from herald.ledger.policy_store import policy_version, policy_versions

    assert (await policy_versions(pool))[0].effective_from is None
    assert (await policy_version(pool, 1)).effective_from is None
    env = {**os.environ, "DATABASE_URL": settings.database_url.get_secret_value()}
    for command in (["policy", "list"], ["policy", "show", "1"]):
        ran = await asyncio.to_thread(
            subprocess.run, [sys.executable, "starter.py", *command], env=env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        assert "effective from the beginning" in ran.stdout.splitlines()[0]


async def test_the_migrate_command_runs_as_the_owner_and_is_idempotent(stack) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "HERALD_MIGRATION_DATABASE_URL": stack.database_url}
    ran = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "herald.jobs.migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (ran.returncode, ran.stdout) == (0, "applied: none (up to date)\n"), ran.stderr


def test_the_services_login_works_on_a_server_that_asks_for_passwords(stack) -> None:
    """DATABASE_URL may name a real server with password authentication: the services' login then
    needs a password of its own (before, it was created without one and could not log in there).
    Shown on the session's server by making it ask one probe login for a password (pg_hba.conf)."""
    import secrets

    from herald.ledger.roles import app_database_url, ensure_app_login

    login, password = f"herald_pw_{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    url = ensure_app_login(stack.database_url, password, login)
    hba = stack.config.state_path / stack.config.postgres.data_dir / "pg_hba.conf"
    if stack._external_database_url:
        hba = None  # a real server: it asks for passwords already, or the check below proves nothing new
    original = hba.read_text() if hba else ""
    try:
        if hba:
            hba.write_text(f"local all {login} scram-sha-256\nhost all {login} 0.0.0.0/0 scram-sha-256\n" + original)
            with psycopg.connect(stack.database_url, autocommit=True) as owner:
                owner.execute("SELECT pg_reload_conf()")
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (login,)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(app_database_url(stack.database_url, "not-the-password", login)).close()
        ensure_app_login(stack.database_url, password + "x", login)  # a new state folder: a new password, set again
        with psycopg.connect(app_database_url(stack.database_url, password + "x", login)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        if hba:
            hba.write_text(original)
            with psycopg.connect(stack.database_url, autocommit=True) as owner:
                owner.execute("SELECT pg_reload_conf()")
