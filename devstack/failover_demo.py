"""The demo's Twilio outage: Twilio refusing, SMS notices going once each through Infobip, then to Twilio again.

The scene publishes a send policy routing SMS to ["twilio", "infobip"] and runs its own route in this
process: worker.py's two workers, built as worker.py builds them, on a task queue of their own, whose
Twilio adapter reaches the stack's Twilio emulator through a TCP gate. Closing the gate is the outage
for real: nothing listens on its port (a connect gets ECONNREFUSED) and the connections it carried are
cut, while the Twilio emulator itself stays up with everything it accepted (stopping it would lose its
messages, the oracle the scene counts at), and the Infobip emulator is not touched.

During the outage two waves of notices are sent: the first finds Twilio refusing (Unreachable: provably
nothing sent) and fails over at once; after three of those Twilio is in outage and the second wave skips
it. The gate opens again, and Herald goes on skipping Twilio until its probe is due, PROBE_SECONDS after
its last Unreachable (the scene's policy says so: ``provider_probe_after_seconds``, 30 s by default):
the scene says so and waits. The first notice after
that probes Twilio and its answer ends the outage; the last ones go to Twilio as before. Each notice is
counted at both emulators' admin APIs, not in Herald. The policy in force before is published again at
the end, so the rest of the stack goes on as it was.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.demo_rows import phone
from devstack.tcp_gate import TcpGate
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.routes import OUTAGE_AFTER
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.policy_store import policy_in_force, publish_policy
from herald.ledger.provider_marks import provider_states
from herald.runtime.process import LEDGER, ProcessRuntime
from worker import build_providers, build_submit_worker, workflow_workers

ROUTE = ["twilio", "infobip"]
# The first wave makes the outage (three Unreachable: herald.core.routes.OUTAGE_AFTER), the second
# meets it; a few after it show Twilio back. Small: the scene's time is the probe's 30 s wait.
FIRST_WAVE, SECOND_WAVE, AFTER = OUTAGE_AFTER, 3, 3
# The scene's policy probes Twilio 10 s after its last Unreachable (the default is 30 s): long enough
# to see new notices skip it, short enough that make run does not stand still.
PROBE_SECONDS = 10
# Bound on each wave's wait for its notices to close (they close in seconds).
SETTLE_SECONDS = 60.0
_DATA = {"order_ref": "ord_failover", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}


@asynccontextmanager
async def failover_route(
    runtime: ProcessRuntime, policy: DeliveryPolicy
) -> AsyncIterator[tuple[HeraldClient, TcpGate]]:
    """The scene's route in this process: worker.py's workers on a task queue of their own, Twilio
    reached through an open gate; a client sending on it, and the gate."""
    settings, keyring = runtime.settings(), runtime.keyring()
    upstream = httpx.URL(str(settings.twilio.api_base))
    gate = TcpGate(upstream.host, upstream.port or 80)
    await gate.start()
    queue = f"herald-demo-failover-{secrets.token_hex(3)}"
    settings = settings.model_copy(update={
        "temporal": settings.temporal.model_copy(update={"task_queue": queue}),
        "twilio": settings.twilio.model_copy(update={"api_base": gate.url}),
    })  # fmt: skip
    client = await runtime.temporal()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(gate.close)
        pool = await stack.enter_async_context(runtime.pool(LEDGER, "required", max_size=8))
        adapters = build_providers(settings, keyring)
        for adapter in adapters.values():
            stack.push_async_callback(adapter.aclose)
        vault = runtime.vault(pool)
        provider = ProviderActivities(
            adapters, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool), vault=vault,
            keyring=keyring,
        )  # fmt: skip
        for polling in workflow_workers(client, settings, LedgerActivities(pool, vault), provider):
            await stack.enter_async_context(polling)
        await stack.enter_async_context(build_submit_worker(client, settings, provider))
        yield HeraldClient(client, queue, keyring=keyring, policy=policy, vault=vault), gate


@dataclass(frozen=True)
class FailoverRow:
    """One notice of the scene: when it was sent, what Herald did, what each emulator accepted."""

    key: str
    phase: str  # "outage" or "after"
    final: IntentStatus
    at_twilio: int
    at_infobip: int
    route_reason: str

    @property
    def delivered_by(self) -> str | None:
        """The provider whose attempt delivered it (None: not delivered)."""
        if self.final.state is not IntentState.DELIVERED or not self.final.attempts:
            return None
        return self.final.attempts[-1].provider

    @property
    def second_copies(self) -> int:
        """Messages beyond the first across both providers."""
        return max(0, self.at_twilio + self.at_infobip - 1)

    def line(self) -> str:
        answers = [(a.provider, a.submit_result.value if a.submit_result else "?") for a in self.final.attempts]
        tried = ", ".join(f"{provider} {answer}" for provider, answer in answers)
        why = ""
        if "skipped" in self.route_reason:
            why = "  (twilio in outage: skipped)"
        elif "probes it" in self.route_reason:
            why = "  (the probe: twilio answered, outage over)"
        return (
            f"  {self.key:<36} {self.phase:<7} {self.final.state.value:<10} "
            f"at twilio {self.at_twilio}, at infobip {self.at_infobip}   attempts: {tried}{why}"
        )


@dataclass(frozen=True)
class FailoverScene:
    """What the scene did: its notices in the order sent, the policy version that routed them, its times."""

    rows: list[FailoverRow]
    policy_version: int
    outage_seconds: float
    probe_wait_seconds: float
    seconds: float

    def summary(self) -> str:
        """The scene's one line, counted at both emulators."""
        during = [r for r in self.rows if r.phase == "outage"]
        after = [r for r in self.rows if r.phase == "after"]
        return (
            f"twilio outage: {len(during)} notices, {sum(r.delivered_by == 'infobip' for r in during)} delivered via "
            f"infobip, {sum(r.second_copies for r in self.rows)} second copies (messages at twilio "
            f"{sum(r.at_twilio for r in during)}, at infobip {sum(r.at_infobip for r in during)}); after: "
            f"{sum(r.delivered_by == 'twilio' for r in after)} via twilio (messages at twilio "
            f"{sum(r.at_twilio for r in after)}, at infobip {sum(r.at_infobip for r in after)})"
        )

    def render(self) -> str:
        return "\n".join([
            f"Twilio outage (policy v{self.policy_version} routes SMS to {ROUTE}; Twilio refusing connections for "
            f"{self.outage_seconds:.1f} s, then {self.probe_wait_seconds:.0f} s until its probe was due; "
            f"scene time {self.seconds:.1f} s):",
            *(row.line() for row in self.rows),
            self.summary(),
        ])  # fmt: skip


async def play_failover(
    runtime: ProcessRuntime,
    ledger: AsyncConnectionPool,
    twilio_admin: str,
    infobip_admin: str,
    policy: DeliveryPolicy,
    *,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> FailoverScene:
    """Play the scene on its own route; `say` tells what it waits for while it waits."""
    started = time.monotonic()
    tag = secrets.token_hex(3)
    async with ledger.connection() as conn:
        _, before = await policy_in_force(conn, datetime.now(UTC))
    rules = PolicyRules.model_validate({
        **before.model_dump(), "sms_routes": {c: {"*": list(ROUTE)} for c in Category},
        "provider_probe_after_seconds": PROBE_SECONDS,
    })  # fmt: skip
    version = await publish_policy(ledger, rules,
                                   effective_from=datetime.now(UTC), owner="demo",
                                   note="make run: SMS to twilio, then infobip (the Twilio outage scene)")  # fmt: skip
    sent: list[tuple[str, str, str]] = []  # (key, recipient, phase)
    try:
        async with failover_route(runtime, policy) as (herald, gate):
            await gate.refuse()
            outage_started = time.monotonic()
            say(f"twilio outage scene: Twilio refusing connections; {FIRST_WAVE + SECOND_WAVE} SMS notices go out")
            try:
                for size in (FIRST_WAVE, SECOND_WAVE):
                    wave = [(f"order_receipt:failover_{tag}_{len(sent) + n}", phone(), "outage") for n in range(size)]
                    sent += wave
                    await _send_and_settle(herald, wave)
            finally:
                await gate.accept()
            outage_seconds = time.monotonic() - outage_started
            wait = await _until_probe_due(ledger)
            say(f"twilio outage scene: Twilio accepts connections again; Herald skips it until its probe is due "
                f"({PROBE_SECONDS} s after its last Unreachable, as the scene's policy says): waiting {wait:.0f} s")  # fmt: skip
            await asyncio.sleep(wait)
            # One at a time first: the probe is one attempt; the rest follow once its answer ended the outage.
            after = [(f"order_receipt:failover_{tag}_{len(sent) + n}", phone(), "after") for n in range(AFTER)]
            sent += after
            await _send_and_settle(herald, after[:1])
            await _send_and_settle(herald, after[1:])
            finals = await asyncio.gather(*(herald.wait(key, Channel.SMS) for key, _, _ in sent))
    finally:
        async with ledger.connection() as conn:
            _, now_in_force = await policy_in_force(conn, datetime.now(UTC))
        if now_in_force != before:
            await publish_policy(ledger, before, effective_from=datetime.now(UTC), owner="demo",
                                 note="make run: the Twilio outage scene is over, its route withdrawn")  # fmt: skip
    rows = []
    async with httpx.AsyncClient(timeout=10) as admin:
        for (key, to, phase), final in zip(sent, finals, strict=True):
            at_twilio = await _count(admin, f"{twilio_admin}/_emulator/messages", to)
            at_infobip = await _count(admin, f"{infobip_admin}/_emulator/messages", to)
            reason = await _route_reason(ledger, final.workflow_id)
            rows.append(FailoverRow(key, phase, final, at_twilio, at_infobip, reason))
    return FailoverScene(rows, version, outage_seconds, wait, time.monotonic() - started)


async def _send_and_settle(herald: HeraldClient, notices: list[tuple[str, str, str]]) -> None:
    for key, to, _ in notices:
        await herald.send({"business_key": key, "recipient": to, "template_id": "order_receipt",
                           "template_version": 1, "render_data": _DATA})  # fmt: skip
    await asyncio.wait_for(asyncio.gather(*(herald.wait(key, Channel.SMS) for key, _, _ in notices)), SETTLE_SECONDS)


async def _until_probe_due(ledger: AsyncConnectionPool) -> float:
    """Seconds until Twilio's probe is due: PROBE_SECONDS after its newest mark (0: not in outage)."""
    async with ledger.connection() as conn:
        states = {state.provider: state for state in await provider_states(conn)}
        cursor = await conn.execute("SELECT clock_timestamp()")  # the clock the marks are stamped with
        row = await cursor.fetchone()
    twilio = states.get("twilio")
    if twilio is None or twilio.outage_since is None or row is None:
        return 0.0
    return max(0.0, (twilio.last_mark_at + timedelta(seconds=PROBE_SECONDS) - row[0]).total_seconds() + 0.5)


async def _count(admin: httpx.AsyncClient, url: str, to: str) -> int:
    response = await admin.get(url, params={"to": to})
    response.raise_for_status()
    body: Any = response.json()
    return len(body["messages"] if isinstance(body, dict) else body)


async def _route_reason(ledger: AsyncConnectionPool, workflow_id: str) -> str:
    """Why the route chose the notice's last attempt's provider (attempts.route_reason)."""
    async with ledger.connection() as conn:
        cursor = await conn.execute(
            "SELECT route_reason FROM attempts WHERE workflow_id = %s ORDER BY number DESC LIMIT 1", (workflow_id,)
        )
        row = await cursor.fetchone()
    return (row[0] or "") if row else ""
