"""Records one workflow history per path of NotificationWorkflow into histories/, for the replay test.

Not collected by a plain `pytest` run (the file name does not start with test_); run it on purpose,
after a deliberate and compatible workflow change, and commit what it writes:

    .venv/bin/python -m pytest tests/replay/record_histories.py

Only paths without a committed history are recorded: the committed ones are what earlier code
wrote, and replaying them against today's code is the point. `HERALD_RERECORD=1` records all.

Each scenario meets its fault at the real emulator, exactly as in the integration tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.send_policy import PolicyRules
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.policy_store import publish_policy
from herald.privacy.payload_codec import decode_in_place
from tests.intents import email_request, fresh_address, fresh_key, fresh_recipient, receipt_request
from tests.stack import TEST_POLICY, Emulator, Esp, plain_relay

# Recorded on the real stack, which the replay tier itself never starts: this file loads it.
pytest_plugins = ("tests.stack",)

HISTORIES = Path(__file__).parent / "histories"

_HORIZON_BEFORE_ANY_POLL = {
    "resolution_horizon": timedelta(seconds=4),
    "poll_initial": timedelta(seconds=60),
    "poll_max": timedelta(seconds=60),
}
# name -> (fault, fault parameters, policy changes)
SCENARIOS: dict[str, tuple[str | None, dict, dict]] = {
    "delivered_by_report": (None, {}, {}),
    # Started with no state shown (the client since the quiet close): a straight delivery upserts
    # nothing; a lost answer's checkpointed wait shows `submitting`, then `delivered` at the close.
    "delivered_straight_no_state_shown": (None, {}, {}),
    "found_by_reference_state_shown": ("accept_then_hang", {"hang_seconds": 3, "callbacks": False}, {}),
    "unknown_submit_resolved_by_report": ("accept_then_hang", {"hang_seconds": 3}, {}),
    "unknown_submit_found_by_reference": ("accept_then_hang", {"hang_seconds": 3, "callbacks": False}, {}),
    "retry_after_proven_absence": ("error_500", {}, {}),
    "retry_after_429": ("rate_limit", {"retry_after": 1}, {}),
    "permanent_rejection": ("reject", {"code": 21610}, {}),
    "undelivered_permanent_code": ("undelivered", {"code": 30003}, {}),
    "delivered_by_poll": ("no_callback", {}, {}),
    "unknown_at_horizon_continued_as_new": (
        "silent", {}, {"resolution_horizon": timedelta(seconds=12), "poll_max": timedelta(seconds=1)}
    ),
    "queued_message_found_by_reference": (
        "accept_then_hang",
        {"hang_seconds": 3, "queue_seconds": 6, "callbacks": False},
        {"provider_queue_validity": timedelta(seconds=20)},
    ),
    "delivered_by_last_lookup_at_horizon": ("no_callback", {}, _HORIZON_BEFORE_ANY_POLL),
    "unknown_after_last_lookup_at_horizon": ("silent", {}, _HORIZON_BEFORE_ANY_POLL),
}


# E-mail paths: name -> (fault at the relay, fault parameters). Recorded with the e-mail channel.
EMAIL_SCENARIOS: dict[str, tuple[str | None, dict]] = {
    "email_delivered_by_event": (None, {}),
    "email_unknown_submit_resolved_by_event": ("drop_after_data", {}),
    # The relay has it but no event ever comes, and nothing shows the stream passing it: unknown.
    "email_unknown_submit_while_stream_silent": ("drop_after_data", {"events": False}),
    "email_retry_after_451": ("temp_fail", {"code": 451}),
    "email_permanent_550": ("perm_fail", {}),
    "email_bounced": ("bounce", {}),
    "email_unknown_at_horizon_without_events": ("no_events", {}),
}


def _recorded(name: str) -> bool:
    if os.environ.get("HERALD_RERECORD") == "1":
        return False
    return any(HISTORIES.glob(f"{name}.json")) or any(HISTORIES.glob(f"{name}.run*.json"))


async def _save(
    herald: HeraldClient, name: str, key: str, first_run_id: str | None, channel: Channel = Channel.SMS
) -> None:
    handle = herald.handle(key, channel)
    runs = []
    latest = await handle.describe()
    if first_run_id and first_run_id != latest.run_id:
        runs.append(herald.temporal.get_workflow_handle(handle.id, run_id=first_run_id))
    runs.append(herald.temporal.get_workflow_handle(handle.id, run_id=latest.run_id))
    for index, run in enumerate(runs):
        history = await run.fetch_history()
        # The test stack's key is thrown away with it: commit plaintext, replayable by anyone.
        await decode_in_place(history.events, herald.temporal.data_converter.payload_codec)
        suffix = f".run{index + 1}" if len(runs) > 1 else ""
        (HISTORIES / f"{name}{suffix}.json").write_text(json.dumps(history.to_json_dict(), indent=1) + "\n")


async def test_record_every_path(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> None:
    """Writes one committed history per workflow path (a recorder, run on purpose)."""
    HISTORIES.mkdir(exist_ok=True)
    for name, (fault, params, policy_changes) in SCENARIOS.items():
        if _recorded(name):
            continue
        key, to = fresh_key(), fresh_recipient()
        if fault:
            await emulator.arm(to, fault, count=1, **params)
        receipt = await herald.send(receipt_request(key, to), policy=TEST_POLICY.model_copy(update=policy_changes))
        await asyncio.wait_for(herald.wait(key), 60)
        await _save(herald, name, key, receipt.run_id)
    if not _recorded("late_report_settles_during_backoff"):
        # A provider that contradicts itself: the lookup proves "absence", the report comes during the backoff.
        key, to = fresh_key(), fresh_recipient()
        await emulator.arm(to, "lost_then_reported", hang_seconds=3, count=1)
        lying = TEST_POLICY.model_copy(
            update={"backoff_initial": timedelta(seconds=30), "backoff_max": timedelta(seconds=30),
                    "resolution_horizon": timedelta(seconds=60)}
        )  # fmt: skip
        receipt = await herald.send(receipt_request(key, to), policy=lying)
        for _ in range(300):
            if (await herald.status(key)).state is IntentState.RETRYABLE_FAILURE:
                break
            await asyncio.sleep(0.1)
        await emulator.release_callbacks(to)
        await asyncio.wait_for(herald.wait(key), 60)
        await _save(herald, "late_report_settles_during_backoff", key, receipt.run_id)
    if _recorded("cancel_racing_accepted_submit"):
        return  # the older paths below were recorded together
    # Cancel racing an accepted submit.
    key, to = fresh_key(), fresh_recipient()
    await emulator.arm(to, "delayed_callback", delay_seconds=2, count=1)
    receipt = await herald.send(receipt_request(key, to))
    # Cancel only once the provider holds the message: the reports are held back two seconds.
    for _ in range(100):
        if await emulator.messages(to):
            break
        await asyncio.sleep(0.05)
    await herald.cancel(key, reason="refunded", operator="recorder")
    await asyncio.wait_for(herald.wait(key), 60)
    await _save(herald, "cancel_racing_accepted_submit", key, receipt.run_id)
    # Expiry and cancellation while the send policy defers them (the recipient cooldown). The
    # policy is published before the first intent, so its submit claims the recipient's cooldown.
    await publish_policy(pool, PolicyRules(cooldown_seconds={"sms": 30}), effective_from=datetime.now(UTC),
                         owner="recorder", note="cooldown")  # fmt: skip
    try:
        to, first = fresh_recipient(), fresh_key()
        await herald.send(receipt_request(first, to))
        await asyncio.wait_for(herald.wait(first), 60)
        expiring = fresh_key("class_opening")
        expires_at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
        receipt = await herald.send(receipt_request(expiring, to, expires_at=expires_at))
        await asyncio.wait_for(herald.wait(expiring), 60)
        await _save(herald, "expired_while_deferred", expiring, receipt.run_id)
        cancelled = fresh_key("class_opening")
        receipt = await herald.send(receipt_request(cancelled, to))
        await asyncio.sleep(1)
        await herald.cancel(cancelled, reason="seat filled", operator="recorder")
        await asyncio.wait_for(herald.wait(cancelled), 60)
        await _save(herald, "cancelled_while_deferred", cancelled, receipt.run_id)
    finally:
        await publish_policy(pool, PolicyRules(), effective_from=datetime.now(UTC), owner="recorder", note="defaults again")


async def test_record_every_email_path(
    herald: HeraldClient, esp: Esp, pool: AsyncConnectionPool, temporal: Client, settings: Any
) -> None:
    """Writes one committed history per e-mail path: the relay's answers and its events."""
    HISTORIES.mkdir(exist_ok=True)
    short_horizon = {"resolution_horizon": timedelta(seconds=8)}
    for name, (fault, params) in EMAIL_SCENARIOS.items():
        if _recorded(name):
            continue
        key, to = fresh_key(), fresh_address()
        if fault:
            await esp.arm(to, fault, count=1, **params)
        # Paths that wait for events which never come end at the horizon: a short one.
        waits_to_horizon = fault == "no_events" or params.get("events") is False
        policy = TEST_POLICY.model_copy(update=short_horizon if waits_to_horizon else {})
        receipt = await herald.send(email_request(key, to), policy=policy)
        await asyncio.wait_for(herald.wait(key, Channel.EMAIL), 60)
        await _save(herald, name, key, receipt.run_id, Channel.EMAIL)
    if not _recorded("email_resent_after_the_stream_passed"):
        # The relay took nothing; a later e-mail's events show the stream flowing past the attempt.
        key, to = fresh_key(), fresh_address()
        await esp.arm(to, "drop_during_data", count=1)
        receipt = await herald.send(email_request(key, to))
        await asyncio.sleep(TEST_POLICY.submit_in_flight_bound.total_seconds() + 1)
        await herald.send(email_request(fresh_key(), fresh_address()))
        await asyncio.wait_for(herald.wait(key, Channel.EMAIL), 60)
        await _save(herald, "email_resent_after_the_stream_passed", key, receipt.run_id, Channel.EMAIL)
    if not _recorded("email_report_with_attachment"):
        ref = await PostgresArtifactStore(pool).put(
            b"%PDF-1.4 recorder " + secrets.token_bytes(64), media_type="application/pdf", filename="report.pdf"
        )
        key, to = fresh_key("monthly_report"), fresh_address()
        request = email_request(
            key, to, template_id="monthly_report", render_data={"seller_name": "Acme", "period": "2026-11"},
            attachment=ref.model_dump(),
        )  # fmt: skip
        receipt = await herald.send(request)
        await asyncio.wait_for(herald.wait(key, Channel.EMAIL), 60)
        await _save(herald, "email_report_with_attachment", key, receipt.run_id, Channel.EMAIL)
    if not _recorded("email_relayed_without_events"):
        # A plain relay: its own worker, configured without delivery events.
        key, to = fresh_key(), fresh_address()
        await esp.arm(to, "no_events")
        async with plain_relay(temporal, settings, pool) as relay_herald:
            receipt = await relay_herald.send(email_request(key, to))
            await asyncio.wait_for(relay_herald.wait(key, Channel.EMAIL), 60)
        await _save(relay_herald, "email_relayed_without_events", key, receipt.run_id, Channel.EMAIL)
