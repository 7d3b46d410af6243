"""`starter.py suppression list` shows an operator what a recipient's suppression rests on: their
requests (STOP, START, HELP), the providers' evidence (Twilio 21610), the lifts, and whether each
suppresses now, as the policy gate reads them; the number itself is never printed."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.recipients import short
from herald.ledger.policy_store import lift_suppression
from herald.ledger.recipient_requests import RecipientRequest, record_requests
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import Emulator

REPO_ROOT = Path(__file__).resolve().parents[2]


async def suppression_list(stack: Any, *args: str) -> str:
    """Run the command against the stack (a subprocess the loop waits on); its stdout, exit 0 asserted."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "starter.py", "suppression", "list", *args, cwd=REPO_ROOT,
        env={**os.environ, **stack.config.service_env(stack.database_url)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert (process.returncode, err.decode()) == (0, ""), err.decode()
    return out.decode()


async def reply(pool: AsyncConnectionPool, to: str, request: str, keyword: str) -> None:
    async with pool.connection() as conn:
        await record_requests(
            conn,
            [RecipientRequest(
                fingerprint=SESSION_KEYRING.recipient(to), channel="sms", request=request, source="inbound_keyword",
                detail=f"keyword {keyword}", source_ref=f"SM{secrets.token_hex(16)}", requested_at=datetime.now(UTC),
            )],
        )  # fmt: skip


async def test_the_list_names_each_request_and_report_and_what_suppresses_now(
    stack: Any, herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    """A 21610 lifted by an operator, then STOP and HELP: STOP suppresses every category now, the
    21610 is shown lifted, HELP recorded only; after START nothing suppresses and STOP reads lifted."""
    to = fresh_recipient()
    await emulator.arm(to, "reject", code=21610, count=1)
    key = fresh_key()
    await herald.send(receipt_request(key, to))
    assert (await asyncio.wait_for(herald.wait(key), 60)).state is IntentState.PERMANENT_FAILURE
    await lift_suppression(
        pool, fingerprint=SESSION_KEYRING.recipient(to), channel="sms", operator="alice", reason="asked"
    )
    await reply(pool, to, "opt_out", "STOP")
    await reply(pool, to, "help", "HELP")

    listed = await suppression_list(stack, to)
    assert to not in listed and to.lstrip("+") not in listed
    assert listed.startswith(f"recipient fingerprint {short(SESSION_KEYRING.recipient(to))}, channel sms")
    assert "now: transactional suppressed by opt_out (keyword STOP)" in listed
    assert "now: marketing suppressed by opt_out (keyword STOP)" in listed
    lines = listed.splitlines()
    assert any(
        "opt_out  inbound_keyword: keyword STOP  -> suppresses transactional, account, marketing" in line
        for line in lines
    )
    assert any("help  inbound_keyword: keyword HELP  -> recorded only" in line for line in lines)
    assert any("opt_out  provider report: Twilio 21610  -> lifted at" in line for line in lines)
    assert any("by alice: asked" in line for line in lines)

    await reply(pool, to, "opt_in", "START")
    listed = await suppression_list(stack, to, "--channel", "sms")
    assert "now: not suppressed" in listed
    assert any("keyword STOP  -> lifted at" in line for line in listed.splitlines())
    assert any(
        "opt_in  inbound_keyword: keyword START  -> lifts what came before it" in line for line in listed.splitlines()
    )
