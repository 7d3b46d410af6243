"""Erasure against the real ledger: personal data destroyed, the audit trail kept (retention: test_retention.py).

Before migration 013 nothing could be purged or erased: the audit tables refuse UPDATE and DELETE,
so an erasure request had no answer and an inbox payload lived forever.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.artifacts import ArtifactRefused
from herald.core.lifecycle import IntentState
from herald.core.recipients import short
from herald.core.send_policy import Category
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.policy_store import standing
from herald.ledger.privacy import erase_recipient
from tests import reads
from tests.intents import email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_FINGERPRINT_KEYS, SESSION_KEYRING
from tests.stack import Emulator


async def _ledger_tables(pool: AsyncConnectionPool) -> list[str]:
    rows = await reads.rows(
        pool, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"
    )
    return sorted(row["tablename"] for row in rows)


async def test_erasing_a_recipient_destroys_their_data_and_keeps_states_times_reasons_and_their_opt_out(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    opted_out, later = fresh_key(), fresh_key()
    await emulator.arm(to, "reject", code=21610, count=1)  # the recipient opted out (STOP)
    await herald.send(receipt_request(opted_out, to))
    assert (await asyncio.wait_for(herald.wait(opted_out), 60)).state is IntentState.PERMANENT_FAILURE
    await herald.send(receipt_request(later, to))
    assert (await asyncio.wait_for(herald.wait(later), 60)).state.is_terminal
    ids = [f"{opted_out}/sms", f"{later}/sms"]
    before = await reads.rows(owner_pool, "SELECT * FROM intents WHERE workflow_id = ANY(%s) ORDER BY workflow_id", ids)
    transitions_before = await reads.rows(pool, "SELECT * FROM transitions WHERE workflow_id = ANY(%s) ORDER BY workflow_id, seq", ids)
    bodies = {row["body"] for row in before}
    assert all(len(body) > 20 for body in bodies)

    erasure = await erase_recipient(
        pool, recipient=to, operator="dpo", reason="erasure request 42", keyring=SESSION_KEYRING
    )

    assert erasure.rows_affected == 2
    assert erasure.recipient_fingerprint == SESSION_KEYRING.recipient(to)
    # The number is nowhere in the ledger; the bodies are gone from these intents (other tests'
    # intents render the same template with the same data, so a body is not unique to this recipient).
    for table in await _ledger_tables(owner_pool):
        hits = await reads.rows(owner_pool, f"SELECT count(*) AS n FROM {table} t WHERE t::text LIKE %s", f"%{to}%")
        assert hits == [{"n": 0}], f"{table} still holds the recipient"
    for row in await reads.rows(owner_pool, "SELECT t::text AS whole FROM intents t WHERE workflow_id = ANY(%s)", ids):
        assert not any(body in row["whole"] for body in bodies)
    # What stays: the rows, their keys, hashes, times and every transition.
    after = await reads.rows(owner_pool, "SELECT * FROM intents WHERE workflow_id = ANY(%s) ORDER BY workflow_id", ids)
    personal = {"recipient", "render_data", "body", "subject"}
    assert [{k: v for k, v in row.items() if k not in personal} for row in after] == [
        {k: v for k, v in row.items() if k not in personal} for row in before
    ]
    assert {(row["recipient"], row["body"]) for row in after} == {("(erased)", "")}
    assert await reads.rows(pool, "SELECT * FROM transitions WHERE workflow_id = ANY(%s) ORDER BY workflow_id, seq", ids) == transitions_before
    [purge] = await reads.rows(pool, "SELECT * FROM ledger_purges WHERE id = %s", erasure.purge_id)
    assert (purge["kind"], purge["recipient_fingerprint"], purge["rows_affected"], purge["operator"]) == (
        "erasure", SESSION_KEYRING.recipient(to), 2, "dpo",
    )  # fmt: skip
    # The opt-out outlives the erasure: the policy gate still sees it, by fingerprint.
    async with pool.connection() as conn:
        now = await standing(
            conn,
            at=datetime.now(UTC),
            recipient=to,
            channel="sms",
            category=Category.TRANSACTIONAL,
            workflow_id="x",
            fps=SESSION_KEYRING.recipient_candidates(to),
        )
    assert [cause for cause, _, _ in now.suppressions] == ["opt_out"]


async def test_only_the_erasure_function_can_overwrite_personal_data_and_only_with_its_markers(
    herald: HeraldClient, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    key = fresh_key()
    await herald.send(receipt_request(key, fresh_recipient()))
    await asyncio.wait_for(herald.wait(key), 60)
    workflow_id = f"{key}/sms"
    async with pool.connection() as conn:  # the services' login, setting the flag itself
        await conn.execute("SET herald.redacting = 'on'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("UPDATE intents SET recipient = '(erased)' WHERE workflow_id = %s", (workflow_id,))
    for change in ("recipient = '+15550000000'", "business_key = 'rewritten'", "body = '', recipient = '(erased)', render_data = '{}', subject = NULL, template_version = 9"):
        async with owner_pool.connection() as conn:
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                async with conn.transaction():
                    await conn.execute("SELECT set_config('herald.redacting', 'on', true)")
                    await conn.execute(f"UPDATE intents SET {change} WHERE workflow_id = %s", (workflow_id,))


async def test_starter_erase_answers_an_erasure_request_and_refuses_a_bad_recipient_without_echoing_it(
    herald: HeraldClient, settings: Any, pool: AsyncConnectionPool, stack: Any
) -> None:
    import os
    import re
    import subprocess
    import sys

    to = fresh_recipient()
    key = fresh_key()
    await herald.send(receipt_request(key, to))
    await asyncio.wait_for(herald.wait(key), 60)
    env = {
        **os.environ,
        # The session's Temporal too: erase deletes the intent's executions (tests/integration/test_erasure_reach.py).
        **stack.config.service_env(stack.database_url),
        "DATABASE_URL": settings.database_url.get_secret_value(),
        # The stack's fingerprint key: the erasure must find what the stack's clients fingerprinted.
        "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
        "HERALD_OUTBOX_DATABASE_URL": "",  # no outbox: the command says so in its own line
    }
    command = [sys.executable, "starter.py", "erase", "--operator", "dpo", "--reason", "request 7"]
    # A run that closed a moment ago takes the server about 30 s to delete (herald/temporal/erasure.py).
    ran = await asyncio.to_thread(subprocess.run, [*command, to], env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    outbox_line, temporal_line, ledger_line = ran.stdout.splitlines()
    assert outbox_line == "outbox: not configured (HERALD_OUTBOX_DATABASE_URL unset)"
    assert re.match(r"temporal: [1-9][0-9]* run\(s\) of 1 intent\(s\) deleted, verified gone$", temporal_line), temporal_line
    assert ledger_line.startswith("ledger: erased 1 intent(s) of recipient fingerprint ") and to not in ran.stdout
    assert await reads.rows(pool, "SELECT recipient FROM intents WHERE workflow_id = %s", f"{key}/sms") == [{"recipient": "(erased)"}]
    bad = "+1555ABC"
    refused = await asyncio.to_thread(subprocess.run, [*command, bad], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "RECIPIENT" in refused.stderr and bad not in refused.stderr


async def test_erasing_an_address_reaches_every_spelling_of_it_and_the_status_prefix_is_keyed(
    herald: HeraldClient, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """The review erased mixed.case@example.com and 0 intents sent to Mixed.Case@Example.COM went;
    and the status view's 16-hex prefix was a plain SHA-256's (a number came back by brute force)."""
    address = fresh_address()  # member.<hex>@example.com
    local, domain = address.split("@")
    shouted = f"{local.upper()}@{domain.title()}"
    quiet, loud = fresh_key(), fresh_key()
    await herald.send(email_request(quiet, address))
    await herald.send(email_request(loud, shouted))
    for key in (quiet, loud):
        status = await asyncio.wait_for(herald.wait(key, "email"), 60)
        assert status.state.is_terminal
        assert status.destination_fingerprint == short(SESSION_KEYRING.recipient(address))
        assert status.destination_fingerprint != hashlib.sha256(address.encode()).hexdigest()[:16]
    ids = [f"{quiet}/email", f"{loud}/email"]
    stored = await reads.rows(owner_pool, "SELECT recipient FROM intents WHERE workflow_id = ANY(%s) ORDER BY recipient", ids)
    assert {row["recipient"].lower() for row in stored} == {address}  # as given, two spellings
    assert len({row["recipient"] for row in stored}) == 2

    erasure = await erase_recipient(
        pool, recipient=f"{local.title()}@{domain.upper()}", operator="dpo", reason="r 9", keyring=SESSION_KEYRING
    )

    assert erasure.rows_affected == 2
    after = await reads.rows(owner_pool, "SELECT recipient, body FROM intents WHERE workflow_id = ANY(%s)", ids)
    assert after == [{"recipient": "(erased)", "body": ""}] * 2


async def test_an_erased_recipients_own_attachment_goes_and_one_another_recipient_was_sent_stays(
    herald: HeraldClient, pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """A report addressed to the person is their data; the same bytes sent to someone else are not
    erased from under that person's intent."""
    store = PostgresArtifactStore(pool)
    stored_bytes = b"%PDF-1.4\n" + secrets.token_bytes(2_000)
    theirs = await store.put(stored_bytes, media_type="application/pdf", filename="anna-2026-11.pdf")
    shared = await store.put(b"%PDF-1.4\n" + secrets.token_bytes(2_000), media_type="application/pdf", filename="terms.pdf")
    erased_person, other_person = fresh_address(), fresh_address()
    sends = [(fresh_key(), erased_person, theirs), (fresh_key(), erased_person, shared), (fresh_key(), other_person, shared)]
    for key, to, ref in sends:
        await herald.send(email_request(key, to, template_id="monthly_report", attachment=ref.model_dump(),
                                        render_data={"seller_name": "Acme", "period": "2026-11"}))  # fmt: skip
    for key, _, _ in sends:
        assert (await asyncio.wait_for(herald.wait(key, "email"), 60)).state.is_terminal

    erasure = await erase_recipient(
        pool, recipient=erased_person, operator="dpo", reason="r 10", keyring=SESSION_KEYRING
    )

    assert (erasure.rows_affected, erasure.artifacts_erased) == (2, 1)
    rows = await reads.rows(owner_pool, "SELECT sha256, size_bytes, filename, octet_length(content) AS n FROM artifacts "
                                   "WHERE sha256 = ANY(%s) ORDER BY filename", [theirs.sha256, shared.sha256])  # fmt: skip
    assert rows == [
        {"sha256": theirs.sha256, "size_bytes": 0, "filename": "(erased)", "n": 0},
        {"sha256": shared.sha256, "size_bytes": shared.size_bytes, "filename": "terms.pdf", "n": shared.size_bytes},
    ]
    # The erased bytes cannot come back under their key (an intent would send an empty file)...
    with pytest.raises(ArtifactRefused) as refused:
        await store.put(stored_bytes, media_type="application/pdf", filename="again.pdf")
    assert refused.value.field == "content"
    # ...and nothing else may blank an artifact: the services' login cannot, the owner only through erasure.
    async with owner_pool.connection() as conn:
        with pytest.raises(psycopg.errors.RaiseException):
            await conn.execute("UPDATE artifacts SET filename = '(erased)' WHERE sha256 = %s", (shared.sha256,))
