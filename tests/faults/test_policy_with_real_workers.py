"""The send policy against real processes: suppression from what the ledger records, consent, and
the strict recipient cooldown across two worker processes while a new policy version is published.

Its own stack (the fault stack: module-scoped), because publishing a policy changes every intent's
evaluation. Sends are counted at the emulators; decisions are read from the ledger.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.intent import workflow_id_for
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.policy_store import grant_consent, lift_suppression, publish_policy
from tests import reads
from tests.faults.workers import worker
from tests.intents import email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEYRING
from tests.stack import Emulator, Esp

CLASS = {"class_name": "Spin 18:00", "starts_at": "Mon 18:00"}


async def test_an_opt_out_suppresses_later_intents_until_an_operator_lifts_it(
    fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool: AsyncConnectionPool
) -> None:
    """Twilio answers 21610: that intent fails; a later intent to the number is suppressed by the
    policy, naming the rule and version, with nothing sent; after a recorded lift it is delivered."""
    to = fresh_recipient()
    await fault_emulator.arm(to, "reject", code=21610, count=1)
    with worker(fault_stack, "worker-policy"):
        first = fresh_key()
        await fault_herald.send(receipt_request(first, to))
        assert (await reads.final(fault_herald, first)).state is IntentState.PERMANENT_FAILURE
        second = fresh_key()
        await fault_herald.send(receipt_request(second, to))
        suppressed = await reads.final(fault_herald, second)
        assert suppressed.state is IntentState.SUPPRESSED and suppressed.attempts == []
        assert suppressed.closed_by == "policy:suppression"
        assert "opt_out (Twilio 21610)" in suppressed.transitions[-1].reason
        assert "(policy v" in suppressed.transitions[-1].reason
        assert await fault_emulator.messages(to) == []
        await lift_suppression(
            fault_pool,
            fingerprint=SESSION_KEYRING.recipient(to),
            channel="sms",
            operator="alice",
            reason="resubscribed by phone",
        )
        third = fresh_key()
        await fault_herald.send(receipt_request(third, to))
        assert (await reads.final(fault_herald, third)).state is IntentState.DELIVERED
    assert len(await fault_emulator.messages(to)) == 1
    [lift] = await reads.rows(fault_pool, "SELECT operator, reason FROM suppression_lifts WHERE recipient_fingerprint = %s",
                         SESSION_KEYRING.recipient(to))  # fmt: skip
    assert lift == {"operator": "alice", "reason": "resubscribed by phone"}
    [row] = await reads.rows(fault_pool, "SELECT kind, source, reason FROM observations WHERE workflow_id = %s",
                        workflow_id_for(second, "sms"))  # fmt: skip
    assert (row["kind"], row["source"]) == ("policy_suppressed", "policy")


async def test_an_email_hard_bounce_suppresses_later_email_to_that_address(
    fault_stack, fault_herald: HeraldClient, fault_esp: Esp
) -> None:
    to = fresh_address()
    await fault_esp.arm(to, "bounce", count=1)
    with worker(fault_stack, "worker-policy"):
        first = fresh_key()
        await fault_herald.send(email_request(first, to))
        assert (await reads.final(fault_herald, first, Channel.EMAIL)).state is IntentState.UNDELIVERED
        second = fresh_key()
        await fault_herald.send(email_request(second, to))
        suppressed = await reads.final(fault_herald, second, Channel.EMAIL)
    assert suppressed.state is IntentState.SUPPRESSED
    assert "hard_bounce (sendgrid bounce)" in suppressed.transitions[-1].reason
    assert len(await fault_esp.messages(to)) == 1


async def test_marketing_is_sent_only_with_consent_evidence(
    fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    promotion = {"template_id": "class_promotion", "template_version": 1, "render_data": CLASS}
    with worker(fault_stack, "worker-policy"):
        refused = fresh_key("class_promotion")
        await fault_herald.send(receipt_request(refused, to, **promotion))
        final = await reads.final(fault_herald, refused)
        assert final.state is IntentState.SUPPRESSED and final.closed_by == "policy:consent"
        await grant_consent(fault_pool, fingerprint=SESSION_KEYRING.recipient(to), category=Category.MARKETING,
                            source="signup form, box 3", granted_at=datetime.now(UTC))  # fmt: skip
        allowed = fresh_key("class_promotion")
        await fault_herald.send(receipt_request(allowed, to, **promotion))
        assert (await reads.final(fault_herald, allowed)).state is IntentState.DELIVERED
    assert len(await fault_emulator.messages(to)) == 1


async def test_an_intent_whose_expiry_comes_during_a_deferral_closes_expired_with_both_reasons(
    fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool: AsyncConnectionPool
) -> None:
    """Deferral never loses an intent: held by a 60 s cooldown, an intent that lapses in 3 s closes
    `expired`, naming its expiry and the policy that held it; it was never sent."""
    await publish_policy(fault_pool, PolicyRules(cooldown_seconds={"sms": 60}), effective_from=datetime.now(UTC),
                         owner="tests", note="long cooldown")  # fmt: skip
    to = fresh_recipient()
    try:
        with worker(fault_stack, "worker-policy"):
            first = fresh_key()
            await fault_herald.send(receipt_request(first, to))
            assert (await reads.final(fault_herald, first)).state is IntentState.DELIVERED
            lapsing = fresh_key("class_opening")
            expires_at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
            await fault_herald.send(receipt_request(lapsing, to, template_id="class_opening", template_version=1,
                                                    render_data={**CLASS, "hold_minutes": 15}, expires_at=expires_at))  # fmt: skip
            final = await reads.final(fault_herald, lapsing)
    finally:
        await publish_policy(fault_pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
    assert final.state is IntentState.EXPIRED and final.attempts == []
    reason = final.transitions[-1].reason
    assert "held by policy v" in reason and "(cooldown)" in reason and "recipient cooldown until" in reason
    assert len(await fault_emulator.messages(to)) == 1


async def test_cooldown_is_strict_across_two_workers_and_each_attempt_records_its_version(
    fault_stack, fault_herald: HeraldClient, fault_emulator: Emulator, fault_pool: AsyncConnectionPool
) -> None:
    """Five intents to one recipient, started at once, on two worker processes: submitted at least
    one cooldown apart (counted at the emulator), each deferral recorded; a version published while
    they wait is the one the later attempts record."""
    cooldown = 2
    rules = PolicyRules(cooldown_seconds={"sms": cooldown})
    first_version = await publish_policy(fault_pool, rules, effective_from=datetime.now(UTC), owner="tests", note="cooldown")
    to = fresh_recipient()
    keys = [fresh_key() for _ in range(5)]
    try:
        with worker(fault_stack, "worker-policy-a"), worker(fault_stack, "worker-policy-b"):
            await asyncio.gather(*(fault_herald.send(receipt_request(key, to)) for key in keys))
            await asyncio.sleep(cooldown * 1.5)  # the first is out, the others wait on the cooldown
            second_version = await publish_policy(fault_pool, rules, effective_from=datetime.now(UTC), owner="tests", note="again")
            finals = await asyncio.gather(*(reads.final(fault_herald, key) for key in keys))
    finally:
        await publish_policy(fault_pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again")
    assert [final.state for final in finals] == [IntentState.DELIVERED] * 5
    assert all(len(final.attempts) == 1 for final in finals)
    created = sorted(datetime.fromisoformat(m["date_created"]) for m in await fault_emulator.messages(to))
    assert len(created) == 5
    gaps = [(later - earlier).total_seconds() for earlier, later in zip(created, created[1:], strict=False)]
    # Strict at the provider: each claim counts from the previous submit's answer, which the
    # emulator's clock (the same machine's) stamped after it created the message.
    print(f"\ngaps between submits at the emulator, cooldown {cooldown}s: {', '.join(f'{gap:.3f}s' for gap in gaps)}")
    assert min(gaps) >= cooldown, gaps
    ids = [workflow_id_for(key, "sms") for key in keys]
    deferrals = await reads.rows(
        fault_pool,
        "SELECT count(*) AS n FROM observations WHERE workflow_id = ANY(%s) AND source = 'policy' AND kind = 'deferred'",
        ids,
    )
    assert deferrals[0]["n"] >= 4  # every intent but the first waited at least once
    attempts = await reads.rows(
        fault_pool,
        """SELECT a.policy_version, a.policy_decision,
                  (SELECT v.version FROM policy_versions v WHERE v.effective_from <= a.prepared_at
                    ORDER BY v.effective_from DESC, v.version DESC LIMIT 1) AS in_force
             FROM attempts a WHERE a.workflow_id = ANY(%s)""",
        ids,
    )
    assert {row["policy_decision"] for row in attempts} == {"allow"}
    assert all(row["policy_version"] == row["in_force"] for row in attempts), attempts
    assert {row["policy_version"] for row in attempts} == {first_version, second_version}
