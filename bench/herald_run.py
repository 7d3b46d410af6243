"""Herald under load: real intents through HeraldClient, the worker, the receipt server and the ledger.

Four measurements:
* run_herald: the side-by-side run (happy path: the emulator accepts and reports `sent` and
  `delivered`, as Twilio does, to Herald's receipt server);
* run_receipts: the report path alone — intents parked in `accepted`, then the bench, playing
  Twilio, posts one signed `delivered` callback each as fast as the receipt server takes them;
* run_parked: N open intents waiting for reports, and the memory that costs;
* run_rate_limited: a burst against an emulator limited to L messages/s.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from bench.common import (
    Phase,
    completed_latencies,
    fresh_address,
    fresh_recipient,
    new_tag,
    offer,
    read_histories,
    wait_until,
    workflows_closed,
)
from bench.context import EMAIL_ROLES, ROLES, ROLES_BY_CHANNEL, Bench, EmulatorAdmin
from bench.measure import CpuMeter, rss_mib
from bench.notice_run import notice_states, send_notices
from bench.sendgrid_play import delivered_posts
from devstack.processes import free_port, wait_for_port
from herald.client import HeraldClient
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import workflow_id_for
from herald.providers.twilio_signature import compute_signature
from herald.temporal.task_queues import submit_task_queue, urgent_task_queue

# Parked and report-path intents wait for a report with their first status poll an hour away,
# so the figures isolate what they measure (memory of open intents; the report path) from
# polling. Production polls at 30 s, 60 s, ... and each poll is one more lookup activity.
PARKED_POLICY = DeliveryPolicy(poll_initial=timedelta(hours=1), poll_max=timedelta(hours=1))
LIMITED_TASK_QUEUE = "herald-bench-limited"
CALLBACK_CONCURRENCY = 16
# The emulator refuses creates once it stores this many messages (EmulatorConfig.max_messages).
EMULATOR_MAX_MESSAGES = 10_000


# The same order receipt on each channel (herald/templates/order_receipt*).
TEMPLATES = {"sms": "order_receipt", "email": "order_receipt_email"}


def _request(business_key: str, recipient: str, n: int, channel: str = "sms") -> dict[str, Any]:
    return {
        "business_key": business_key,
        "channel": channel,
        "recipient": recipient,
        "template_id": TEMPLATES[channel],
        "template_version": 1,
        "render_data": {"order_ref": f"ord_{n}", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"},
    }


async def _final_states(bench: Bench, like: str) -> Counter[str]:
    async with bench.pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT to_state, count(*) FROM (
                   SELECT DISTINCT ON (workflow_id) workflow_id, to_state FROM transitions
                    WHERE workflow_id LIKE %s ORDER BY workflow_id, seq DESC) last
               GROUP BY to_state""",
            (like,),
        )
        return Counter({state: count for state, count in await cursor.fetchall()})


async def _start_intents(
    herald: HeraldClient,
    n: int,
    rate: float | None,
    tag: str,
    recipient: str | None,
    phase: Phase | None = None,
    channel: str = "sms",
) -> tuple[dict[str, float], dict[str, str | None], dict[str, str]]:
    """Send n intents on `channel`; returns start times, first run ids and recipients by workflow id."""
    starts: dict[str, float] = {}
    runs: dict[str, str | None] = {}
    recipients: dict[str, str] = {}

    async def start_one(i: int) -> None:
        key = f"order_receipt:bench_{tag}_{i}"
        to = recipient or (fresh_address() if channel == "email" else fresh_recipient())
        workflow_id = workflow_id_for(key, channel)
        recipients[workflow_id] = to
        starts[workflow_id] = time.time()
        try:
            receipt = await herald.send(_request(key, to, i, channel))
            runs[receipt.workflow_id] = receipt.run_id
        except Exception:  # noqa: BLE001 - a send that fails is counted as such; the run goes on
            if phase is not None:
                phase.failed_to_start += 1

    await offer(n, rate, start_one)
    return starts, runs, recipients


async def run_herald(
    bench: Bench,
    n: int,
    rate: float | None,
    timeout: float,
    roles: dict[str, str | tuple[str, ...]] | None = None,
    channel: str = "sms",
) -> Phase:
    """n intents on `channel`: "sms", "email", or "notice" (`HeraldClient.send_notice`: an SMS and an
    e-mail intent under one key, done when both completed, at the later close)."""
    phase = Phase("herald", rate, n)
    tag = new_tag()
    prefix = f"order_receipt:bench_{tag}_"
    started: dict[str, Any] = {}

    async def run() -> bool:
        if channel == "notice":
            started["starts"], started["runs"] = await send_notices(bench, n, rate, prefix, phase)
        else:
            started["starts"], started["runs"], _ = await _start_intents(
                bench.herald, n, rate, tag, None, phase, channel
            )
        return await wait_until(lambda: workflows_closed(bench.herald_temporal, prefix, len(started["runs"])), timeout)

    await bench.measured(phase, roles or ROLES_BY_CHANNEL[channel]["herald"], run)
    figures = await read_histories(bench.herald_temporal, started["runs"])
    group = (lambda workflow_id: workflow_id.rsplit("/", 1)[0]) if channel == "notice" else None
    completed_latencies(phase, started["starts"], figures, group)
    phase.states = await (notice_states(bench, prefix) if channel == "notice" else _final_states(bench, prefix + "%"))
    return phase


# ---- the report path ------------------------------------------------------------------------


@dataclass
class ReceiptsResult:
    reports: int
    answered_2xx: int = 0
    ingest_seconds: float = 0.0  # first POST -> last 2xx (stored in the inbox, committed)
    applied_seconds: float = 0.0  # first POST -> last verdict written by a workflow
    applied: int = 0
    closed_seconds: float = 0.0  # first POST -> every intent's workflow closed
    foreign_cores: float | None = None  # other processes' mean CPU use in that window, in cores
    cpu: dict[str, float] = field(default_factory=dict)
    states: Counter[str] = field(default_factory=Counter)
    timed_out: bool = False
    id_prefix: str = ""  # the parked workflows' ids start with it
    # (current, peak) RSS in MiB of the variant's worker and of the Temporal server, once all parked.
    rss_after_parking: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    # Herald only, the report burst's invariants at load size (tests/faults/test_report_burst.py runs
    # them at 200): inbox rows for the posted messages (stored once: one each) and reports left
    # without a verdict once the run settled (0); None for the floor, which has no inbox.
    stored_rows: int | None = None
    undecided: int | None = None

    @property
    def burst_held(self) -> bool:
        """Every report answered 2xx, stored once and decided, every intent delivered."""
        return (
            self.answered_2xx == self.stored_rows == self.states.get("delivered", 0) == self.reports
            and self.undecided == 0
        )

    @property
    def ingest_rate(self) -> float | None:
        return self.answered_2xx / self.ingest_seconds if self.ingest_seconds else None

    @property
    def applied_rate(self) -> float | None:
        return self.applied / self.applied_seconds if self.applied_seconds else None


def park_rss(bench: Bench, worker: str) -> dict[str, tuple[float, float] | None]:
    return {"worker": rss_mib(bench.stack.pids[worker]), "temporal": rss_mib(bench.stack.pids["temporal"])}


async def make_room_at_emulator(bench: Bench, n: int) -> None:
    """The emulator stores at most EMULATOR_MAX_MESSAGES; earlier phases' messages are finished, forget them."""
    await bench.emulators["emulator"].make_room(n, EMULATOR_MAX_MESSAGES)


async def park(
    bench: Bench, n: int, tag: str, timeout: float, channel: str = "sms"
) -> tuple[str, dict[str, str | None], bool]:
    """Start n intents on `channel` to one recipient whose messages the emulator accepts and never
    reports; returns the recipient, the intents' first runs and whether all were parked in time."""
    admin = bench.emulators["esp" if channel == "email" else "emulator"]
    await admin.make_room(n, EMULATOR_MAX_MESSAGES)
    recipient = fresh_address() if channel == "email" else fresh_recipient()
    # Twilio's `silent`: accepted, moves to `sent`, never a callback; the ESP's `no_events`. One
    # recipient for all: the fault is per recipient.
    await admin.silence(recipient)
    herald = bench.client(bench.settings.temporal.task_queue, PARKED_POLICY)
    _, runs, _ = await _start_intents(herald, n, None, tag, recipient, channel=channel)
    return recipient, runs, await provider_holds(admin, recipient, n, timeout)


async def provider_holds(admin: EmulatorAdmin, recipient: str, n: int, timeout: float) -> bool:
    """Wait until the emulator holds n messages to `recipient`: the intents are parked.

    Counted at the provider: Herald's ledger records `accepted` only at an intent's first
    checkpoint (its first poll, an hour away here), and the floor has no ledger.
    """

    async def all_accepted() -> bool:
        return len(await admin.messages(recipient)) >= n

    parked = await wait_until(all_accepted, timeout, interval=max(1.0, n / 2000))
    if parked:
        # The last submit answers reach their workflows within a workflow task or two.
        await asyncio.sleep(2.0)
    return parked


async def play_twilio(
    bench: Bench, recipient: str, result: ReceiptsResult, variant: str, client: Client, id_prefix: str, timeout: float
) -> float:
    """Post one signed `delivered` callback for every message to `recipient`, as Twilio would, then
    wait until the variant's workflows (ids starting with `id_prefix`) have closed.

    Fills the result's 2xx count, ingest and close times, CPU by role; returns the first POST's time.
    """
    listed = await bench.emulators["emulator"].messages(recipient)
    account, token, _ = bench.twilio
    done = datetime.now(UTC).strftime("%y%m%d%H%M")
    callbacks = []
    for message in listed:
        params = [("MessageSid", message["sid"]), ("SmsSid", message["sid"]), ("AccountSid", account),
                  ("From", message["from"] or ""), ("To", message["to"]), ("MessageStatus", "delivered"),
                  ("SmsStatus", "delivered"), ("ApiVersion", "2010-04-01"), ("RawDlrDoneDate", done)]  # fmt: skip
        url = message["status_callback"]
        signature = compute_signature(token, url, params)
        callbacks.append((url, {"data": dict(params), "headers": {"X-Twilio-Signature": signature}}))
    return await post_reports(bench, callbacks, result, ROLES[variant], client, id_prefix, timeout)


async def post_reports(
    bench: Bench,
    posts: list[tuple[str, dict[str, Any] | Callable[[], dict[str, Any]]]],
    result: ReceiptsResult,
    roles: dict[str, str | tuple[str, ...]],
    client: Client,
    id_prefix: str,
    timeout: float,
) -> float:
    """POST each (url, httpx keyword arguments) as the provider would, CALLBACK_CONCURRENCY at a time,
    then wait until the workflows whose ids start with `id_prefix` have closed. Arguments given as a
    callable are made just before their POST (a signature over the time of sending).

    Fills the result's 2xx count, ingest and close times, CPU by role (the emulator's left out: the
    bench plays the provider); returns the first POST's time.
    """
    result.id_prefix = id_prefix
    limits = httpx.Limits(max_connections=CALLBACK_CONCURRENCY, max_keepalive_connections=CALLBACK_CONCURRENCY)
    meter = CpuMeter(bench.stack.pids)
    roles = {k: v for k, v in roles.items() if k != "emulator"}
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:

        async def post(i: int) -> None:
            url, request = posts[i]
            response = await http.post(url, **(request() if callable(request) else request))
            if response.is_success:
                result.answered_2xx += 1

        before = meter.snapshot()
        first = time.time()
        await offer(len(posts), None, post)
        result.ingest_seconds = time.time() - first
        closed = await wait_until(lambda: workflows_closed(client, id_prefix, result.reports), timeout)
        result.closed_seconds = time.time() - first
        after = meter.snapshot()
    result.timed_out = not closed
    delta = CpuMeter.delta(before, after)
    result.cpu = {column: delta.get(process, 0.0) for column, process in roles.items()}
    result.foreign_cores = CpuMeter.foreign(delta) / result.closed_seconds if result.closed_seconds else None
    return first


async def run_receipts(bench: Bench, m: int, timeout: float, channel: str = "sms") -> ReceiptsResult:
    result = ReceiptsResult(m)
    tag = new_tag()
    like = f"order_receipt:bench_{tag}_%"
    recipient, _, parked = await park(bench, m, tag, timeout, channel)
    if not parked:
        result.timed_out = True
        return result
    result.rss_after_parking = park_rss(bench, "worker")
    if channel == "email":
        # Herald's inbox keys an e-mail's rows by its Message-ID, as SendGrid echoes it in smtp-id.
        listed = await bench.emulators["esp"].messages(recipient)
        posts = delivered_posts(bench, listed, f"{bench.settings.receipts.public_url}/sendgrid/events")
        first = await post_reports(
            bench, posts, result, EMAIL_ROLES["herald"], bench.herald_temporal, like[:-1], timeout
        )
        ids = [message["message_id"] for message in listed]
    else:
        first = await play_twilio(bench, recipient, result, "herald", bench.herald_temporal, like[:-1], timeout)
        ids = [message["sid"] for message in await bench.emulators["emulator"].messages(recipient)]
    await record_verdicts(bench, result, like, first, ids)
    return result


async def record_verdicts(
    bench: Bench, result: ReceiptsResult, like: str, first: float, provider_ids: list[str]
) -> None:
    """Once the reports are in: the verdicts Herald's workflows wrote (intents `like`), their final
    states, and the burst's invariants over the inbox rows of the messages `provider_ids` name."""
    async with bench.pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT count(*), extract(epoch FROM max(decided_at))::float8 FROM receipt_outcomes WHERE workflow_id LIKE %s",
            (like,),
        )
        result.applied, last_decided = await cursor.fetchone()
    result.applied_seconds = (last_decided - first) if last_decided else 0.0
    result.states = await _final_states(bench, like)

    async def count(sql: str) -> int:
        async with bench.pool.connection() as conn:
            return (await (await conn.execute(sql, (provider_ids,))).fetchone())[0]

    result.stored_rows = await count("SELECT count(*) FROM receipt_inbox WHERE provider_message_id = ANY(%s)")
    undecided = "SELECT count(*) FROM undecided_reports WHERE provider_message_id = ANY(%s)"
    await wait_until(lambda: _none(count(undecided)), 60, interval=0.5)
    result.undecided = await count(undecided)


async def _none(counted: Awaitable[int]) -> bool:
    return await counted == 0


# ---- parked intents -------------------------------------------------------------------------


@dataclass
class ParkedResult:
    intents: int
    parked: bool = False
    seconds: float = 0.0
    worker_rss_before: tuple[float, float] | None = None
    worker_rss_after: tuple[float, float] | None = None
    server_rss_before: tuple[float, float] | None = None
    server_rss_after: tuple[float, float] | None = None
    foreign_cores: float | None = None


async def run_parked(bench: Bench, p: int, timeout: float) -> ParkedResult:
    result = ParkedResult(p)
    stored = (await bench.emulator_stats())["stored_messages"]
    if stored + p > EMULATOR_MAX_MESSAGES:
        # Earlier phases' messages are finished; forget them so the parked ones fit.
        (await bench.admin.post("/_emulator/reset")).raise_for_status()
    result.worker_rss_before = rss_mib(bench.stack.pids["worker"])
    result.server_rss_before = rss_mib(bench.stack.pids["temporal"])
    meter = CpuMeter(bench.stack.pids)
    before = meter.snapshot()
    began = time.time()
    _, _, result.parked = await park(bench, p, new_tag(), timeout)
    result.seconds = time.time() - began
    result.foreign_cores = CpuMeter.foreign(CpuMeter.delta(before, meter.snapshot())) / result.seconds
    result.worker_rss_after = rss_mib(bench.stack.pids["worker"])
    result.server_rss_after = rss_mib(bench.stack.pids["temporal"])
    return result


# ---- under a provider rate limit ------------------------------------------------------------


@dataclass
class RateLimitResult:
    limit: float
    intents: int
    submit_rate: float | None = None  # the submit queue's server-side limit (HERALD_SUBMIT_RATE_LIMIT)
    accepted: int = 0
    rejected_429: int = 0
    submits: int = 0  # create requests the emulator answered: accepted + 429 + any other refusal
    window_seconds: float = 0.0  # first intent start -> last acceptance
    steady_rate: float | None = None  # acceptances/s over the second half of them (past the first burst)
    queue_ages: list[float] = field(default_factory=list)  # intent start -> provider acceptance, s
    states: Counter[str] = field(default_factory=Counter)
    actions_per_intent: float | None = None
    timed_out: bool = False
    foreign_cores: float | None = None

    @property
    def achieved_rate(self) -> float | None:
        return self.accepted / self.window_seconds if self.window_seconds else None

    @property
    def share_429(self) -> float | None:
        return self.rejected_429 / self.submits if self.submits else None


async def _wait_for_pollers(client: Client, task_queue: str, *, timeout: float) -> None:
    """Until a worker polls the route's every queue: both workflow queues and the submits."""
    queues = [
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (urgent_task_queue(task_queue), TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (submit_task_queue(task_queue), TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ]

    async def polled() -> bool:
        for name, kind in queues:
            response = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=name), task_queue_type=kind)
            )
            if not response.pollers:
                return False
        return True

    if not await wait_until(polled, timeout):
        raise RuntimeError(f"no worker polls {task_queue} after {timeout:g} s")


def route_workers(name: str, *, split: bool, urgent: bool) -> list[tuple[str, str]]:
    """The route's worker processes, each (process name, HERALD_WORKER_QUEUES): one polling every
    queue; or (`split`) the workflows and the submits apart; and (`urgent`) the urgent lane in a
    process of its own. `worker_<name>` always runs the standard queue's workflows."""
    if split and urgent:
        return [(f"worker_{name}", "standard"), (f"worker_{name}_urgent", "urgent"), (f"worker_{name}_submits", "submits")]  # fmt: skip
    if split:
        return [(f"worker_{name}", "workflows"), (f"worker_{name}_submits", "submits")]
    if urgent:
        return [(f"worker_{name}", "standard,submits"), (f"worker_{name}_urgent", "urgent")]
    return [(f"worker_{name}", "all")]


@asynccontextmanager
async def limited_route(
    bench: Bench, name: str, limit: float, submit_rate: float | None, task_queue: str
) -> AsyncIterator[str]:
    """A route of its own: an emulator limited to `limit` messages/s per sender and a worker on
    `task_queue` sending to it, its submit queue limited by the Temporal server to `submit_rate`
    (HERALD_SUBMIT_RATE_LIMIT; None: no server-side limit). Yields the emulator's URL once the
    worker polls both queues; stops its processes (`emulator_<name>`, `worker_<name>`, and
    `worker_<name>_submits` when the worker is split) on exit."""
    stack = bench.stack
    e = stack.config.emulator
    port = free_port()
    workers = route_workers(name, split=bench.split_worker, urgent=bench.urgent_worker)
    emulator = stack.spawn(f"emulator_{name}", [
        sys.executable, "-m", "emulator", "--host", "127.0.0.1", "--port", str(port), "--account-sid", e.account_sid,
        "--auth-token", e.auth_token, "--step-ms", str(e.step_ms), "--rate-limit-per-sender", str(limit),
        "--log-level", "warning",
    ])  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, 60, emulator.process)
        route_env = {
            "HERALD_TWILIO_API_BASE": f"http://127.0.0.1:{port}",
            "HERALD_TASK_QUEUE": task_queue,
            "HERALD_SUBMIT_RATE_LIMIT": str(submit_rate or 0),
        }
        for worker, queues in workers:
            stack.spawn(worker, [sys.executable, "worker.py"], extra_env={**route_env, "HERALD_WORKER_QUEUES": queues})
        await _wait_for_pollers(bench.herald_temporal, task_queue, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        for worker, _ in workers:
            stack.stop_process(worker)
        stack.stop_process(f"emulator_{name}")


def _steady_rate(accepted_at: list[float]) -> float | None:
    """Acceptances per second over the later half of them: the pace once the first burst is spent."""
    later = sorted(accepted_at)[len(accepted_at) // 2 :]
    span = later[-1] - later[0] if len(later) > 1 else 0.0
    return (len(later) - 1) / span if span > 0 else None


async def run_rate_limited(
    bench: Bench, n: int, limit: float, timeout: float, submit_rate: float | None = None
) -> RateLimitResult:
    """A burst of n intents (all offered at once) against an emulator limited to `limit` messages/s.

    The worker runs with HERALD_SUBMIT_RATE_LIMIT = `submit_rate` (None: no server-side limit, the
    behaviour before the submit queue had one), so the Temporal server paces the submits.
    """
    result = RateLimitResult(limit, n, submit_rate)
    stack = bench.stack
    # The window below starts at the first intent: limited_route returns once the worker polls, so
    # a worker still importing does not put its start-up (a second or more) into the achieved rate.
    async with limited_route(bench, "limited", limit, submit_rate, LIMITED_TASK_QUEUE) as emulator_url:
        herald = bench.client(LIMITED_TASK_QUEUE)
        tag = new_tag()
        prefix = f"order_receipt:bench_{tag}_"
        meter = CpuMeter(stack.pids)
        before = meter.snapshot()
        began = time.time()
        starts, runs, recipients = await _start_intents(herald, n, None, tag, None)
        result.timed_out = not await wait_until(
            lambda: workflows_closed(bench.herald_temporal, prefix, len(runs)), timeout
        )
        # Before the limited emulator and worker stop, or their CPU would count as another job's.
        result.foreign_cores = CpuMeter.foreign(CpuMeter.delta(before, meter.snapshot())) / (time.time() - began)
        async with httpx.AsyncClient(base_url=emulator_url, timeout=60) as admin:
            listed = (await admin.get("/_emulator/messages")).json()["messages"]
            stats = await bench.emulator_stats(admin)
        result.rejected_429 = stats["rate_limited"]
        result.submits = stats["accepted"] + stats["rejected"]
        accepted_at = {m["to"]: datetime.fromisoformat(m["date_created"]).timestamp() for m in listed}
        result.accepted = len(listed)
        ages = [accepted_at[to] - starts[w] for w, to in recipients.items() if to in accepted_at]
        result.queue_ages = ages
        if accepted_at:
            result.window_seconds = max(accepted_at.values()) - min(starts.values())
            result.steady_rate = _steady_rate(list(accepted_at.values()))
        result.states = await _final_states(bench, prefix + "%")
        figures = await read_histories(bench.herald_temporal, runs)
        result.actions_per_intent = sum(figures.actions.values()) / n if n else None
    return result
