"""Resubmission under the same messageId against the real Infobip emulator with idempotent sending
on (``--idempotency-grace``), counted at the emulator.

The test runs its own Infobip emulator (``tests/infobip_emulator.py``: a real HTTP server on
127.0.0.1, the session's keys, reports posted to the session's receipt server) with a grace of
``GRACE`` seconds, and two routes of workers on queues of their own, each with Infobip as its only
SMS provider: one whose adapter declares the grace (``HERALD_INFOBIP_IDEMPOTENCY_GRACE_SECONDS``),
one whose adapter does not (the setting unset: off).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import timedelta
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.processes import free_port
from devstack.stack import LocalStack
from emulator.infobip.config import InfobipConfig
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.lifecycle import IntentState, ObservationKind, SubmitResult
from herald.core.message import Channel
from herald.privacy.recipient_vault import RecipientVault
from herald.providers.infobip import InfobipAdapter
from herald.providers.registry import Providers
from tests import reads
from tests.infobip_emulator import InfobipThread
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING
from tests.stack import ADAPTER_READ_TIMEOUT, TEST_POLICY, Infobip
from worker import build_submit_worker, build_worker

WAIT = 90.0
GRACE = 300  # seconds, at the emulator and in the deduping adapter's setting
# The emulator's lifecycle step: a repeat's REJECTED_DUPLICATE_MESSAGE_ID report comes one step after
# it (and proves the message exists: it settles the intent as accepted), the original's final report
# two steps after acceptance; 15 s lets all three resubmissions (2, 4, 8 s apart) be made first.
STEP_MS = 15_000
# The suite's clocks, with a horizon that outlasts the emulator's slower steps.
POLICY = TEST_POLICY.model_copy(update={"resolution_horizon": timedelta(minutes=2)})


class Dedupe:
    def __init__(self, on: HeraldClient, off: HeraldClient, emulator: Infobip) -> None:
        self.on, self.off, self.emulator = on, off, emulator

    async def at_emulator(self, to: str) -> tuple[int, int, int]:
        """For `to`: messages accepted under any id, of them sent to the handset, rejected as repeats."""
        messages = await self.emulator.messages(to)
        sent = sum(1 for m in messages if m["sent"])
        return len(messages), sent, sum(1 for m in messages if m["duplicate_of"] is not None)


@asynccontextmanager
async def _route(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, adapter: InfobipAdapter
) -> AsyncIterator[HeraldClient]:
    """Workers on a fresh queue whose only SMS provider is `adapter`, and a client that starts intents there."""
    queue = f"herald-dedupe-{secrets.token_hex(3)}"
    on_queue = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": queue})})
    activities = ProviderActivities(
        Providers({Channel.SMS: [adapter]}), settings.receipts.public_url, pool,
        vault=RecipientVault(pool, SESSION_KEKS), keyring=SESSION_KEYRING,
    )  # fmt: skip
    ledger = LedgerActivities(pool, RecipientVault(pool, SESSION_KEKS))
    async with AsyncExitStack() as workers:
        workers.push_async_callback(adapter.aclose)
        await workers.enter_async_context(build_worker(temporal, on_queue, ledger, activities))
        await workers.enter_async_context(build_submit_worker(temporal, on_queue, activities))
        yield HeraldClient(temporal, queue, policy=POLICY, keyring=SESSION_KEYRING)


@pytest.fixture(scope="module")
async def dedupe(
    stack: LocalStack, settings: Any, temporal: Client, pool: AsyncConnectionPool, receipt_server: str
) -> AsyncIterator[Dedupe]:
    i = stack.config.infobip
    config = InfobipConfig(
        port=free_port(), api_key=i.api_key, step_ms=STEP_MS, time_factor=0.002, idempotency_grace_seconds=GRACE,
        webhook_basic_username=i.webhook_username, webhook_basic_password=i.webhook_password,
    )  # fmt: skip
    emulator = InfobipThread(config).start()
    try:
        # The suite's short read timeout (the stack's Infobip settings keep the 10 s default).
        at = settings.infobip.model_copy(update={"base_url": emulator.url, "read_timeout": ADAPTER_READ_TIMEOUT})
        deduping = InfobipAdapter(at.model_copy(update={"idempotency_grace_seconds": GRACE}))
        assert deduping.capabilities.resubmit_dedupe_seconds == GRACE
        plain = InfobipAdapter(at)
        assert plain.capabilities.resubmit_dedupe_seconds is None
        async with _route(temporal, settings, pool, deduping) as on, _route(temporal, settings, pool, plain) as off:
            async with Infobip(emulator.url) as admin:
                yield Dedupe(on, off, admin)
    finally:
        emulator.close()


async def _resubmissions(pool: AsyncConnectionPool, workflow_id: str) -> list[str]:
    """The ledger's record of each resubmission of the intent (observation reasons, in order)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT reason FROM observations WHERE workflow_id = %s AND kind = %s ORDER BY seq",
            (workflow_id, ObservationKind.RESUBMITTED.value),
        )
        return [reason for (reason,) in await cursor.fetchall()]


async def _inbox_statuses(pool: AsyncConnectionPool, message_id: str) -> list[str]:
    """The statuses Herald's receipt inbox stored for Infobip's reports on `message_id`."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT provider_status FROM receipt_inbox WHERE provider = 'infobip' AND provider_message_id = %s",
            (message_id,),
        )
        return [status for (status,) in await cursor.fetchall()]


def _only_attempt(final: IntentStatus) -> Any:
    assert final.state is IntentState.DELIVERED, final.transitions
    [attempt] = final.attempts
    assert (attempt.provider, attempt.submit_result) == ("infobip", SubmitResult.ACCEPTED)
    return attempt


# ---- the three scenarios, played at once (each waits on the emulator's 15 s steps) ----------------


@dataclass(frozen=True)
class Played:
    lost: list[tuple[IntentStatus, str]]  # (final, recipient), accept_then_hang and accept_then_error
    slow: tuple[IntentStatus, str, float]  # timeout, 500, 500: (final, recipient, seconds until accepted)
    off: tuple[IntentStatus, str]  # the setting unset


async def _lost_answers(dedupe: Dedupe) -> list[tuple[IntentStatus, str]]:
    cases = {fresh_key(): (fresh_recipient(), fault) for fault in ("accept_then_hang", "accept_then_error")}
    for to, fault in cases.values():
        params = {"hang_seconds": ADAPTER_READ_TIMEOUT * 3} if fault == "accept_then_hang" else {"status": 503}
        await dedupe.emulator.arm(to, fault, count=1, **params)
    await asyncio.gather(*(dedupe.on.send(receipt_request(key, to)) for key, (to, _) in cases.items()))
    finals = await asyncio.gather(*(reads.final(dedupe.on, key, Channel.SMS, WAIT) for key in cases))
    return [(final, to) for final, (to, _) in zip(finals, cases.values(), strict=True)]


async def _timeout_then_two_5xx(dedupe: Dedupe) -> tuple[IntentStatus, str, float]:
    key, to = fresh_key(), fresh_recipient()
    await dedupe.emulator.arm(to, "accept_then_hang", count=1, hang_seconds=ADAPTER_READ_TIMEOUT * 3)
    started = time.monotonic()
    await dedupe.on.send(receipt_request(key, to))
    while not await dedupe.emulator.messages(to):  # the first call created the message, and hangs
        assert time.monotonic() - started < WAIT
        await asyncio.sleep(0.05)
    # Armed within the hang (1 s), well before the first resubmission (2 s after the timeout).
    await dedupe.emulator.arm(to, "accept_then_error", count=2, status=500)
    while (await dedupe.on.status(key, Channel.SMS)).state is IntentState.SUBMITTING:
        assert time.monotonic() - started < WAIT
        await asyncio.sleep(0.05)
    accepted_after = time.monotonic() - started
    return await reads.final(dedupe.on, key, Channel.SMS, WAIT), to, accepted_after


async def _setting_off(dedupe: Dedupe) -> tuple[IntentStatus, str]:
    key, to = fresh_key(), fresh_recipient()
    await dedupe.emulator.arm(to, "accept_then_error", count=1, status=500)
    await dedupe.off.send(receipt_request(key, to))
    return await reads.final(dedupe.off, key, Channel.SMS, WAIT), to


@pytest.fixture(scope="module")
async def played(dedupe: Dedupe) -> Played:
    """The scenarios run together, on their own recipients: each waits on the emulator's steps, so
    one after another they took three times as long."""
    lost, slow, off = await asyncio.gather(_lost_answers(dedupe), _timeout_then_two_5xx(dedupe), _setting_off(dedupe))
    return Played(lost=lost, slow=slow, off=off)


async def test_lost_answers_at_infobip_are_resubmitted_under_the_same_id_and_sent_once(
    played: Played, dedupe: Dedupe, pool: AsyncConnectionPool
) -> None:
    """Infobip accepts and hangs, or accepts and answers 5xx: Herald resubmits the same attempt under
    the same messageId; the emulator rejects the repeat as a duplicate, and the handset gets 1 message."""
    for final, to in played.lost:
        attempt = _only_attempt(final)
        assert attempt.resubmissions == 1
        assert len(await _resubmissions(pool, final.workflow_id)) == 1
        # Two requests under one id: the original sent, the repeat rejected at processing.
        assert await dedupe.at_emulator(to) == (2, 1, 1)
        [repeat] = [m for m in await dedupe.emulator.messages(to) if m["duplicate_of"] is not None]
        assert repeat["messageId"] == attempt.attempt_ref
        assert repeat["status"]["name"] == "REJECTED_DUPLICATE_MESSAGE_ID"
        # Its report reached Herald before the original's DELIVERED, and was no failure: delivered.
        assert any("DUPLICATE" in status for status in await _inbox_statuses(pool, attempt.attempt_ref))


async def test_a_timeout_then_two_5xx_is_accepted_in_seconds(
    played: Played, dedupe: Dedupe, pool: AsyncConnectionPool
) -> None:
    """The issue's case against the real stack: a timeout, then two 5xx after acceptance; accepted on
    the third resubmission, one message at the handset, three repeats rejected (time printed)."""
    final, to, accepted_after = played.slow
    attempt = _only_attempt(final)
    assert attempt.resubmissions == 3 and len(await _resubmissions(pool, final.workflow_id)) == 3
    assert await dedupe.at_emulator(to) == (4, 1, 3)
    assert accepted_after < WAIT
    print(f"\nInfobip with idempotency on: timeout ({ADAPTER_READ_TIMEOUT:g} s read timeout), 500, 500, then "
          f"accepted {accepted_after:.1f} s after the send (3 resubmissions 2, 4, 8 s apart); 1 message at the "
          f"handset, 3 repeats rejected as duplicates")  # fmt: skip


async def test_with_the_setting_off_herald_never_resubmits(
    played: Played, dedupe: Dedupe, pool: AsyncConnectionPool
) -> None:
    """The adapter declares no dedupe (the setting unset): a lost answer is only looked up, never
    resubmitted, even though the emulator would refuse a repeat: 1 request, 1 message."""
    final, to = played.off
    assert final.state is IntentState.DELIVERED, final.transitions
    [attempt] = final.attempts
    assert attempt.submit_result is SubmitResult.UNKNOWN and attempt.resubmissions == 0
    assert await _resubmissions(pool, final.workflow_id) == []
    assert await dedupe.at_emulator(to) == (1, 1, 0)
