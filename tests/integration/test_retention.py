"""Retention against the real ledger: decided reports' raw payloads purged past the period, never
inside the 7-day floor, the reports themselves kept; provider marks deleted past theirs (migration 023),
and by nothing else.

Before migration 015 the purge took any cut-off: the services' login could replace the payload of
every decided report at once with a cut-off of now().
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.ledger.privacy import purge_inbox_payloads, purge_provider_marks
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_FINGERPRINT_KEYS

_OLD_PAYLOAD = {"ApiVersion": "2010-04-01", "MessageStatus": "delivered"}


async def _report_received_days_ago(pool: AsyncConnectionPool, days: int, *, decided: bool) -> int:
    """An inbox row received `days` ago, with a verdict when `decided`; returns its id.

    The inbox is append-only, but INSERT is what it allows: the row is written with an old
    received_at rather than waited for, as the services' login could write it.
    """
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(
            """INSERT INTO receipt_inbox
                   (provider, provider_message_id, provider_status, attempt_ref, payload, received_at)
               VALUES ('twilio', %s, 'delivered', %s, %s, now() - make_interval(days => %s)) RETURNING id""",
            ("SM" + secrets.token_hex(16), f"att_old_{secrets.token_hex(8)}", Jsonb(_OLD_PAYLOAD), days),
        )
        row = await cursor.fetchone()
        assert row is not None
        if decided:
            await conn.execute(
                "INSERT INTO receipt_outcomes (inbox_id, outcome, reason) VALUES (%s, 'ignored', 'retention test')",
                (row[0],),
            )
    return int(row[0])


async def test_inbox_retention_purges_decided_payloads_older_than_the_cut_off_and_keeps_the_rest(
    herald: HeraldClient, pool: AsyncConnectionPool
) -> None:
    """A purge at now() - 7 days (the floor) replaces the payload of a decided report received 8 days ago;
    an undecided one of the same age and the decided reports of an intent delivered just now keep theirs."""
    key = fresh_key()
    await herald.send(receipt_request(key, fresh_recipient()))
    assert (await asyncio.wait_for(herald.wait(key), 60)).state is IntentState.DELIVERED
    recent = await reads.rows(
        pool,
        """SELECT r.id FROM receipt_inbox r JOIN attempts a ON a.attempt_ref = r.attempt_ref
            WHERE a.workflow_id = %s""",
        f"{key}/sms",
    )
    assert recent
    for _ in range(100):  # the verdicts are written at the workflow's checkpoint
        outcomes = await reads.rows(
            pool, "SELECT inbox_id FROM receipt_outcomes WHERE inbox_id = ANY(%s)", [r["id"] for r in recent]
        )
        if len(outcomes) == len(recent):
            break
        await asyncio.sleep(0.1)
    assert len(outcomes) == len(recent), "the delivered intent's reports are decided"
    recent_payloads = await reads.rows(
        pool, "SELECT id, payload FROM receipt_inbox WHERE id = ANY(%s) ORDER BY id", [r["id"] for r in recent]
    )
    old_decided = await _report_received_days_ago(pool, 8, decided=True)
    old_undecided = await _report_received_days_ago(pool, 8, decided=False)

    purge = await purge_inbox_payloads(
        pool,
        older_than=datetime.now(UTC) - timedelta(days=7),
        operator="retention-job",
        reason="inbox payloads: 7 days",
    )

    assert purge.rows_affected >= 1
    assert await reads.rows(pool, "SELECT payload FROM receipt_inbox WHERE id = %s", old_decided) == [
        {"payload": {"purged": True}}
    ]
    assert await reads.rows(pool, "SELECT payload FROM receipt_inbox WHERE id = %s", old_undecided) == [
        {"payload": _OLD_PAYLOAD}
    ]
    assert (
        await reads.rows(
            pool, "SELECT id, payload FROM receipt_inbox WHERE id = ANY(%s) ORDER BY id", [r["id"] for r in recent]
        )
        == recent_payloads
    )
    assert all(row["payload"] != {"purged": True} for row in recent_payloads)
    [row] = await reads.rows(pool, "SELECT kind, rows_affected, operator FROM ledger_purges WHERE id = %s", purge.purge_id)
    assert row == {"kind": "inbox_retention", "rows_affected": purge.rows_affected, "operator": "retention-job"}


@pytest.mark.parametrize(
    "age",
    [timedelta(0), timedelta(days=1), timedelta(days=7) - timedelta(minutes=1), -timedelta(days=1)],
    ids=["now", "1-day", "a-minute-short-of-7-days", "tomorrow"],
)
async def test_a_cut_off_newer_than_7_days_ago_is_refused_naming_the_rule_and_purges_nothing(
    pool: AsyncConnectionPool, age: timedelta
) -> None:
    """The services' login cannot purge every decided payload at once: a cut-off inside the 7-day floor
    is refused (SQLSTATE 22023, naming the argument and the rule), no payload changes, no run is recorded."""
    old_decided = await _report_received_days_ago(pool, 8, decided=True)
    [before] = await reads.rows(pool, "SELECT count(*) AS runs FROM ledger_purges")

    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        await purge_inbox_payloads(
            pool, older_than=datetime.now(UTC) - age, operator="retention-job", reason="too soon"
        )

    assert refused.value.sqlstate == "22023"
    assert refused.value.diag.message_primary == (
        "older_than must be at least 7 days ago: report payloads are kept 7 days to explain verdicts"
    )
    assert await reads.rows(pool, "SELECT payload FROM receipt_inbox WHERE id = %s", old_decided) == [
        {"payload": _OLD_PAYLOAD}
    ]
    assert await reads.rows(pool, "SELECT count(*) AS runs FROM ledger_purges") == [before]


async def test_the_replaced_purge_function_is_still_security_definer_and_executable_by_herald_app_only(
    owner_pool: AsyncConnectionPool,
) -> None:
    """Migration 015 replaced the function: still SECURITY DEFINER with its search_path, EXECUTE still
    herald_app's and not PUBLIC's (CREATE OR REPLACE kept 013's grants)."""
    [function] = await reads.rows(
        owner_pool,
        """SELECT p.prosecdef, p.proconfig,
                  has_function_privilege('herald_app', p.oid, 'EXECUTE') AS services,
                  has_function_privilege('public', p.oid, 'EXECUTE') AS anyone
             FROM pg_proc p WHERE p.oid = 'purge_inbox_payloads(timestamptz, text, text)'::regprocedure""",
    )
    assert function == {
        "prosecdef": True, "proconfig": ["search_path=public, pg_temp"], "services": True, "anyone": False,
    }  # fmt: skip


async def _mark_made_days_ago(pool: AsyncConnectionPool, provider: str, days: float) -> int:
    """A provider mark dated `days` ago (the services' login may INSERT one with any time); returns its id."""
    [row] = await reads.rows(
        pool,
        """INSERT INTO provider_marks (provider, mark, attempt_ref, marked_at)
           VALUES (%s, 'unreachable', %s, now() - make_interval(secs => %s)) RETURNING id""",
        provider, f"att_mark_{secrets.token_hex(8)}", days * 86_400,
    )  # fmt: skip
    return int(row["id"])


async def test_provider_marks_past_the_cut_off_are_deleted_and_the_run_recorded(
    pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """A purge at now() - 7 days deletes marks made 8 and 30 days ago, keeps one made 6 days ago and one
    made now, and records a marks_retention run with its cut-off and count."""
    provider = f"retention_{secrets.token_hex(4)}"
    old = [await _mark_made_days_ago(pool, provider, days) for days in (30, 8)]
    kept = [await _mark_made_days_ago(pool, provider, days) for days in (6, 0)]
    purge = await purge_provider_marks(
        pool, older_than=datetime.now(UTC) - timedelta(days=7), operator="retention-job", reason="marks test"
    )
    left = await reads.rows(pool, "SELECT id FROM provider_marks WHERE provider = %s ORDER BY id", provider)
    assert [row["id"] for row in left] == kept and old[0] not in kept
    assert purge.rows_affected >= 2  # other tests' marks of that age may go with them
    [run] = await reads.rows(owner_pool, "SELECT kind, rows_affected, operator FROM ledger_purges WHERE id = %s",
                             purge.purge_id)  # fmt: skip
    assert run == {"kind": "marks_retention", "rows_affected": purge.rows_affected, "operator": "retention-job"}


async def test_provider_marks_are_deleted_by_the_purge_alone_and_never_inside_the_floor(
    pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool
) -> None:
    """A cut-off inside 7 days is refused naming the rule (SQLSTATE 22023) and deletes nothing; the
    services' login cannot DELETE a mark, and the ledger's owner is refused by the append-only trigger
    even for a mark older than the floor."""
    provider = f"retention_{secrets.token_hex(4)}"
    old = await _mark_made_days_ago(pool, provider, 10)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        await purge_provider_marks(pool, older_than=datetime.now(UTC) - timedelta(days=6), operator="o", reason="r")
    assert refused.value.diag.message_primary == (
        "older_than must be at least 7 days ago: provider marks are kept 7 days to explain route decisions"
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        await reads.rows(pool, "DELETE FROM provider_marks WHERE id = %s RETURNING id", old)
    with pytest.raises(psycopg.errors.RaiseException, match="ledger table provider_marks is append-only"):
        await reads.rows(owner_pool, "DELETE FROM provider_marks WHERE id = %s RETURNING id", old)
    assert await reads.rows(pool, "SELECT id FROM provider_marks WHERE id = %s", old) == [{"id": old}]


def test_the_retention_job_runs_as_a_command_and_refuses_a_bad_period(settings: Any) -> None:
    """30 days purges and says how many; a period that is not a number, or one inside the ledger's 7-day
    floor, is one line naming --inbox-days (no traceback), and exactly 7 days is accepted."""
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url.get_secret_value(),
        # The stack's fingerprint key, as every Herald process of the session is given it.
        "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
    }
    command = [sys.executable, "-m", "herald.jobs.retention", "--operator", "test"]
    ran = subprocess.run(
        [*command, "--inbox-days", "30"], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("purged ") and "ledger_purges id" in ran.stdout
    refused = subprocess.run(
        [*command, "--inbox-days", "٣"], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert "--inbox-days: must be a whole number of days" in refused.stderr and "Traceback" not in refused.stderr
    for days in ("0", "6"):  # inside the ledger's 7-day floor: one line naming the option and the rule
        too_soon = subprocess.run(
            [*command, "--inbox-days", days], check=False, env=env, capture_output=True, text=True, timeout=60
        )
        assert too_soon.returncode == 2, too_soon.stderr
        assert too_soon.stdout == "" and too_soon.stderr == (
            "error: --inbox-days: older_than must be at least 7 days ago: "
            "report payloads are kept 7 days to explain verdicts\n"
        )
    seven = subprocess.run(
        [*command, "--inbox-days", "7"], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert seven.returncode == 0, seven.stderr
    both = subprocess.run(
        [*command, "--inbox-days", "30", "--marks-days", "30"], check=False, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert both.returncode == 0, both.stderr
    inbox_line, marks_line = both.stdout.splitlines()
    assert inbox_line.startswith("purged ") and marks_line.startswith("deleted ") and "provider mark(s)" in marks_line
    marks_too_soon = subprocess.run(
        [*command, "--inbox-days", "30", "--marks-days", "6"], check=False, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert marks_too_soon.returncode == 2 and marks_too_soon.stderr == (
        "error: --marks-days: older_than must be at least 7 days ago: "
        "provider marks are kept 7 days to explain route decisions\n"
    )
