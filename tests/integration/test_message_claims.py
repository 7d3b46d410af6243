"""A provider message belongs to one attempt (issue 29): two intents, one number, one body, moments
apart, against the real emulator, Temporal and PostgreSQL.

Which attempt created each message is read at the emulator, from the attempt reference in the
StatusCallback URL each create carried; never from Herald's own records. The scenarios play at once,
each on its own number (`tests/played.py`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from herald.client import HeraldClient
from herald.core.lifecycle import IntentState, ObservationKind, Source
from herald.core.rows import InboxReport, ObservationRow
from herald.ledger.claims import claim_observed
from herald.ledger.report import ledger_report
from herald.ledger.store import store_reports
from tests import reads
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.played import Scenario, play
from tests.stack import TEST_POLICY, Emulator

# Long enough for both intents to be looked up, short enough that `unknown` comes in the suite's time.
# The in-flight bound is long so that A's create, whenever a loaded machine gets to it, still falls
# inside B's window: the test is about doubt, not about timing.
DOUBT_POLICY = TEST_POLICY.model_copy(
    update={"resolution_horizon": timedelta(seconds=15), "submit_in_flight_bound": timedelta(seconds=20)}
)


def _creator(message: dict[str, Any]) -> str:
    """The attempt reference the create request carried (Herald's creates all name one)."""
    return parse_qs(urlsplit(message["status_callback"]).query)["attempt"][0]


async def _claims(pool: AsyncConnectionPool, *workflow_ids: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            "SELECT provider_message_id, attempt_ref, workflow_id, basis FROM message_claims WHERE workflow_id = ANY(%s)",
            (list(workflow_ids),),
        )
        return await cursor.fetchall()


async def _created(emulator: Emulator, to: str, count: int) -> None:
    """Until the emulator holds `count` messages to `to`."""
    deadline = asyncio.get_running_loop().time() + 30
    while len(await emulator.messages(to)) < count:
        assert asyncio.get_running_loop().time() < deadline, "the emulator never created the message"
        await asyncio.sleep(0.05)


async def _unavailable_reasons(pool: AsyncConnectionPool, workflow_id: str) -> list[str]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT reason FROM observations WHERE workflow_id = %s AND kind = 'unavailable' ORDER BY seq",
            (workflow_id,),
        )
        return [reason for (reason,) in await cursor.fetchall()]


async def _a_lost_submit_is_never_credited_with_the_twin_intents_message(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    first, second = fresh_key(), fresh_key()
    await herald.send(receipt_request(first, to), policy=TEST_POLICY)
    await _created(emulator, to, 1)
    await emulator.arm(to, "error_500", count=1)
    await herald.send(receipt_request(second, to), policy=TEST_POLICY)
    a, b = await reads.final(herald, first), await reads.final(herald, second)
    messages = await emulator.messages(to)
    assert len({m["body"] for m in messages}) == 1, "the twins' bodies must be one text for the test to mean anything"
    by_sid = {m["sid"]: m for m in messages}
    for final in (a, b):
        assert final.state is IntentState.DELIVERED
        delivered = [attempt for attempt in final.attempts if attempt.provider_id is not None]
        assert delivered, f"{final.workflow_id} has no provider message"
        for attempt in delivered:
            # The message the intent holds is the one its own attempt's create asked for.
            assert (
                _creator(by_sid[attempt.provider_id]) == attempt.attempt_ref
            ), f"{final.workflow_id} credited with another attempt's message"
    assert len(messages) == 2
    # B's first attempt was looked up and proven absent (A's message is A's), then B sent once more.
    assert len(b.attempts) == 2 and b.attempts[0].provider_id is None
    claims = await _claims(pool, f"{first}/sms", f"{second}/sms")
    assert {c["provider_message_id"]: c["attempt_ref"] for c in claims} == {m["sid"]: _creator(m) for m in messages}


async def _one_message_that_fits_two_lost_answers_stays_doubt(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    first, second = fresh_key(), fresh_key()
    await emulator.arm(to, "error_500", count=1)
    await herald.send(receipt_request(second, to), policy=DOUBT_POLICY)
    await _answered(herald, second)
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, callbacks=False, count=1)
    await herald.send(receipt_request(first, to), policy=DOUBT_POLICY)
    a, b = await reads.final(herald, first), await reads.final(herald, second)
    assert len(await emulator.messages(to)) == 1
    assert (a.state, b.state) == (IntentState.UNKNOWN, IntentState.UNKNOWN)
    assert [len(a.attempts), len(b.attempts)] == [1, 1]
    assert a.attempts[0].provider_id is None and b.attempts[0].provider_id is None
    assert await _claims(pool, f"{first}/sms", f"{second}/sms") == []
    for key in (first, second):
        assert any("could be another unresolved attempt's" in r for r in await _unavailable_reasons(pool, f"{key}/sms"))


async def _answered(herald: HeraldClient, key: str) -> None:
    """Until the intent's first submit has answered."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        status = await herald.status(key)
        if status.attempts and status.attempts[0].submit_result is not None:
            return
        assert asyncio.get_running_loop().time() < deadline, "the first submit never answered"
        await asyncio.sleep(0.05)


async def _a_lost_answer_is_claimed_when_no_other_attempt_could_have_made_the_message(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool
) -> None:
    to = fresh_recipient()
    first, second = fresh_key(), fresh_key()
    await emulator.arm(to, "accept_then_hang", hang_seconds=3, callbacks=False, count=1)
    policy = TEST_POLICY.model_copy(update={"lookup_first_delay": timedelta(seconds=8)})
    await herald.send(receipt_request(first, to), policy=policy)
    await asyncio.sleep(6)
    await herald.send(receipt_request(second, to), policy=TEST_POLICY)
    a, b = await reads.final(herald, first), await reads.final(herald, second)
    messages = await emulator.messages(to)
    assert len(messages) == 2
    by_sid = {m["sid"]: m for m in messages}
    assert (a.state, b.state) == (IntentState.DELIVERED, IntentState.DELIVERED)
    assert _creator(by_sid[a.attempts[0].provider_id]) == a.attempts[0].attempt_ref
    assert _creator(by_sid[b.attempts[0].provider_id]) == b.attempts[0].attempt_ref
    bases = {c["attempt_ref"]: c["basis"] for c in await _claims(pool, f"{first}/sms", f"{second}/sms")}
    assert bases[a.attempts[0].attempt_ref] == "lookup_by_reference"


# ---- played at once ------------------------------------------------------------------------------

SCENARIOS: list[Scenario] = [
    _a_lost_submit_is_never_credited_with_the_twin_intents_message,
    _one_message_that_fits_two_lost_answers_stays_doubt,
    _a_lost_answer_is_claimed_when_no_other_attempt_could_have_made_the_message,
]


@pytest.fixture(scope="module")
async def played(herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool) -> dict[str, asyncio.Task[None]]:
    """The twins' scenarios started at once, each pair on its own number: they wait on lookups and horizons."""
    return play(SCENARIOS, herald=herald, emulator=emulator, pool=pool)


async def test_a_lost_submit_is_never_credited_with_the_twin_intents_message(
    played: dict[str, asyncio.Task[None]],
) -> None:
    """Intent A is delivered; intent B (same number, same body, moments later) has its submit lost
    before Twilio created anything (a 500): B's lookup fits A's message, which A holds, so B proves
    its own absence and sends its own copy. Two intents, two messages, each delivered on its own."""
    await played["a_lost_submit_is_never_credited_with_the_twin_intents_message"]


async def test_one_message_that_fits_two_lost_answers_stays_doubt(played: dict[str, asyncio.Task[None]]) -> None:
    """B's submit is lost before anything is created; A's create, a moment later, is accepted but its
    answer lost and no report comes. The one message fits both: neither claims it, neither resends,
    and both end `unknown` at the horizon, saying why; never `delivered` on what may be the other's."""
    await played["one_message_that_fits_two_lost_answers_stays_doubt"]


async def test_a_lost_answer_is_claimed_when_no_other_attempt_could_have_made_the_message(
    played: dict[str, asyncio.Task[None]],
) -> None:
    """A's create is accepted, its answer lost, no report; B (same number and body) goes 6 s later and is
    delivered. A's lookup sees two fitting messages, one held by B; the other it may claim (no other
    attempt could have created it), so A ends delivered on the message its own create made."""
    await played["a_lost_answer_is_claimed_when_no_other_attempt_could_have_made_the_message"]


async def test_a_second_claim_on_a_held_message_is_refused_and_counted(
    herald: HeraldClient, emulator: Emulator, pool: AsyncConnectionPool, played: dict[str, asyncio.Task[None]]
) -> None:
    """A report, and the checkpoint that records it, naming another intent's attempt for a message the
    ledger gives to A are stored, but the claim is refused: one holder, one refusal (the same attempt,
    message and basis, however often it is written again), and the report counts it."""
    # Last, alone: it counts the report's refused claims before and after, which the twins may add to.
    await asyncio.gather(*played.values(), return_exceptions=True)
    to, key, other_key = fresh_recipient(), fresh_key(), fresh_key()
    await herald.send(receipt_request(key, to), policy=TEST_POLICY)
    await herald.send(receipt_request(other_key, fresh_recipient()), policy=TEST_POLICY)
    final, other = await reads.final(herald, key), await reads.final(herald, other_key)
    (message,) = await emulator.messages(to)
    before = (await ledger_report(pool)).refused_claims
    # What a provider that broke its documentation would say: A's message under B's attempt.
    report = InboxReport(
        provider="twilio", provider_message_id=message["sid"], provider_status="read",
        attempt_ref=other.attempts[0].attempt_ref, error_code=None, provider_event_at=None, payload={},
    )  # fmt: skip
    observed = ObservationRow(
        workflow_id=f"{other_key}/sms", seq=1000, attempt_number=1, source=Source.REPORT,
        kind=ObservationKind.STATUS, provider_id=message["sid"], provider_status="delivered", applied=False,
        reason="a report naming another intent's message", observed_at=datetime.now(UTC),
    )  # fmt: skip
    for _ in range(2):
        async with pool.connection() as conn, conn.transaction():
            await store_reports(conn, [report])
            async with conn.cursor() as cursor:
                await claim_observed(cursor, [observed])
    holders = await _claims(pool, f"{key}/sms", f"{other_key}/sms")
    assert [c["attempt_ref"] for c in holders if c["provider_message_id"] == message["sid"]] == [
        final.attempts[0].attempt_ref
    ]
    after = await ledger_report(pool)
    assert after.refused_claims == before + 1
    assert f"refused double claims {after.refused_claims}" in after.render()
