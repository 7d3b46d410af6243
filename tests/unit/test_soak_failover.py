"""The failover soak's counting and outage windows (soak/failover.py): what it counts at the emulators
as a copy, a cross-provider duplicate and a lost report, and windows that are seeded, bounded and
always end with Twilio answering."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest

from soak import failover
from soak.failover import LedgerAttempt, Outages, Window


def _twilio(to: str, fault: str | None = None) -> dict:
    return {"to": to, "fault": fault, "status": "delivered"}


def _infobip(to: str, group: str = "DELIVERED", fault: str | None = None, duplicate_of: int | None = None) -> dict:
    return {"to": to, "fault": fault, "status": {"groupName": group}, "duplicate_of": duplicate_of}


def test_an_intent_with_a_message_at_each_emulator_is_one_cross_provider_duplicate() -> None:
    """Numbers compare with or without their `+`; a message at both counts whatever became of it."""
    recipients = ["+15550000001", "+15550000002", "+15550000003"]
    twilio = [_twilio("+15550000001"), _twilio("+15550000002")]
    infobip = [_infobip("15550000002", group="REJECTED"), _infobip("15550000003")]
    assert failover.cross_provider_duplicates(recipients, twilio, infobip) == 1


def test_infobip_messages_never_sent_are_not_copies() -> None:
    """Refused, expired and undeliverable messages and repeats of an idempotent messageId are not live copies."""
    assert failover.infobip_live(_infobip("1", "DELIVERED"))
    assert failover.infobip_live(_infobip("1", "PENDING"))
    for group in ("REJECTED", "EXPIRED", "UNDELIVERABLE"):
        assert not failover.infobip_live(_infobip("1", group))
    assert not failover.infobip_live(_infobip("1", "DELIVERED", duplicate_of=3))


def test_an_infobip_report_acknowledged_without_an_inbox_row_is_lost() -> None:
    """A report the receipt server answered 2xx for must have its (messageId, status) row; one whose
    posts all failed was never acknowledged and is not counted."""
    message = {
        "messageId": "att-1",
        "reports": [
            {"status": "DELIVERED_TO_HANDSET", "attempts": [{"succeeded": False}, {"succeeded": True}]},
            {"status": "PENDING_ENROUTE", "attempts": [{"succeeded": False}]},
        ],
    }
    assert failover.infobip_unstored_reports([message], set()) == 1
    assert failover.infobip_unstored_reports([message], {("att-1", "DELIVERED_TO_HANDSET")}) == 0


def test_outage_phases_are_seeded_and_bounded() -> None:
    """One seed draws one schedule; every phase stays within its jitter of 30 s open, 15 s closed."""
    rng_a, rng_b = random.Random("7-outages"), random.Random("7-outages")
    drawn = [failover.draw_phases(rng_a) for _ in range(200)]
    assert drawn == [failover.draw_phases(rng_b) for _ in range(200)]
    for open_for, closed_for in drawn:
        assert 25.0 <= open_for <= 35.0 and 10.0 <= closed_for <= 20.0


class _Gate:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def refuse(self) -> None:
        self.calls.append("refuse")

    async def accept(self) -> None:
        self.calls.append("accept")


async def test_outages_end_with_the_gate_accepting_when_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows alternate refuse and accept, each recorded with its end; stopped inside a window, the
    gate opens again and the window is closed, so Twilio answers while the run settles."""
    monkeypatch.setattr(failover, "draw_phases", lambda rng: (0.01, 0.05))
    gate, stop = _Gate(), asyncio.Event()
    outages = Outages(gate, random.Random(1))  # type: ignore[arg-type]
    running = asyncio.create_task(outages.run(stop))
    while len(outages.windows) < 3:
        await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(running, 2)
    assert gate.calls[-1] == "accept" and gate.calls[:4] == ["refuse", "accept", "refuse", "accept"]
    assert all(w.opened_at is not None and w.opened_at > w.closed_at for w in outages.windows)


def test_failover_rows_tell_failed_over_skipped_and_returned_intents_apart() -> None:
    """From the ledger's attempts: twilio then infobip is a failover (its unreachable mark named), a
    first attempt at infobip with twilio skipped is a skip, infobip then twilio a return; windows
    split the intents by when they were sent, and stray ambiguous answers are counted."""
    opened = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    recipients = ["+15550000001", "+15550000002", "+15550000003", "+15550000004"]
    wf = [f"wf-{i}" for i in range(4)]
    attempts = [
        LedgerAttempt(
            "a1", "wf-0", 1, "twilio", "route transactional v2 ['twilio', 'infobip']", opened - timedelta(seconds=3)
        ),
        LedgerAttempt("a2", "wf-0", 2, "infobip", "route ...; twilio moved last", opened - timedelta(seconds=2.5)),
        LedgerAttempt("b1", "wf-1", 1, "infobip", "route ...; twilio in outage since x: skipped"),
        LedgerAttempt("c1", "wf-2", 1, "infobip", "route ..."),
        LedgerAttempt("c2", "wf-2", 2, "twilio", "route ...; twilio in outage since x: this attempt probes it"),
        LedgerAttempt("d1", "wf-3", 1, "twilio", "route ..."),
    ]
    marks = [
        ("twilio", "unreachable", "a1", opened - timedelta(seconds=10)),
        ("twilio", "answered", "c2", opened + timedelta(seconds=4)),
    ]
    rows = dict(
        failover.failover_rows(
            recipients=recipients, workflow_ids=wf, sent_at=[1.0, 2.0, 3.0, 9.0],
            windows=[Window(closed_at=0.5, closed_wall=opened - timedelta(seconds=4.5), opened_at=5.0, opened_wall=opened)],
            twilio=[_twilio("+15550000003"), _twilio("+15550000004", fault="accept_then_hang")],
            infobip=[_infobip("15550000001"), _infobip("15550000002")], attempts=attempts, marks=marks,
            sending_seconds=9.0,
        )
    )  # fmt: skip
    assert rows["intents that failed over (attempts at twilio, then infobip)"].startswith("1 (a twilio attempt of 1 ")
    assert rows["failover gap (last twilio attempt to first infobip attempt)"] == "median 0.5 s, max 0.5 s"
    assert rows["intents that went straight to infobip (twilio in outage: skipped)"] == "1"
    assert rows["intents back from infobip to twilio (infobip proven not to have taken it)"] == "1"
    assert rows["probes of twilio in outage"] == "1 (answered 1, unreachable 0, answer lost 0)"
    assert rows["cross-provider duplicates (an intent with messages at both, target 0)"] == "0"
    assert rows["answers lost after acceptance, then a message at the other provider (target 0)"].startswith("0 (of 1 ")
    assert rows["intents sent during a window"] == "3: at twilio only 1, at infobip only 2"
    assert rows["intents sent between windows"] == "1: at twilio only 1, at infobip only 0"
    assert rows["intents whose first attempt was admitted during a window"] == "1: at twilio only 0, at infobip only 1"
    assert rows["twilio answering again after a window opened (its first answer)"].startswith("median 4.0 s")
