"""One SMS intent end to end through the real Temporal, PostgreSQL, emulator and receipt server."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from bench.actions import billable_actions
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.intent import workflow_id_for
from herald.core.lifecycle import IntentState
from herald.intake.errors import IntentConflict, InvalidIntent
from herald.ledger.history import intent_history
from herald.providers.twilio_signature import compute_signature
from herald.temporal.client import connect
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY, Emulator

WAIT = 60


async def _inbox_rows(pool: AsyncConnectionPool, provider_message_id: str) -> list[tuple]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT r.provider_status, o.outcome, o.reason FROM receipt_inbox r
                 LEFT JOIN receipt_outcomes o ON o.inbox_id = r.id
                WHERE r.provider_message_id = %s ORDER BY r.id""",
            (provider_message_id,),
        )
        return await cursor.fetchall()


async def test_happy_path_is_delivered_by_report(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """An intent is accepted, then delivered by the provider's report, and the ledger shows each step in order."""
    key, to = fresh_key(), fresh_recipient()
    receipt = await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    assert len(messages) == 1
    history = await intent_history(pool, receipt.workflow_id)
    assert [(t.from_state, t.to_state) for t in history.transitions] == [
        ("pending", "submitting"),
        ("submitting", "accepted"),
        ("accepted", "delivered"),
    ]
    assert history.transitions[-1].source == "report"
    assert [t.seq for t in history.transitions] == [1, 2, 3]
    assert [a.number for a in history.attempts] == [1]
    # The body sent is the body rendered once at intent creation.
    assert messages[0]["body"] == "Herald Shop: payment of 42.50 EUR for order ord_84721 received. Thank you."
    inbox = await reads.eventually(lambda: _inbox_rows(pool, messages[0]["sid"]), "the reports in the inbox", 15)
    assert sorted(status for status, _, _ in inbox) == ["delivered", "sent"]


async def test_happy_path_costs_one_signal_and_at_most_five_billed_actions(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    """Both reports (sent, delivered) reach the workflow in one signal; the run bills 4 or 5 actions.

    Counted from the workflow's own history by Temporal Cloud's rules (bench/actions.py): start,
    submit, one signal, one write at the close, and the first poll's timer unless the final report
    was in before the submit's answer was processed. No search-attribute upsert: a straight
    delivery shows no state (herald.temporal.workflow_api.initial_search_attributes). The send policy's
    dispatch order costs nothing here: the client has the ledger and read it at start.
    """
    key, to = fresh_key(), fresh_recipient()
    # The production poll schedule (first poll after 30 s), so a slow machine cannot turn the
    # happy path into a polled one: the reports are the only way this intent finishes.
    policy = TEST_POLICY.model_copy(update={"poll_initial": timedelta(seconds=30), "poll_max": timedelta(seconds=30)})
    receipt = await herald.send(receipt_request(key, to), policy=policy)
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    events = [event async for event in herald.handle(key).fetch_history_events()]
    signals = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert len(signals) == 1
    assert signals[0].workflow_execution_signaled_event_attributes.signal_name == "delivery_reports"
    actions = billable_actions(events)
    assert actions["workflow_started"] == 1
    assert actions["activity"] == 1
    assert actions["signal"] == 1
    assert actions["local_activities"] == 1  # the write at the close
    assert actions["search_attributes"] == 0
    assert actions["timer"] <= 1
    assert sum(actions.values()) <= 5
    # The one write at the close recorded both reports' verdicts.
    sid = (await emulator.messages(to))[0]["sid"]
    inbox = await _inbox_rows(pool, sid)
    assert sorted((status, outcome) for status, outcome, _ in inbox) == [("delivered", "applied"), ("sent", "applied")]
    assert (await intent_history(pool, receipt.workflow_id)).transitions[-1].to_state == "delivered"


async def test_accept_then_hang_sends_once_and_still_delivers(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """A provider that accepts and then hangs past the client timeout yields one message and a delivered intent."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, count=1)
    receipt = await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    assert len(await emulator.messages(to)) == 1
    history = await intent_history(pool, receipt.workflow_id)
    submit = [o for o in history.observations if o.source == "submit"]
    assert submit[0].kind == "unknown"  # the timeout was recorded as unknown, not as a failure
    assert len(history.attempts) == 1
    assert "retryable_failure" not in [t.to_state for t in history.transitions]


async def test_same_key_from_two_racing_clients_gives_one_intent_and_one_message(
    herald: HeraldClient, emulator: Emulator, settings, stack: LocalStack
) -> None:
    """Two clients in two threads, released by one barrier with one key, with two workers polling: one workflow, one message."""
    key, to = fresh_key(), fresh_recipient()
    second_worker = stack.start_worker("worker-race")
    barrier = threading.Barrier(2)
    results: list[object] = []

    def racer() -> None:
        async def go() -> None:
            client = HeraldClient(
                await connect(settings.temporal),
                settings.temporal.task_queue,
                policy=TEST_POLICY,
                keyring=SESSION_KEYRING,
            )
            barrier.wait(timeout=10)
            results.append(await client.send(receipt_request(key, to)))

        try:
            asyncio.run(asyncio.wait_for(go(), 30))
        except Exception as error:  # surfaced through `results` below
            results.append(error)

    threads = [threading.Thread(target=racer) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        await asyncio.get_running_loop().run_in_executor(None, lambda: [t.join(40) for t in threads])
        final = (await reads.final(herald, key, wait=WAIT)).state
    finally:
        second_worker.stop()
    assert len(results) == 2 and not [r for r in results if isinstance(r, Exception)], results
    assert len({r.run_id for r in results}) == 1
    assert final is IntentState.DELIVERED
    assert len(await emulator.messages(to)) == 1


async def test_report_before_create_response_is_applied(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """Reports that arrive before the create response are stored and applied, not lost."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "callback_before_response", count=1)
    receipt = await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    assert len(messages) == 1
    history = await intent_history(pool, receipt.workflow_id)
    reports = [o for o in history.observations if o.source == "report"]
    assert {o.provider_status for o in reports if o.applied} >= {"delivered"}
    inbox = await _inbox_rows(pool, messages[0]["sid"])
    assert all(outcome is not None for _, outcome, _ in inbox)


async def test_duplicate_reports_are_one_inbox_row_each(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """Each report sent three times concurrently is one inbox row with one verdict, and the intent ends delivered."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "duplicate_callbacks", copies=3, count=1)
    await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    assert len(messages) == 1
    assert len(messages[0]["callbacks"]) >= 6  # really sent three times each
    inbox = await reads.eventually(lambda: _inbox_rows(pool, messages[0]["sid"]), "the reports in the inbox", 15)
    assert sorted(status for status, _, _ in inbox) == ["delivered", "sent"]


async def test_out_of_order_reports_never_move_delivered_back(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """Reports posted out of order end delivered, each with a verdict; a `sent` judged after `delivered` is ignored."""
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "out_of_order_callbacks", count=1)
    receipt = await herald.send(receipt_request(key, to))
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    messages = await emulator.messages(to)
    sid = messages[0]["sid"]

    async def both_decided():
        rows = await _inbox_rows(pool, sid)
        return rows if len(rows) == 2 and all(outcome for _, outcome, _ in rows) else None

    inbox = await reads.eventually(both_decided, "a verdict on both reports", 15)
    assert inbox, "both reports must end with a verdict"
    verdicts = {status: (outcome, reason) for status, outcome, reason in inbox}
    assert verdicts["delivered"][0] == "applied"
    # The emulator posts `delivered` first. `sent` is non-final, so the receipt server holds it for
    # a moment before signalling: it reaches the workflow after `delivered` (ignored as stale) or
    # after the workflow closed (recorded, not applied); either way nothing moves `delivered` back.
    assert verdicts["sent"][0] == "ignored"
    assert "already final" in verdicts["sent"][1] or "workflow has closed" in verdicts["sent"][1]
    history = await intent_history(pool, receipt.workflow_id)
    assert [t.to_state for t in history.transitions][-1] == "delivered"
    assert "delivered" not in [t.from_state for t in history.transitions]


async def test_forged_or_missing_signature_is_refused_and_stores_nothing(receipt_server: str, pool: AsyncConnectionPool, settings) -> None:
    """A callback with a forged or missing X-Twilio-Signature gets 403 and leaves no inbox row."""
    sid = "SM" + "f" * 32
    url = f"{receipt_server}/twilio/status?attempt=att_forged_1"
    form = {"MessageSid": sid, "MessageStatus": "delivered", "AccountSid": settings.twilio.account_sid}
    forged = compute_signature("not-the-auth-token", url, form)
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.post(url, data=form, headers={"X-Twilio-Signature": forged})).status_code == 403
        assert (await http.post(url, data=form)).status_code == 403
        # The same form signed for another URL is a forgery too.
        other = compute_signature(settings.twilio.auth_token.get_secret_value(), url + "x", form)
        assert (await http.post(url, data=form, headers={"X-Twilio-Signature": other})).status_code == 403
    assert await _inbox_rows(pool, sid) == []


async def test_invalid_input_is_refused_before_anything_starts(herald: HeraldClient, temporal: Client, emulator: Emulator) -> None:
    """A bad phone number or an unknown template version gets an error naming the field; no workflow, no send."""
    key, to = fresh_key(), fresh_recipient()
    with pytest.raises(InvalidIntent) as bad_number:
        await herald.send(receipt_request(key, "+1 555 0100"))
    assert "recipient" in str(bad_number.value) and "E.164" in str(bad_number.value)
    assert "555 0100" not in str(bad_number.value)
    with pytest.raises(InvalidIntent) as bad_version:
        await herald.send(receipt_request(key, to, template_version=99))
    assert "template_version" in str(bad_version.value)
    with pytest.raises(RPCError):
        await temporal.get_workflow_handle(workflow_id_for(key, "sms")).describe()
    assert await emulator.messages(to) == []


async def test_same_key_with_another_payload_is_refused(herald: HeraldClient, emulator: Emulator) -> None:
    """Reusing a business key with different content raises IntentConflict naming the key, and sends nothing new."""
    key, to = fresh_key(), fresh_recipient()
    await herald.send(receipt_request(key, to))
    changed = receipt_request(key, to, render_data={"order_ref": "ord_1", "amount": "1.00", "currency": "EUR", "merchant": "X"})
    with pytest.raises(IntentConflict) as conflict:
        await herald.send(changed)
    assert key in str(conflict.value)
    assert (await reads.final(herald, key, wait=WAIT)).state is IntentState.DELIVERED
    # Attaching with the same payload again is fine and still sends nothing new.
    await herald.send(receipt_request(key, to))
    assert len(await emulator.messages(to)) == 1
