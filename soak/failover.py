"""The failover mix's two SMS providers: Twilio behind a gate that refuses in seeded windows, Infobip beside it, both counted at their emulators.

Twilio's emulator stays up the whole run with everything it accepted (the oracle); the workers reach it
through a TcpGate (devstack/tcp_gate.py) in this process, and closing the gate is the outage: a
connect is refused, carried connections are cut. The windows are drawn from the seed, bounded, and
stop when the last intent has been sent, so every lookup at Twilio can be answered while the run
settles. A published send policy routes the soak's category to [twilio, infobip] with a short
probe interval, as devstack/failover_demo.py and tests/integration/test_route_failover.py do.

What is counted here is counted at the emulators (messages per recipient, the fault each message met)
and read from the ledger only to say why (attempts.provider and route_reason, provider_marks).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from devstack.stack import LocalStack
from devstack.tcp_gate import TcpGate
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.policy_store import policy_in_force, publish_policy
from herald.ledger.store import open_pool

ROUTE = ["twilio", "infobip"]
# The soak's template (order_receipt) is transactional: the route is published for that category.
CATEGORY = Category.TRANSACTIONAL
# Twilio back within seconds of the gate opening, not the default 30 s: a soak's windows are short.
PROBE_SECONDS = 5
# Closed about 15 s out of every 45 s; each phase drawn within +-5 s of that, so no two runs of
# different seeds meet the same edges, and no window is shorter than 10 s (enough for the three
# Unreachable that make an outage, herald.core.routes.OUTAGE_AFTER, and for skips after them).
OPEN_SECONDS, CLOSED_SECONDS, JITTER_SECONDS = 30.0, 15.0, 5.0
# Answers lost after the provider took the message: resolved at their own provider, never failed over.
AMBIGUOUS_FAULTS = {"accept_then_hang", "accept_then_error"}
# Infobip's final groups in which the message never reached a handset (a repeat of an idempotent
# messageId too): not a copy, as Twilio's failed, undelivered and canceled are not.
INFOBIP_NOT_SENT = {"UNDELIVERABLE", "EXPIRED", "REJECTED"}


def number(to: str) -> str:
    """A recipient as both emulators can be compared by: Infobip takes numbers without the `+`."""
    return to.strip().lstrip("+")


def draw_phases(rng: random.Random) -> tuple[float, float]:
    """One cycle's (open, closed) seconds, each within JITTER_SECONDS of its nominal length."""
    return (OPEN_SECONDS + rng.uniform(-JITTER_SECONDS, JITTER_SECONDS),
            CLOSED_SECONDS + rng.uniform(-JITTER_SECONDS, JITTER_SECONDS))  # fmt: skip


@dataclass
class Window:
    """One outage: when the gate closed and opened again, by the monotonic clock and the wall clock
    (the ledger's times are wall-clock, stamped on this machine)."""

    closed_at: float
    closed_wall: datetime
    opened_at: float | None = None
    opened_wall: datetime | None = None

    def holds(self, at: float) -> bool:
        return self.closed_at <= at < (self.opened_at if self.opened_at is not None else float("inf"))

    def held(self, at: datetime) -> bool:
        return (
            self.closed_wall
            <= at
            < (self.opened_wall if self.opened_wall is not None else datetime.max.replace(tzinfo=UTC))
        )


@dataclass
class Outages:
    """Closes and opens the gate in seeded windows until told to stop, and remembers each window."""

    gate: TcpGate
    rng: random.Random
    windows: list[Window] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while True:
                open_for, closed_for = draw_phases(self.rng)
                if await _stopped_within(stop, open_for):
                    return
                await self.gate.refuse()
                window = Window(closed_at=time.monotonic(), closed_wall=datetime.now(UTC))
                self.windows.append(window)
                await _stopped_within(stop, closed_for)
                await self.gate.accept()
                window.opened_at, window.opened_wall = time.monotonic(), datetime.now(UTC)
                if stop.is_set():
                    return
        finally:
            await self.gate.accept()  # whatever happened, Twilio answers while the run settles


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
        return True
    except TimeoutError:
        return False


async def start_two_providers(stack: LocalStack) -> tuple[TcpGate, dict[str, str]]:
    """Start the Infobip emulator and a gate in front of Twilio's, publish the route; the gate and
    the environment the workers need (Twilio through the gate, Infobip's timeouts like Twilio's)."""
    stack.start_infobip()
    emulator = stack.config.emulator
    gate = TcpGate(emulator.host, emulator.port)
    await gate.start()
    adapter = stack.config.adapter
    env = {
        "HERALD_TWILIO_API_BASE": gate.url,
        # Infobip's adapter reads for 10 s by default; a 4 s hang must lose its answer there too.
        "HERALD_INFOBIP_READ_TIMEOUT": str(adapter.read_timeout),
        "HERALD_INFOBIP_CONNECT_TIMEOUT": str(adapter.connect_timeout),
    }
    assert stack.database_url is not None
    async with open_pool(stack.database_url, max_size=1) as pool:
        async with pool.connection() as conn:
            _, before = await policy_in_force(conn, datetime.now(UTC))
        rules = PolicyRules.model_validate({
            **before.model_dump(), "sms_routes": {CATEGORY: {"*": list(ROUTE)}},
            "provider_probe_after_seconds": PROBE_SECONDS,
        })  # fmt: skip
        await publish_policy(pool, rules, effective_from=datetime.now(UTC), owner="soak",
                             note="soak --mix failover: SMS to twilio, then infobip")  # fmt: skip
    return gate, env


def infobip_live(message: dict) -> bool:
    """Whether an Infobip message is a copy a handset may get (not refused, expired or a repeat)."""
    return message["duplicate_of"] is None and message["status"]["groupName"] not in INFOBIP_NOT_SENT


def infobip_unstored_reports(messages: Iterable[dict], inbox: set[tuple[str, str]]) -> int:
    """Reports the receipt server answered 2xx for that have no inbox row (a lost report)."""
    return sum(
        1
        for message in messages
        for report in message["reports"]
        if any(attempt["succeeded"] for attempt in report["attempts"])
        and (message["messageId"], report["status"]) not in inbox
    )


@dataclass(frozen=True)
class LedgerAttempt:
    """One attempts row: its reference, intent and number, the provider the route chose and why."""

    ref: str
    workflow_id: str
    number: int
    provider: str | None
    reason: str
    # When its row was written: in the transaction that admitted it and chose its provider.
    admitted_at: datetime | None = None


def cross_provider_duplicates(recipients: Sequence[str], twilio: Sequence[dict], infobip: Sequence[dict]) -> int:
    """Intents (one number each) with a message accepted at both emulators, whatever became of it."""
    at_twilio = {number(m["to"]) for m in twilio}
    at_infobip = {number(m["to"]) for m in infobip}
    return sum(1 for to in {number(r) for r in recipients} if to in at_twilio and to in at_infobip)


def failover_rows(
    *,
    recipients: Sequence[str],
    workflow_ids: Sequence[str],
    sent_at: Sequence[float],
    windows: Sequence[Window],
    twilio: Sequence[dict],
    infobip: Sequence[dict],
    attempts: Sequence[LedgerAttempt],
    marks: Sequence[tuple[str, str, str, datetime]],
    sending_seconds: float,
) -> list[tuple[str, str]]:
    """The table's failover rows; `marks` are provider_marks rows (provider, mark, attempt_ref, marked_at)."""
    twilio_to = Counter(number(m["to"]) for m in twilio)
    infobip_to = Counter(number(m["to"]) for m in infobip)
    by_intent: dict[str, list[LedgerAttempt]] = {}
    for attempt in sorted(attempts, key=lambda a: (a.workflow_id, a.number)):
        by_intent.setdefault(attempt.workflow_id, []).append(attempt)
    routes = [[a.provider for a in by_intent.get(wf, [])] for wf in workflow_ids]
    failed_over = [i for i, route in enumerate(routes) if "twilio" in route and "infobip" in route
                   and route.index("twilio") < route.index("infobip")]  # fmt: skip
    back = sum(
        1
        for route in routes
        if "infobip" in route and "twilio" in route and route.index("infobip") < route.index("twilio")
    )
    first = [by_intent[wf][0] for wf in workflow_ids if by_intent.get(wf)]
    skipped = sum(
        1 for a in first if a.provider == "infobip" and "twilio in outage" in a.reason and "skipped" in a.reason
    )
    probes = [a.ref for a in attempts if "probes it" in a.reason]
    # What each probe's submit told: an answer ends the outage, a refusal or 429 extends it, and a
    # lost answer (a hang, a 5xx: the probe met an armed fault) tells nothing; the next probe is due
    # PROBE_SECONDS after the newest mark.
    told = {(ref, mark) for _, mark, ref, _ in marks}
    probes_answered = sum(1 for ref in probes if (ref, "answered") in told)
    probes_unreachable = sum(1 for ref in probes if (ref, "unreachable") in told)
    unreachable_refs = {ref for provider, mark, ref, _ in marks if mark == "unreachable" and provider == "twilio"}
    proven_unreachable = sum(
        1
        for i in failed_over
        if any(a.provider == "twilio" and a.ref in unreachable_refs for a in by_intent[workflow_ids[i]])
    )
    # The failover's cost in time: from the attempt Twilio provably did not take to the one at Infobip.
    gaps = []
    for i in failed_over:
        tried = by_intent[workflow_ids[i]]
        to_infobip = next(a.admitted_at for a in tried if a.provider == "infobip")
        before = [
            a.admitted_at
            for a in tried
            if a.provider == "twilio" and a.admitted_at and to_infobip and a.admitted_at < to_infobip
        ]
        if before and to_infobip:
            gaps.append((to_infobip - max(before)).total_seconds())
    in_window = [i for i, at in enumerate(sent_at) if any(w.holds(at) for w in windows)]
    between = [i for i in range(len(recipients)) if i not in set(in_window)]
    # Sent in a window is the sender's view; the route sees the first attempt, which may come later
    # (a worker killed under it, a backlog): this is where the window meets the route.
    admitted_in_window = [
        i for i, wf in enumerate(workflow_ids)
        if by_intent.get(wf) and (at := by_intent[wf][0].admitted_at) is not None and any(w.held(at) for w in windows)
    ]  # fmt: skip

    def where(indexes: list[int]) -> str:
        only_t = sum(1 for i in indexes if twilio_to[number(recipients[i])] and not infobip_to[number(recipients[i])])
        only_i = sum(1 for i in indexes if infobip_to[number(recipients[i])] and not twilio_to[number(recipients[i])])
        return f"{len(indexes)}: at twilio only {only_t}, at infobip only {only_i}"

    # Ambiguous answers (the message taken, its answer lost) and where else their intent has a message.
    ambiguous_t = [number(m["to"]) for m in twilio if m["fault"] in AMBIGUOUS_FAULTS]
    ambiguous_i = [number(m["to"]) for m in infobip if m["fault"] in AMBIGUOUS_FAULTS]
    strayed = sum(1 for to in ambiguous_t if infobip_to[to]) + sum(1 for to in ambiguous_i if twilio_to[to])
    # How soon Twilio answered again after each window: the first answered mark after the gate opened.
    answered = sorted(at for provider, mark, _, at in marks if provider == "twilio" and mark == "answered")
    back_after = [
        (next(at for at in answered if at >= w.opened_wall) - w.opened_wall).total_seconds()
        for w in windows
        if w.opened_wall is not None and any(at >= w.opened_wall for at in answered)
    ]
    closed = [(w.opened_at or w.closed_at) - w.closed_at for w in windows]
    n_unreachable = Counter(provider for provider, mark, _, _ in marks if mark == "unreachable")
    return [
        ("accepted at twilio", f"{len(twilio)} (for {len(twilio_to)} intents)"),
        ("accepted at infobip", f"{len(infobip)} (for {len(infobip_to)} intents)"),
        ("cross-provider duplicates (an intent with messages at both, target 0)",
         f"{cross_provider_duplicates(recipients, twilio, infobip)}"),
        ("intents that failed over (attempts at twilio, then infobip)",
         f"{len(failed_over)} (a twilio attempt of {proven_unreachable} marked unreachable; the rest proven "
         "absent or refused)"),
        ("failover gap (last twilio attempt to first infobip attempt)",
         f"median {statistics.median(gaps):.1f} s, max {max(gaps):.1f} s" if gaps else "none failed over"),
        ("intents that went straight to infobip (twilio in outage: skipped)", f"{skipped}"),
        ("intents back from infobip to twilio (infobip proven not to have taken it)", f"{back}"),
        ("probes of twilio in outage",
         f"{len(probes)} (answered {probes_answered}, unreachable {probes_unreachable}, answer lost "
         f"{len(probes) - probes_answered - probes_unreachable})"),
        ("answers lost after acceptance, then a message at the other provider (target 0)",
         f"{strayed} (of {len(ambiguous_t)} at twilio, {len(ambiguous_i)} at infobip)"),
        ("outage windows (twilio refusing connections)",
         f"{len(windows)}, {min(closed, default=0):.0f}-{max(closed, default=0):.0f} s each, {sum(closed):.0f} s of "
         f"{sending_seconds:.0f} s sending"),
        ("unreachable marks (refused connections, 429s)", ", ".join(f"{p} {n}" for p, n in sorted(n_unreachable.items()))),
        ("twilio answering again after a window opened (its first answer)",
         f"median {statistics.median(back_after):.1f} s, max {max(back_after):.1f} s over {len(back_after)} windows"
         if back_after else "never seen"),
        ("intents sent during a window", where(in_window)),
        ("intents sent between windows", where(between)),
        ("intents whose first attempt was admitted during a window", where(admitted_in_window)),
    ]  # fmt: skip
