"""Erasure reaches every copy Herald wrote: the service's outbox and Temporal, not only the ledger.

Before, `starter.py erase` overwrote the ledger's intents and nothing else: the number stayed in
the service's `herald_outbox` row, and every run of the intent's workflow kept it in its history
(encrypted, but decoded by anyone holding the codec key). Real stack: Temporal dev server, worker,
emulator, PostgreSQL with an outbox database of the test's own, reached with the relay's login as
the command is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from devstack.stack import LocalStack
from herald import outbox
from herald.cli.erase import cmd_erase
from herald.cli.parser import parse_args
from herald.client import HeraldClient
from herald.intake.notice import NoticeRequest
from herald.ledger.store import open_pool
from herald.outbox.erasure import ERASED_NOTICE, erase_outbox_notices
from herald.outbox.relay import OutboxRelay
from herald.privacy.payload_codec import decode_in_place
from herald.runtime.process import ProcessRuntime
from herald.temporal.client import payload_codec
from herald.temporal.erasure import erase_executions
from tests import reads
from tests.intents import fresh_address, fresh_key, fresh_recipient
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator, create_outbox_database

WAIT = 90
ORDER = {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
# The intent polls a message that never settles, continues as new (the stack suggests it after
# 40 events), and ends unknown at the horizon: a closed intent of several runs.
SEVERAL_RUNS = TEST_POLICY.model_copy(
    update={"resolution_horizon": timedelta(seconds=12), "poll_max": timedelta(seconds=1)}
)


def sms_notice(key: str, to: str, **data: str) -> dict[str, Any]:
    return {"business_key": key, "channels": [
        {"channel": "sms", "recipient": to, "template_id": "order_receipt", "template_version": 1,
         "render_data": {**ORDER, **data}},
    ]}  # fmt: skip


def email_entry(to: str) -> dict[str, Any]:
    return {"channel": "email", "recipient": to, "template_id": "order_receipt_email", "template_version": 1,
            "render_data": {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}}  # fmt: skip


@pytest.fixture(scope="module")
async def outbox_db(stack: LocalStack, settings: Any) -> tuple[str, str]:
    """A service database of this module's own with herald_outbox: (the owner's URL, the relay login's URL)."""
    stack.create_service_database()  # makes the relay's login (and its role) on this server
    owner_url = await create_outbox_database(stack.database_url, "erasure_service")
    relay_url = make_conninfo(
        settings.outbox.database_url.get_secret_value(), dbname=psycopg.conninfo.conninfo_to_dict(owner_url)["dbname"]
    )
    return owner_url, relay_url


@pytest.fixture(scope="module")
async def owner_outbox(outbox_db: tuple[str, str]) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(outbox_db[0], max_size=2) as pool:
        yield pool


@pytest.fixture(scope="module")
async def relay_outbox(outbox_db: tuple[str, str]) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(outbox_db[1], max_size=2) as pool:
        yield pool


async def _enqueue(pool: AsyncConnectionPool, notice: dict[str, Any]) -> int:
    async with pool.connection() as conn, conn.transaction():
        return await outbox.enqueue(conn, notice)


async def _rows(pool: AsyncConnectionPool, ids: list[int]) -> dict[int, dict[str, Any]]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT id, notice, notice::text AS text, state, last_error, relayed_at FROM herald_outbox WHERE id = ANY(%s)",
            (ids,),
        )
        return {row["id"]: row for row in await cursor.fetchall()}


class _RecordingStarts:
    """Stands in for HeraldClient.send_notice in a relay pass: which notices a relay would start."""

    def __init__(self, during_start: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.started: list[str] = []
        self._during_start = during_start

    async def send_notice(self, notice: NoticeRequest) -> None:
        self.started.append(notice.business_key)
        if self._during_start is not None:
            await self._during_start(notice.business_key)


async def _runs(temporal: Client, workflow_id: str) -> list[str]:
    return [execution.run_id async for execution in temporal.list_workflows(f'WorkflowId = "{workflow_id}"')]


async def _decoded_history(temporal: Client, settings: Any, workflow_id: str, run_id: str) -> bytes:
    """A run's history as the codec server would show it: every payload decrypted."""
    history = await temporal.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    await decode_in_place(history.events, payload_codec(settings.temporal.codec))
    return b"".join(event.SerializeToString() for event in history.events)


async def _not_found(call: Awaitable[Any]) -> bool:
    try:
        await call
    except RPCError as error:
        return error.status is RPCStatusCode.NOT_FOUND
    return False


async def test_erase_replaces_the_outbox_notices_deletes_every_run_and_leaves_another_recipient_alone(
    herald: HeraldClient, temporal: Client, settings: Any, emulator: Emulator, pool: AsyncConnectionPool,
    outbox_db: tuple[str, str], owner_outbox: AsyncConnectionPool, relay_outbox: AsyncConnectionPool,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """After `starter.py erase +1555...`, the outbox rows naming the number hold the marker (a pending one
    refused and never relayed), every run of its intent is gone from Temporal, and another person's
    outbox rows and intent, including one whose text mentions the number, are as they were."""
    to, other = fresh_recipient(), fresh_recipient()
    key, other_key = fresh_key(), fresh_key()
    await emulator.arm(to, "silent")
    # Clients without the ledger's recipient vault, so the histories carry the numbers under the codec
    # key alone (as any client without a vault writes them, and every history from before sealing).
    several_runs = HeraldClient(temporal, settings.temporal.task_queue, policy=SEVERAL_RUNS, keyring=SESSION_KEYRING)
    plain = HeraldClient(temporal, settings.temporal.task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING)
    await several_runs.send(sms_notice(key, to)["channels"][0] | {"business_key": key})
    await plain.send(sms_notice(other_key, other)["channels"][0] | {"business_key": other_key})
    pending = await _enqueue(owner_outbox, sms_notice(fresh_key(), to))
    relayed = await _enqueue(owner_outbox, sms_notice(fresh_key(), to))
    async with owner_outbox.connection() as conn:
        await conn.execute("UPDATE herald_outbox SET state = 'relayed', relayed_at = now() WHERE id = %s", (relayed,))
    # Another person's rows: one of them mentions the number in its text, which is not its recipient.
    others = [
        await _enqueue(owner_outbox, sms_notice(fresh_key(), other)),
        await _enqueue(owner_outbox, sms_notice(fresh_key(), other, merchant=f"Shop, call {to}")),
    ]
    await asyncio.wait_for(several_runs.wait(key), WAIT)
    await asyncio.wait_for(plain.wait(other_key), WAIT)
    workflow_id, other_id = f"{key}/sms", f"{other_key}/sms"
    runs = await _runs(temporal, workflow_id)
    other_runs = await _runs(temporal, other_id)
    assert len(runs) >= 2, "the intent should span several runs (continue-as-new)"
    # The erasure has something to remove: every run's decoded history names the number.
    for run_id in runs:
        assert to.encode() in await _decoded_history(temporal, settings, workflow_id, run_id)
    others_before = await _rows(owner_outbox, others)
    assert to in others_before[others[1]]["text"]

    command = settings.model_copy(update={"outbox": settings.outbox.model_copy(update={"database_url": SecretStr(outbox_db[1])})})
    runtime = ProcessRuntime(command, own_temporal_runtime=True)
    try:
        code = await cmd_erase(
            parse_args(["erase", to, "--operator", "dpo", "--reason", "erasure request 9"]), runtime
        )
    finally:
        runtime.close()
    out = capsys.readouterr().out

    assert code == 0, out
    assert to not in out
    lines = out.splitlines()
    assert (
        lines[0]
        == "outbox: 2 notice(s) addressed to them replaced by the erased marker (1 not yet relayed: refused, never to be relayed)"
    )
    assert lines[1].startswith(f"temporal: {len(runs)} run(s) of 1 intent(s) deleted, verified gone"), lines[1]
    assert lines[2].startswith("ledger: erased 1 intent(s) of recipient fingerprint ")
    # The outbox: the marker, and nothing of the number; the pending row refused, the relayed one kept relayed.
    after = await _rows(owner_outbox, [pending, relayed])
    assert [after[i]["notice"] for i in (pending, relayed)] == [ERASED_NOTICE, ERASED_NOTICE]
    assert (after[pending]["state"], after[relayed]["state"]) == ("refused", "relayed")
    assert after[pending]["last_error"].startswith("erased: ") and after[relayed]["relayed_at"] is not None
    assert await _rows(owner_outbox, others) == others_before
    # Never relayed: a relay pass (as the relay's login) starts the other person's pending row, not this one.
    starts = _RecordingStarts()
    await OutboxRelay(relay_outbox, starts).relay_once()  # type: ignore[arg-type]
    assert (await _rows(owner_outbox, [pending]))[pending]["state"] == "refused"
    assert {row["notice"]["business_key"] for row in others_before.values()} <= set(starts.started)
    # Temporal: every run gone from mutable state, history and visibility.
    handle = temporal.get_workflow_handle
    for run_id in runs:
        assert await _not_found(handle(workflow_id, run_id=run_id).describe())
        assert await _not_found(handle(workflow_id, run_id=run_id).fetch_history(skip_archival=True))
    assert await _runs(temporal, workflow_id) == []
    # The other intent is untouched, and its history still decodes.
    assert await _runs(temporal, other_id) == other_runs
    assert (await handle(other_id).describe()).status is WorkflowExecutionStatus.COMPLETED
    assert other.encode() in await _decoded_history(temporal, settings, other_id, other_runs[0])
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT workflow_id, recipient FROM intents WHERE workflow_id = ANY(%s) ORDER BY workflow_id = %s",
            ([workflow_id, other_id], workflow_id),
        )
        assert await cursor.fetchall() == [(other_id, other), (workflow_id, "(erased)")]


async def test_a_parked_intent_is_cancelled_through_herald_then_deleted(
    herald: HeraldClient, temporal: Client, settings: Any, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    """An intent waiting out a provider's Retry-After is asked to cancel (Herald's update), closes as
    cancelled by the operator, and only then is deleted; nothing reached the provider."""
    to, key = fresh_recipient(), fresh_key()
    await emulator.arm(to, "rate_limit", retry_after=600)
    parked = HeraldClient(
        temporal,
        settings.temporal.task_queue,
        policy=TEST_POLICY.model_copy(update={"retry_after_cap": timedelta(minutes=15)}), keyring=SESSION_KEYRING,
    )
    await parked.send(sms_notice(key, to)["channels"][0] | {"business_key": key})

    async def waiting_out_retry_after() -> bool:
        status = await parked.status(key)
        return bool(status.attempts) and status.attempts[-1].retry_delay_seconds is not None

    await reads.eventually(waiting_out_retry_after, "the intent to park on the Retry-After", 30)
    workflow_id = f"{key}/sms"
    runs = await _runs(temporal, workflow_id)

    done = await erase_executions(
        temporal, [workflow_id], operator="dpo", reason="request 10", close_within=timedelta(seconds=20)
    )

    assert done.cancel_requested == (workflow_id,) and done.still_running == () and done.unverified == ()
    assert {run.run_id for run in done.deleted} >= set(runs) and done.complete
    assert await _not_found(temporal.get_workflow_handle(workflow_id).describe())
    async with pool.connection() as conn:  # the ledger, which outlives Temporal, says how it closed
        cursor = await conn.execute(
            "SELECT to_state, source, reason FROM transitions WHERE workflow_id = %s ORDER BY seq DESC LIMIT 1",
            (workflow_id,),
        )
        assert await cursor.fetchone() == ("cancelled", "operator", "cancelled by dpo: erasure: request 10")
    assert await emulator.messages(to) == []


async def test_an_intent_still_tracking_its_message_is_reported_never_terminated_and_deleted_on_a_later_run(
    herald: HeraldClient, temporal: Client, settings: Any, emulator: Emulator
) -> None:
    """An intent whose message the provider already accepted keeps tracking it after the cancel: past the
    bound it is reported still running, left running (not terminated, not deleted); erasing again after
    it closed on its own deletes every run."""
    to, key = fresh_recipient(), fresh_key()
    await emulator.arm(to, "silent")
    tracking = HeraldClient(
        temporal,
        settings.temporal.task_queue,
        policy=SEVERAL_RUNS.model_copy(update={"resolution_horizon": timedelta(seconds=15)}), keyring=SESSION_KEYRING,
    )
    await tracking.send(sms_notice(key, to)["channels"][0] | {"business_key": key})

    async def accepted() -> bool:
        status = await tracking.status(key)
        return bool(status.attempts) and status.attempts[-1].provider_id is not None

    await reads.eventually(accepted, "the provider to accept the message", 30)
    workflow_id = f"{key}/sms"

    first = await erase_executions(
        temporal, [workflow_id], operator="dpo", reason="request 11", close_within=timedelta(seconds=1)
    )

    assert first.still_running == (workflow_id,) and first.cancel_requested == (workflow_id,) and not first.complete
    running = await temporal.get_workflow_handle(workflow_id).describe()
    assert running.status is WorkflowExecutionStatus.RUNNING  # not terminated
    await asyncio.wait_for(tracking.wait(key), WAIT)  # it closes on its own, at its horizon
    closed = await temporal.get_workflow_handle(workflow_id).describe()
    assert closed.status is WorkflowExecutionStatus.COMPLETED
    remaining = await _runs(temporal, workflow_id)

    again = await erase_executions(temporal, [workflow_id], operator="dpo", reason="request 11")

    assert again.complete and again.cancel_requested == () and {run.run_id for run in again.deleted} == set(remaining)
    assert await _runs(temporal, workflow_id) == []
    assert len(await emulator.messages(to)) == 1  # one message, as sent before the erasure


async def test_outbox_erasure_matches_every_spelling_of_an_address_and_nothing_else(
    outbox_db: tuple[str, str], owner_outbox: AsyncConnectionPool, relay_outbox: AsyncConnectionPool
) -> None:
    """As the relay's login: a notice to Mixed.Case@EXAMPLE.com is erased for mixed.case@example.com (both
    channels of it, its intent named for the e-mail channel only), a longer address that contains it and
    a row whose text merely quotes it are kept."""
    address = fresh_address()
    local, _, domain = address.partition("@")
    spelled = f"{local.title()}@{domain.upper()}"
    key = fresh_key()
    both = await _enqueue(owner_outbox, {"business_key": key, "channels": [
        sms_notice(key, fresh_recipient())["channels"][0], email_entry(spelled)]})  # fmt: skip
    longer = await _enqueue(owner_outbox, {"business_key": fresh_key(), "channels": [email_entry("x" + address)]})
    quoting = await _enqueue(owner_outbox, sms_notice(fresh_key(), fresh_recipient(), merchant=f"Shop {address}"))
    async with owner_outbox.connection() as conn:  # written by hand: not an address at all, and a stray type
        cursor = await conn.execute(
            "INSERT INTO herald_outbox (business_key, notice) VALUES ('junk', %s), ('junk', %s) RETURNING id",
            (
                Jsonb({"channels": [{"recipient": "@@@"}, {"recipient": 42}]}),
                Jsonb({"channels": {"recipient": address}}),
            ),
        )
        junk = [row[0] for row in await cursor.fetchall()]
    kept_before = await _rows(owner_outbox, [longer, quoting, *junk])

    done = await erase_outbox_notices(relay_outbox, address)

    assert (done.rows_erased, done.never_relayed, done.workflow_ids) == (1, 1, (f"{key}/email",))
    assert (await _rows(owner_outbox, [both]))[both]["notice"] == ERASED_NOTICE
    assert await _rows(owner_outbox, [longer, quoting, *junk]) == kept_before
    again = await erase_outbox_notices(relay_outbox, address)
    assert again.rows_erased == 0  # idempotent: the marker names no one


async def test_a_row_erased_while_a_relay_starts_it_stays_refused_and_names_its_intent(
    owner_outbox: AsyncConnectionPool, relay_outbox: AsyncConnectionPool
) -> None:
    """A relay claimed the row and is starting it from the copy it read when the erasure runs: the erasure
    says how long that claim has left and which intent it may start, and the relay's mark leaves the row
    refused instead of marking it relayed."""
    to, key = fresh_recipient(), fresh_key()
    row = await _enqueue(owner_outbox, sms_notice(key, to))
    erased: list[Any] = []

    async def erase_while_starting(started: str) -> None:
        if started == key:
            erased.append(await erase_outbox_notices(relay_outbox, to))

    starts = _RecordingStarts(during_start=erase_while_starting)
    await OutboxRelay(relay_outbox, starts, batch=1000).relay_once()  # type: ignore[arg-type]

    assert key in starts.started
    [done] = erased
    assert done.workflow_ids == (f"{key}/sms",) and done.never_relayed == 1 and 25 < done.claim_seconds_left <= 30
    after = (await _rows(owner_outbox, [row]))[row]
    assert (after["state"], after["notice"]) == ("refused", ERASED_NOTICE)


async def test_the_relay_login_may_erase_but_still_not_rewrite_a_notice(outbox_db: tuple[str, str]) -> None:
    """The erase function is the relay login's only way to touch a notice: a direct UPDATE of it is refused."""
    async with await psycopg.AsyncConnection.connect(outbox_db[1], autocommit=True) as conn:
        await conn.execute("SELECT * FROM herald_outbox_erase(ARRAY['+15550000000'])")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute("UPDATE herald_outbox SET notice = %s", (Jsonb({"erased": True}),))
