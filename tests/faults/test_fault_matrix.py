"""The fault matrix: crashes, hangs, refusals, redeliveries and outages, each against real processes.

Every scenario is bounded in time and count and sends traffic only to 127.0.0.1. Sends are
counted at the emulator and outcomes read from the ledger, then I1-I5 are checked.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, quote_plus

import httpx
import pytest

from devstack.embedded_postgres import kill_hard, restart
from devstack.fault_points import FaultPoint
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.contracts import attempt_ref
from herald.core.intent import workflow_id_for
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.intake.errors import IntentConflict
from herald.providers.twilio_signature import compute_signature
from herald.settings import load_settings
from herald.temporal.client import connect
from herald.temporal.task_queues import submit_task_queue
from tests import reads
from tests.faults.invariants import check_invariants
from tests.faults.workers import crashed, worker
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import TEST_POLICY

# Scenario 6 stops and restarts the Temporal dev server: its workflows must outlive it (a file).
RESTARTS_TEMPORAL = True


async def test_worker_killed_after_acceptance_resolves_by_lookup(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 1: the worker dies after the provider accepted; the restarted worker finds that message, sends none."""
    key, to = fresh_key(), fresh_recipient()
    marker = Path(fault_stack.config.state_path) / f"crash-{key.replace(':', '_')}"
    with worker(fault_stack, "worker-crash", HERALD_FAULT_POINT=FaultPoint.AFTER_PROVIDER_ACCEPTED.value,
                HERALD_FAULT_POINT_MARKER=str(marker)) as crashing:  # fmt: skip
        await fault_herald.send(receipt_request(key, to, render_data={
            "order_ref": "ord_s1", "amount": "1.00", "currency": "EUR", "merchant": "S1"}))  # fmt: skip
        assert await crashed(crashing) == -9
    assert len(await fault_emulator.messages(to)) == 1  # the provider really accepted before the crash
    with worker(fault_stack, "worker-recovery"):
        final = await reads.final(fault_herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(final.attempts) == 1 and final.attempts[0].submit_result == "unknown"
    assert len(await fault_emulator.messages(to)) == 1
    await check_invariants(fault_pool, fault_emulator, {workflow_id_for(key, "sms"): to})


async def test_worker_killed_before_the_provider_call_sends_once(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 2: the worker dies between the attempt row and the provider call; absence is proven, one message."""
    key, to = fresh_key(), fresh_recipient()
    marker = Path(fault_stack.config.state_path) / f"crash-{key.replace(':', '_')}"
    with worker(fault_stack, "worker-crash", HERALD_FAULT_POINT=FaultPoint.BEFORE_PROVIDER_CALL.value,
                HERALD_FAULT_POINT_MARKER=str(marker)) as crashing:  # fmt: skip
        receipt = await fault_herald.send(receipt_request(key, to))
        assert await crashed(crashing) == -9
    async with fault_pool.connection() as conn:
        rows = await (await conn.execute("SELECT number FROM attempts WHERE workflow_id = %s", (receipt.workflow_id,))).fetchall()
    assert rows == [(1,)]  # the attempt row was committed before the crash
    assert await fault_emulator.messages(to) == []
    with worker(fault_stack, "worker-recovery"):
        final = await reads.final(fault_herald, key)
    assert final.state is IntentState.DELIVERED
    assert [a.submit_result for a in final.attempts] == ["not_accepted", "accepted"]
    assert len(await fault_emulator.messages(to)) == 1
    await check_invariants(fault_pool, fault_emulator, {receipt.workflow_id: to})


async def test_a_worker_split_by_queue_sends_only_from_its_submit_process_and_the_lane_waits_for_its_own(
    fault_stack, fault_herald, fault_emulator, fault_pool
) -> None:
    """HERALD_WORKER_QUEUES, one process per queue of the route:
    - only `standard` up: a receipt's attempt is prepared and its submit waits in Temporal's queue,
      nothing sent; an account code (priority 1) runs on `<queue>-urgent` and is not touched at all
      (no attempt row, nothing sent);
    - `submits` started: the receipt is sent once and delivered, from the process polling the submit
      queue alone; the code is still untouched;
    - `urgent` started: the code is delivered once, its submit scheduled on the route's one paced
      submit queue and sent by the submits process (the lane's process polls the lane alone)."""
    base = fault_stack.config.temporal.task_queue
    key, to = fresh_key(), fresh_recipient()
    code_key, code_to = fresh_key("signin"), fresh_recipient()
    code = receipt_request(code_key, code_to, template_id="class_reminder", template_version=1,
                           render_data={"class_name": "Spin", "starts_at": "Mon 18:00"})  # fmt: skip
    with worker(fault_stack, "worker-standard", HERALD_WORKER_QUEUES="standard"):
        receipt = await fault_herald.send(receipt_request(key, to))
        await fault_herald.send(code)
        await reads.eventually(lambda: _submit_scheduled(fault_herald, key), "the submit scheduled", 15)
        await asyncio.sleep(1.0)  # time enough for a wrongly polled submit to reach the emulator
        assert await fault_emulator.messages(to) == []
        assert (await fault_herald.handle(code_key).describe()).task_queue == f"{base}-urgent"
        with worker(fault_stack, "worker-submits", HERALD_WORKER_QUEUES="submits") as submits:
            final = await reads.final(fault_herald, key)
            assert await _attempt_rows(fault_pool, workflow_id_for(code_key, "sms")) == 0
            assert await fault_emulator.messages(code_to) == []
            with worker(fault_stack, "worker-urgent", HERALD_WORKER_QUEUES="urgent") as lane:
                code_final = await reads.final(fault_herald, code_key)
        submits_log = (fault_stack.log_dir / f"{submits.name}.log").read_text()
        lane_log = (fault_stack.log_dir / f"{lane.name}.log").read_text()
    assert final.state is IntentState.DELIVERED and code_final.state is IntentState.DELIVERED
    assert len(await fault_emulator.messages(to)) == 1 and len(await fault_emulator.messages(code_to)) == 1
    # Each process polled its own queue alone: the submits process sent both.
    assert f"worker polling task queue {submit_task_queue(base)}" in submits_log
    assert f"worker polling task queue {base}-urgent\n" in lane_log
    history = await fault_herald.handle(code_key).fetch_history()
    submit_queues = {
        event.activity_task_scheduled_event_attributes.task_queue.name
        for event in history.events
        if event.activity_task_scheduled_event_attributes.activity_type.name == "submit_attempt"
    }
    assert submit_queues == {submit_task_queue(base)} == {f"{base}-submit"}
    intents = {receipt.workflow_id: to, workflow_id_for(code_key, "sms"): code_to}
    await check_invariants(fault_pool, fault_emulator, intents)


async def _attempt_rows(pool, workflow_id: str) -> int:
    async with pool.connection() as conn:
        [(count,)] = await (await conn.execute("SELECT count(*) FROM attempts WHERE workflow_id = %s", (workflow_id,))).fetchall()  # fmt: skip
    return count


async def _submit_scheduled(herald: HeraldClient, key: str) -> bool:
    """The intent's workflow has scheduled an activity that no worker has started: its submit, queued."""
    description = await herald.handle(key).describe()
    return any(a.activity_type.name == "submit_attempt" for a in description.raw_description.pending_activities)


async def test_refusals_and_ambiguous_errors(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 4: connection refused, 503s, and an absurd Retry-After (capped) each end delivered with one message."""
    policy = TEST_POLICY.model_copy(update={"max_attempts": 8, "backoff_initial": timedelta(seconds=1)})
    intents: dict[str, str] = {}
    # Connection refused: a worker whose provider address has nothing listening.
    refused_key, refused_to = fresh_key(), fresh_recipient()
    with worker(fault_stack, "worker-refused", HERALD_TWILIO_API_BASE=f"http://127.0.0.1:{free_port()}"):
        await fault_herald.send(receipt_request(refused_key, refused_to), policy=policy)
        for _ in range(100):
            status = await fault_herald.status(refused_key)
            if status.attempts and status.attempts[0].submit_result == "unreachable":
                break
            await asyncio.sleep(0.1)
        assert status.attempts[0].submit_result == "unreachable"  # refused = definitely not sent, an outage
    intents[workflow_id_for(refused_key, "sms")] = refused_to
    with worker(fault_stack, "worker-healthy"):
        unavailable_key, unavailable_to = fresh_key(), fresh_recipient()
        await fault_emulator.arm(unavailable_to, "error_503", count=2)
        absurd_key, absurd_to = fresh_key(), fresh_recipient()
        await fault_emulator.arm(absurd_to, "rate_limit", retry_after=86400, count=1)
        await fault_herald.send(receipt_request(unavailable_key, unavailable_to), policy=policy)
        await fault_herald.send(receipt_request(absurd_key, absurd_to), policy=policy)
        finals = await asyncio.gather(*(reads.final(fault_herald, k) for k in (refused_key, unavailable_key, absurd_key)))
    assert [f.state for f in finals] == [IntentState.DELIVERED] * 3
    absurd = finals[2]
    assert absurd.attempts[0].retry_hint_seconds == 86400
    assert absurd.attempts[0].retry_delay_seconds == policy.retry_after_cap.total_seconds()
    intents[workflow_id_for(unavailable_key, "sms")] = unavailable_to
    intents[workflow_id_for(absurd_key, "sms")] = absurd_to
    for recipient in intents.values():
        assert len(await fault_emulator.messages(recipient)) == 1
    await check_invariants(fault_pool, fault_emulator, intents)


def _signed(stack: LocalStack, ref: str, form: dict[str, str]) -> tuple[str, dict[str, str]]:
    settings = load_settings(stack.config.service_env(stack.database_url))
    url = f"{settings.receipts.public_url}/twilio/status?attempt={ref}"
    return url, {"X-Twilio-Signature": compute_signature(settings.twilio.auth_token.get_secret_value(), url, form)}


async def test_concurrent_and_early_reports(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 5: one report five times at once is one row; a report for a not-yet-known attempt is applied later."""
    with worker(fault_stack, "worker-reports"):
        key, to = fresh_key(), fresh_recipient()
        await fault_herald.send(receipt_request(key, to))
        final = await reads.final(fault_herald, key)
        attempt = final.attempts[0]
        form = {"MessageSid": attempt.provider_id, "MessageStatus": "read", "AccountSid": fault_stack.config.emulator.account_sid}
        url, headers = _signed(fault_stack, attempt.attempt_ref, form)
        async with httpx.AsyncClient(timeout=10) as http:
            answers = await asyncio.gather(*(http.post(url, data=form, headers=headers) for _ in range(5)))
        assert [a.status_code for a in answers] == [200] * 5
        async with fault_pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT count(*) FROM receipt_inbox WHERE provider_message_id = %s AND provider_status = 'read'",
                (attempt.provider_id,))).fetchone()  # fmt: skip
        assert rows == (1,)

        # A report naming an attempt that does not exist yet: stored, then applied once the attempt is known.
        early_key, early_to = fresh_key(), fresh_recipient()
        early_ref = attempt_ref(workflow_id_for(early_key, "sms"), 1)
        early_sid = "SM" + "e" * 32
        form = {"MessageSid": early_sid, "MessageStatus": "delivered", "AccountSid": fault_stack.config.emulator.account_sid}
        url, headers = _signed(fault_stack, early_ref, form)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.post(url, data=form, headers=headers)).status_code == 200
        await asyncio.sleep(2)  # the drainer has tried and deferred it: the attempt is unknown
        # The provider hangs without a visible message, so only the stored report can say what happened.
        await fault_emulator.arm(early_to, "hang_without_accept", hang_seconds=2, count=1)
        await fault_herald.send(receipt_request(early_key, early_to))
        early = await reads.final(fault_herald, early_key)
    assert early.state is IntentState.DELIVERED
    # The early report got exactly one verdict once its attempt was known. Whether it was applied
    # (it beat the lookup's proof of absence) or recorded against a superseded attempt depends on
    # the race, and both are correct; what may never happen is a second live message.
    # The drainer re-offers it on its backoff (1 s, 5 s, 15 s, ...), so the verdict can take a while.
    verdicts: list[tuple] = []
    for _ in range(150):
        async with fault_pool.connection() as conn:
            verdicts = await (await conn.execute(
                """SELECT o.outcome, o.workflow_id FROM receipt_inbox r JOIN receipt_outcomes o ON o.inbox_id = r.id
                    WHERE r.provider_message_id = %s""", (early_sid,))).fetchall()  # fmt: skip
        if verdicts:
            break
        await asyncio.sleep(0.2)
    assert len(verdicts) == 1 and verdicts[0][1] == workflow_id_for(early_key, "sms")
    assert len(await fault_emulator.messages(early_to)) <= 1
    await check_invariants(fault_pool, fault_emulator, {workflow_id_for(key, "sms"): to, workflow_id_for(early_key, "sms"): early_to})


async def test_temporal_restart_with_intents_in_flight(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 6: the Temporal server is killed and restarted on its file; in-flight intents all finish, once each."""
    intents: dict[str, str] = {}
    keys = []
    with worker(fault_stack, "worker-temporal"):
        for _ in range(5):
            key, to = fresh_key(), fresh_recipient()
            await fault_emulator.arm(to, "delayed_callback", delay_seconds=3, count=1)
            await fault_herald.send(receipt_request(key, to))
            keys.append(key)
            intents[workflow_id_for(key, "sms")] = to
        await asyncio.sleep(1)
        temporal = fault_stack.processes["temporal"]
        temporal.kill()
        await asyncio.sleep(2)  # reports arrive meanwhile: stored, their signals fail, the drainer retries
        fault_stack.start_temporal()
        settings = load_settings(fault_stack.config.service_env(fault_stack.database_url))
        herald = HeraldClient(
            await connect(settings.temporal), settings.temporal.task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING
        )
        finals = await asyncio.gather(*(reads.final(herald, key) for key in keys))
    assert [f.state for f in finals] == [IntentState.DELIVERED] * 5
    for recipient in intents.values():
        assert len(await fault_emulator.messages(recipient)) == 1
    await check_invariants(fault_pool, fault_emulator, intents)


async def test_postgres_killed_while_reports_arrive(fault_stack, fault_herald, fault_emulator) -> None:
    """Scenario 7: with PostgreSQL down the endpoint answers 5xx; after the emulator redelivers, each report is in once."""
    intents: dict[str, str] = {}
    keys = []
    with worker(fault_stack, "worker-postgres"):
        for _ in range(3):
            key, to = fresh_key(), fresh_recipient()
            await fault_emulator.arm(to, "delayed_callback", delay_seconds=2, count=1)
            await fault_herald.send(receipt_request(key, to))
            keys.append(key)
            intents[workflow_id_for(key, "sms")] = to
        for _ in range(200):  # wait until the provider holds all three: their reports come 2 s later
            if all([await fault_emulator.messages(to) for to in intents.values()]):
                break
            await asyncio.sleep(0.05)
        kill_hard(fault_stack._postgres)
        await asyncio.sleep(3)  # reports arrive and are refused with 5xx
        restart(fault_stack._postgres)
        finals = await asyncio.gather(*(reads.final(fault_herald, key) for key in keys))
    assert [f.state for f in finals] == [IntentState.DELIVERED] * 3
    refused = []
    for recipient in intents.values():
        for message in await fault_emulator.messages(recipient):
            refused += [c for c in message["callbacks"] if (c.get("http_status") or 0) >= 500 or c.get("error")]
    seen = [c for r in intents.values() for m in await fault_emulator.messages(r) for c in m["callbacks"]]
    assert refused, f"the outage should have refused at least one report with 5xx: {seen}"
    from herald.ledger.store import open_pool

    async with open_pool(fault_stack.database_url, max_size=1) as pool:
        for recipient in intents.values():
            for message in await fault_emulator.messages(recipient):
                # The emulator redelivers on its backoff (0.5 s, 1 s, 2 s, 4 s, 8 s, ...): wait for it.
                rows: list[tuple] = []
                for _ in range(200):
                    async with pool.connection() as conn:
                        rows = await (await conn.execute(
                            "SELECT provider_status, count(*) FROM receipt_inbox WHERE provider_message_id = %s "
                            "GROUP BY provider_status", (message["sid"],))).fetchall()  # fmt: skip
                    if len(rows) == 2:
                        break
                    await asyncio.sleep(0.2)
                assert sorted(rows) == [("delivered", 1), ("sent", 1)]
        await check_invariants(pool, fault_emulator, intents)


async def test_postgres_down_when_the_submit_runs_sends_nothing_until_the_attempt_row_commits(
    fault_stack, fault_herald, fault_emulator
) -> None:
    """With PostgreSQL down the submit activity cannot commit the attempt row, so it does not call the
    provider; the workflow prepares the same attempt again and, once the ledger is back, sends it once."""
    key, to = fresh_key(), fresh_recipient()
    with worker(fault_stack, "worker-ledger-down"):
        kill_hard(fault_stack._postgres)
        try:
            await fault_herald.send(receipt_request(key, to))
            await asyncio.sleep(4)  # several submits meet the outage meanwhile
            assert await fault_emulator.messages(to) == [], "nothing may reach the provider before its attempt row commits"
        finally:
            restart(fault_stack._postgres)
        final = await reads.final(fault_herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(await fault_emulator.messages(to)) == 1
    # The same attempt, prepared again: nothing was sent, so nothing was spent from the retry budget.
    assert [attempt.number for attempt in final.attempts] == [1]
    history = [event async for event in fault_herald.handle(key).fetch_history_events()]
    submits = [e for e in history if e.HasField("activity_task_scheduled_event_attributes")
               and e.activity_task_scheduled_event_attributes.activity_type.name == "submit_attempt"]  # fmt: skip
    assert len(submits) >= 2, "the outage should have refused at least one submit"
    from herald.ledger.store import open_pool

    async with open_pool(fault_stack.database_url, max_size=1) as pool:
        await check_invariants(pool, fault_emulator, {workflow_id_for(key, "sms"): to})


async def test_twenty_clients_one_key_and_a_conflicting_payload(fault_stack, fault_herald, fault_emulator, fault_pool) -> None:
    """Scenario 9: twenty clients start one key at once (one workflow, one message); another payload is refused (I6)."""
    settings = load_settings(fault_stack.config.service_env(fault_stack.database_url))
    clients = [
        HeraldClient(
            await connect(settings.temporal), settings.temporal.task_queue, policy=TEST_POLICY, keyring=SESSION_KEYRING
        )
        for _ in range(4)
    ]
    key, to = fresh_key(), fresh_recipient()
    with worker(fault_stack, "worker-twenty"):
        receipts = await asyncio.gather(*(clients[i % 4].send(receipt_request(key, to)) for i in range(20)))
        assert len({r.run_id for r in receipts}) == 1
        other_to = fresh_recipient()
        with pytest.raises(IntentConflict):
            await fault_herald.send(receipt_request(key, other_to))
        final = await reads.final(fault_herald, key)
    assert final.state is IntentState.DELIVERED
    assert len(await fault_emulator.messages(to)) == 1
    assert await fault_emulator.messages(other_to) == []  # I6: the refused payload sent nothing
    await check_invariants(fault_pool, fault_emulator, {workflow_id_for(key, "sms"): to})


async def test_hangs_rate_limits_and_late_reports_with_a_real_worker(
    fault_stack, fault_herald, fault_emulator, fault_pool
) -> None:
    """Scenarios 3-5 on the subprocess worker: hang after and without acceptance, 429 in both Retry-After
    formats, and a report for an intent that has already closed; one live message each, I1-I5 hold."""
    cases = {
        "accepted_then_hung": ("accept_then_hang", {"hang_seconds": 3}),
        "hung_without_accepting": ("hang_without_accept", {"hang_seconds": 2}),
        "retry_after_seconds": ("rate_limit", {"retry_after": 2}),
        "retry_after_http_date": ("rate_limit", {"retry_after": 3, "retry_after_format": "http-date"}),
        "plain": (None, {}),
    }
    keys = {name: (fresh_key(), fresh_recipient()) for name in cases}
    with worker(fault_stack, "worker-matrix"):
        for name, (fault, params) in cases.items():
            key, to = keys[name]
            if fault:
                await fault_emulator.arm(to, fault, count=1, **params)
            await fault_herald.send(receipt_request(key, to))
        finals = dict(zip(cases, await asyncio.gather(*(reads.final(fault_herald, k) for k, _ in keys.values())), strict=True))
        # A late report for the plain intent, whose workflow has closed: still recorded, never applied.
        plain = finals["plain"].attempts[0]
        form = {"MessageSid": plain.provider_id, "MessageStatus": "undelivered", "ErrorCode": "30005"}
        url, headers = _signed(fault_stack, plain.attempt_ref, form)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.post(url, data=form, headers=headers)).status_code == 200
    assert {name: final.state for name, final in finals.items()} == dict.fromkeys(cases, IntentState.DELIVERED)
    assert finals["accepted_then_hung"].attempts[0].submit_result == "unknown"
    assert len(finals["accepted_then_hung"].attempts) == 1
    assert [a.submit_result for a in finals["hung_without_accepting"].attempts] == ["not_accepted", "accepted"]
    for name in ("retry_after_seconds", "retry_after_http_date"):
        first, second = finals[name].attempts
        # An HTTP date has one-second resolution, so its hint may shrink by up to a second.
        assert second.started_at - first.started_at >= timedelta(seconds=2), name
    intents = {workflow_id_for(key, "sms"): to for key, to in keys.values()}
    for recipient in intents.values():
        assert len(await fault_emulator.messages(recipient)) == 1
    late: list[tuple] = []
    for _ in range(100):
        async with fault_pool.connection() as conn:
            late = await (await conn.execute(
                "SELECT applied, reason FROM observations WHERE workflow_id = %s AND provider_status = 'undelivered'",
                (workflow_id_for(keys["plain"][0], "sms"),))).fetchall()  # fmt: skip
        if late:
            break
        await asyncio.sleep(0.2)
    assert late and late[0][0] is False and "closed" in late[0][1]
    await check_invariants(fault_pool, fault_emulator, intents)


async def test_seed_003_notice_race_email_delivered_sms_in_flight_worker_killed(
    fault_stack, fault_herald, fault_emulator, fault_esp, fault_pool
) -> None:
    """Seed 003's worked example. One notice, two channels: the e-mail is delivered within seconds
    while the SMS submit hangs after Twilio accepted it; the worker is SIGKILLed; a new worker sends
    nothing new on e-mail and only resolves the pending SMS under the same key. Counted at the SMS
    emulator and at the SMTP relay; the e-mail's ledger rows are untouched by the restart."""
    key, phone, address = fresh_key("seller_new_order"), fresh_recipient(), f"seller.{fresh_key()[-8:]}@example.com"
    # Accepted at once, then the answer is held past the adapter's read timeout; queued 3 s first.
    await fault_emulator.arm(phone, "accept_then_hang", hang_seconds=8, queue_seconds=3)
    data = {"order_ref": "ord_n1", "amount": "9.00", "currency": "EUR", "merchant": "N1"}
    notice = {
        "business_key": key,
        "channels": [
            {"channel": "sms", "recipient": phone, "template_id": "order_receipt", "template_version": 1, "render_data": data},
            {"channel": "email", "recipient": address, "template_id": "order_receipt_email", "template_version": 1, "render_data": data},
        ],
    }
    email_id, sms_id = workflow_id_for(key, "email"), workflow_id_for(key, "sms")
    with worker(fault_stack, "worker-notice") as first:
        await fault_herald.send_notice(notice)
        deadline = time.monotonic() + 30
        while True:
            email, sms = await fault_herald.status(key, "email"), await fault_herald.status(key, "sms")
            if email.state is IntentState.DELIVERED:
                break
            assert time.monotonic() < deadline, f"e-mail not delivered: {email.transitions}"
            await asyncio.sleep(0.05)
        # The seed's moment: e-mail delivered, the SMS attempt still unresolved.
        assert sms.state in (IntentState.SUBMITTING, IntentState.ACCEPTED), sms.transitions
        first.kill()
    async with fault_pool.connection() as conn:
        before = await (await conn.execute(
            "SELECT seq, from_state, to_state, reason, source, at FROM transitions WHERE workflow_id = %s ORDER BY seq",
            (email_id,))).fetchall()  # fmt: skip
    assert [row[2] for row in before] == ["submitting", "accepted", "delivered"]
    with worker(fault_stack, "worker-notice-recovery"):
        sms_final = await reads.final(fault_herald, key)
        email_final = await reads.final(fault_herald, key, Channel.EMAIL)
    assert sms_final.state is IntentState.DELIVERED, sms_final.transitions
    assert len(sms_final.attempts) == 1  # resolved, never resent
    assert email_final.state is IntentState.DELIVERED and len(email_final.attempts) == 1
    assert len(await fault_emulator.messages(phone)) == 1
    assert len(await fault_esp.messages(address)) == 1
    async with fault_pool.connection() as conn:
        after = await (await conn.execute(
            "SELECT seq, from_state, to_state, reason, source, at FROM transitions WHERE workflow_id = %s ORDER BY seq",
            (email_id,))).fetchall()  # fmt: skip
        accepted_row = await (await conn.execute(
            "SELECT count(*) FROM observations WHERE workflow_id = %s AND kind = 'accepted'", (email_id,))).fetchone()  # fmt: skip
    assert after == before  # the restart changed nothing on the e-mail channel
    assert accepted_row == (1,)
    await check_invariants(fault_pool, fault_emulator, {sms_id: phone})


async def test_no_log_of_this_module_holds_a_recipient_or_a_body(fault_stack, fault_pool) -> None:
    """Runs last in the module, after every scenario above (reference lookups, hangs, rejections,
    restarts, the e-mail notice): not one log line of any process holds a recipient, in any spelling
    a URL or form gives it, or a rendered body. Before, httpx logged each lookup's `To=%2B1555...` URL."""
    async with fault_pool.connection() as conn:
        rows = await (await conn.execute("SELECT recipient, body FROM intents")).fetchall()
    assert len(rows) >= 10, "the scenarios above should have left intents to look for"
    needles = set()
    for recipient, body in rows:
        needles |= {recipient, quote_plus(recipient), quote(recipient, safe="")}
        needles.add(body)
    logs = {path.name: path.read_text(errors="replace") for path in fault_stack.log_dir.glob("*.log")}
    assert any(name.startswith("worker") for name in logs) and "receipts.log" in logs, sorted(logs)
    herald_logs = {name: text for name, text in logs.items() if not name.startswith(("emulator", "esp"))}
    hits = [(name, needle) for name, text in herald_logs.items() for needle in needles if needle in text]
    assert hits == [], f"{len(hits)} personal values in logs, first in {hits[0][0]}"
