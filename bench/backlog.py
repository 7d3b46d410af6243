"""The backlog pass: priority and tenants on one rate-limited route, on and off, side by side.

One route limited to L messages/s (the emulator's per-sender limit; the worker's submit queue
limited by the Temporal server to L by default, as in the rate-limit pass). Tenant A starts a batch of
marketing intents (priority 5) at once; during the next `seconds` seconds one urgent intent
(account category, priority 1, tenant A too: the priority lifts it, not its tenant) and one of
tenant B's transactional intents (priority 2) arrive every second. Two arms, each on a fresh
emulator and worker with a task queue of its own, so they share no backlog, run in this order:

  on ... the send policy as built in: priorities by category, tenants "a" and "b" as fairness
         keys (weight 1);
  off .. first come, first served: a published policy version gives every category the same
         priority (FLAT_PRIORITY) and every intent goes as the shared tenant, so the submit
         queue sees one priority level and one fairness key. The built-in policy is published
         again after the arm.

The bench's client has the ledger, so it reads the policy in force when it starts an intent and
the workflow's own tasks go at the same priority and fairness key as its first submit
(herald/client.py `start_priority`): the off arm is first come, first served on the workflow
task queue too. Figures per arm and class come from the ledger (queue age: attempt prepared ->
the provider's answer to its submit as the workflow recorded it), the workflows' histories (where
that time went), the arm's emulator (acceptance times, 429s, messages per recipient) and Temporal
(every workflow closed).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from bench.common import fresh_recipient, new_tag, offer, wait_until, workflows_closed
from bench.context import Bench
from bench.herald_run import limited_route, route_workers
from bench.measure import CpuMeter
from herald.core.contracts import attempt_ref
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import workflow_id_for
from herald.core.lifecycle import IntentState
from herald.core.send_policy import SHARED_TENANT, Category, PolicyRules
from herald.ledger.policy_store import grant_consent, publish_policy

ARMS = ("on", "off")
# The classes of intent, in the order the report shows them.
URGENT, TENANT_B, TENANT_A = "urgent", "tenant B", "tenant A"
CLASSES = (URGENT, TENANT_B, TENANT_A)
# The "off" arm's one priority for every category: Temporal's default key, so the submit queue
# orders by arrival alone, as it did before priorities existed.
FLAT_PRIORITY = 3
# Each class's template (its category decides the built-in priority: herald/core/send_policy.py
# BUILT_IN_PRIORITY) and tenant in the "on" arm.
CLASS_DATA = {"class_name": "Morning yoga", "starts_at": "Mon 09:00"}
TEMPLATES: dict[str, tuple[str, Category, dict[str, str | int], str]] = {
    URGENT: ("class_reminder", Category.ACCOUNT, CLASS_DATA, "a"),
    TENANT_B: ("order_receipt", Category.TRANSACTIONAL,
               {"order_ref": "ord_1", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}, "b"),
    TENANT_A: ("class_promotion", Category.MARKETING, CLASS_DATA, "a"),
}  # fmt: skip
KEY_PART = {URGENT: "urgent", TENANT_B: "b", TENANT_A: "a"}
STAGES = ("prepared → scheduled", "scheduled → started", "started → completed", "completed → recorded")
START_STAGES = ("start → workflow started", "workflow started → first task started", "first task started → prepared")
SUBMIT_ACTIVITY = "submit_attempt"

# Targets with priority on (issue 23).
URGENT_P99_TARGET = 1.0  # s, queue age
TENANT_B_P99_TARGET = 3.0  # s, queue age
UTILISATION_TARGET = 0.95  # of L, while tenant A still has a backlog
SHARE_429_TARGET = 0.01  # of submits


@dataclass
class ClassFigures:
    """One class of intent in one arm."""

    offered: int
    started: int = 0
    failed_to_start: int = 0
    # Per attempt, seconds: prepared (workflow clock) -> the submit's answer recorded by the workflow.
    queue_ages: list[float] = field(default_factory=list)
    # Per attempt, seconds: prepared -> the attempt row written by the submit activity (taken off the route queue).
    route_waits: list[float] = field(default_factory=list)
    # Per accepted message, seconds: its attempt row written -> created at the emulator: the submit
    # activity's pacer (herald.providers.pacing: priority key, then tenant weight) and the provider call.
    row_to_accepted: list[float] = field(default_factory=list)
    # Per intent, seconds: the driver's clock before the start call -> the attempt prepared (first attempt).
    start_to_prepared: list[float] = field(default_factory=list)
    # Per intent, seconds: the driver's clock before the start call -> created at the emulator.
    start_to_accepted: list[float] = field(default_factory=list)
    # Per submit, seconds, from the workflow's history: where an attempt's queue age went.
    # prepared -> scheduled: the workflow task that prepared it completed (the worker's workflow side);
    # scheduled -> started: the Temporal server's submit queue (priority, fairness, the rate limit);
    # started -> completed: the submit activity (ledger write, pacer, provider call);
    # completed -> recorded: the workflow task that takes in the answer started.
    split: dict[str, list[float]] = field(default_factory=lambda: {stage: [] for stage in STAGES})
    # Per intent, seconds: where start -> prepared went. The start call (sealing, the server taking the
    # start); the workflow task queue (at `start_priority`: the policy's order read at start); the
    # intent's first workflow task on the worker, with its local activities, until it prepared the attempt.
    start_split: dict[str, list[float]] = field(default_factory=lambda: {stage: [] for stage in START_STAGES})
    attempts: int = 0
    unanswered_attempts: int = 0  # attempts with no provider answer to their submit in the ledger
    priorities: Counter[int] = field(default_factory=Counter)  # priority keys the attempts were dispatched with
    policy_versions: Counter[int] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)  # final intent states from the ledger

    @property
    def accounted(self) -> int:
        """Intents whose last recorded state is terminal."""
        return sum(n for state, n in self.states.items() if IntentState(state).is_terminal)


# The utilisation span cut into slices this long, to see where it loses pace.
SLICE_SECONDS = 10.0
SLICES_WITH_CPU = 6


@dataclass
class BacklogArm:
    name: str
    classes: dict[str, ClassFigures]
    timed_out: bool = False
    accepted: int = 0  # messages the arm's emulator accepted
    submits: int = 0  # create requests it answered
    rejected_429: int = 0
    duplicate_recipients: int = 0  # recipients with more than one message at the emulator
    duplicate_messages: int = 0  # messages beyond the first per recipient
    utilisation_span: float = 0.0  # s, first acceptance -> tenant A's last
    accepted_in_span: int = 0
    longest_gap: float | None = None  # s, between two acceptances in that span
    # Acceptances in each SLICE_SECONDS of the span, from its start (the last slice may be short):
    # where the span loses pace, the workflows' start or the route's steady state.
    slice_counts: list[int] = field(default_factory=list)
    # CPU in cores per process group over each of the first SLICES_WITH_CPU slices from the batch's start.
    slice_cores: list[dict[str, float]] = field(default_factory=list)
    resent_accepted: int = 0  # acceptances of resends after an unanswered submit (outside the span)
    # Submits the server let out per second while its submit queue held one waiting (dispatches, histories).
    backlogged_pace: float | None = None
    seconds: float = 0.0  # first start -> every workflow closed (or the timeout)
    cores: dict[str, float] = field(default_factory=dict)  # CPU by process over the arm, in cores
    foreign_cores: float | None = None

    @property
    def utilisation_rate(self) -> float | None:
        """Acceptances per second while tenant A had a backlog: intervals between them over the span."""
        return (self.accepted_in_span - 1) / self.utilisation_span if self.utilisation_span > 0 else None

    @property
    def share_429(self) -> float | None:
        return self.rejected_429 / self.submits if self.submits else None

    @property
    def offered(self) -> int:
        return sum(c.offered for c in self.classes.values())

    @property
    def accounted(self) -> int:
        return sum(c.accounted for c in self.classes.values())


@dataclass
class BacklogResult:
    backlog: int
    seconds: int
    limit: float
    submit_rate: float | None
    # The route's worker processes, each (name, HERALD_WORKER_QUEUES): bench/herald_run.py route_workers.
    workers: list[tuple[str, str]] = field(default_factory=list)
    urgent_lane: bool = True  # priority-1 intents started on the urgent lane (bench --no-urgent-lane: not)
    arms: dict[str, BacklogArm] = field(default_factory=dict)


def flat_policy() -> PolicyRules:
    """The built-in rules with every category at FLAT_PRIORITY: one priority level on the route."""
    built_in = PolicyRules()
    return built_in.model_copy(
        update={
            "categories": {c: r.model_copy(update={"priority": FLAT_PRIORITY}) for c, r in built_in.categories.items()}
        }
    )


def _unique_recipients(n: int) -> list[str]:
    """n distinct numbers: a repeated one would read as a duplicate send at the emulator."""
    seen: set[str] = set()
    while len(seen) < n:
        seen.add(fresh_recipient())
    return list(seen)


def _request(cls: str, key: str, to: str, tenant: str) -> dict[str, Any]:
    template, _, data, _ = TEMPLATES[cls]
    return {"business_key": key, "recipient": to, "template_id": template, "template_version": 1,
            "render_data": data, "tenant": tenant}  # fmt: skip


async def run_backlog(
    bench: Bench, backlog: int, seconds: int, limit: float, submit_rate: float | None,
    arms: tuple[str, ...] = ARMS,
) -> BacklogResult:  # fmt: skip
    workers = route_workers("route", split=bench.split_worker, urgent=bench.urgent_worker)
    result = BacklogResult(backlog, seconds, limit, submit_rate, workers, bench.urgent_lane)
    tag = new_tag()
    # The route drained at half its pace, plus one unknown submit's proof of absence (the production
    # policy's in-flight bound and provider queue validity, then its resend): an attempt lost to an
    # overloaded worker is resent and counted, not cut off.
    policy = DeliveryPolicy()
    proof = (policy.submit_in_flight_bound + policy.provider_queue_validity).total_seconds()
    timeout = 120 + 2 * (backlog + 2 * seconds) / limit + proof
    for arm in arms:
        print(f"backlog, arm {arm}: {backlog} tenant A intents at once, then {seconds} s of urgent and"
              f" tenant B intents at 1/s each, on a route limited to {limit:g}/s", flush=True)  # fmt: skip
        if arm == "off":
            await publish_policy(bench.pool, flat_policy(), effective_from=datetime.now(UTC), owner="bench",
                                 note=f"backlog pass, arm off: every category at priority {FLAT_PRIORITY}")  # fmt: skip
        try:
            result.arms[arm] = await _run_arm(bench, arm, f"{tag}_{arm}", backlog, seconds, limit, submit_rate, timeout)
        finally:
            if arm == "off":
                await publish_policy(bench.pool, PolicyRules(), effective_from=datetime.now(UTC), owner="bench",
                                     note="backlog pass: the built-in policy again")  # fmt: skip
    return result


async def _run_arm(
    bench: Bench, arm: str, tag: str, backlog: int, seconds: int, limit: float, submit_rate: float | None,
    timeout: float,
) -> BacklogArm:  # fmt: skip
    counts = {URGENT: seconds, TENANT_B: seconds, TENANT_A: backlog}
    figures = BacklogArm(arm, {cls: ClassFigures(counts[cls]) for cls in CLASSES})
    # One number per intent across the classes, so a message per recipient is a message per intent.
    numbers = iter(_unique_recipients(sum(counts.values())))
    recipients = {cls: [next(numbers) for _ in range(counts[cls])] for cls in CLASSES}
    # Tenant A's promotions need consent evidence (the marketing category requires it), given before the clock starts.
    slots = asyncio.Semaphore(4)

    async def consent(to: str) -> None:
        async with slots:
            await grant_consent(bench.pool, fingerprint=bench.keyring.recipient(to), category=Category.MARKETING,
                                source="bench: backlog pass", granted_at=datetime.now(UTC))  # fmt: skip

    await asyncio.gather(*(consent(to) for to in recipients[TENANT_A]))
    prefix = f"backlog:{tag}_"
    task_queue = f"herald-bench-backlog-{tag.replace('_', '-')}"
    async with limited_route(bench, "backlog", limit, submit_rate, task_queue) as emulator_url:
        herald = bench.client(task_queue)
        starts: dict[str, float] = {}
        class_of: dict[str, str] = {}
        to_of: dict[str, str] = {}

        def starter(cls: str):
            async def start_one(i: int) -> None:
                key = f"{prefix}{KEY_PART[cls]}_{i}"
                to = recipients[cls][i]
                workflow_id = workflow_id_for(key, "sms")
                class_of[workflow_id], to_of[workflow_id] = cls, to
                tenant = TEMPLATES[cls][3] if arm == "on" else SHARED_TENANT
                starts[workflow_id] = time.time()
                try:
                    await herald.send(_request(cls, key, to, tenant))
                    figures.classes[cls].started += 1
                except Exception:  # noqa: BLE001 - a start that fails is counted as such; the pass goes on
                    figures.classes[cls].failed_to_start += 1

            return start_one

        async def trickle(cls: str) -> None:
            # One a second, the first a second after tenant A's batch began.
            await asyncio.sleep(1.0)
            await offer(seconds, 1.0, starter(cls))

        meter = CpuMeter(bench.stack.pids)
        before = meter.snapshot()
        began = time.time()
        sampler = asyncio.create_task(_cores_per_slice(meter, before, figures.slice_cores))
        await asyncio.gather(offer(backlog, None, starter(TENANT_A)), trickle(URGENT), trickle(TENANT_B))
        started = sum(c.started for c in figures.classes.values())
        figures.timed_out = not await wait_until(
            lambda: workflows_closed(bench.herald_temporal, prefix, started), timeout - (time.time() - began), 1.0
        )
        figures.seconds = time.time() - began
        sampler.cancel()
        # Before the arm's emulator and worker stop, or their CPU would count as another job's.
        delta = CpuMeter.delta(before, meter.snapshot())
        figures.foreign_cores = CpuMeter.foreign(delta) / figures.seconds
        figures.cores = {name: delta[name] / figures.seconds for name in (*bench.stack.pids, "driver") if name in delta}
        async with httpx.AsyncClient(base_url=emulator_url, timeout=60) as admin:
            listed = (await admin.get("/_emulator/messages")).json()["messages"]
            stats = await bench.emulator_stats(admin)
    _provider_figures(figures, listed, stats, starts, class_of, to_of)
    resent = await _ledger_figures(bench, figures, prefix, starts, class_of, listed)
    _utilisation(figures, listed, {to for w, to in to_of.items() if class_of[w] == TENANT_A}, resent)
    return figures


async def _cores_per_slice(meter: CpuMeter, before: dict[str, float], into: list[dict[str, float]]) -> None:
    """Each process group's CPU, in cores, over each SLICE_SECONDS from the batch's start (the first
    SLICES_WITH_CPU of them): what the machine was busy with while the route ran below its pace."""
    last = before
    while len(into) < SLICES_WITH_CPU:
        await asyncio.sleep(SLICE_SECONDS)
        now = meter.snapshot()
        into.append({name: seconds / SLICE_SECONDS for name, seconds in CpuMeter.delta(last, now).items()})
        last = now


def _provider_figures(
    figures: BacklogArm, listed: list[dict], stats: dict, starts: dict[str, float], class_of: dict[str, str],
    to_of: dict[str, str],
) -> None:  # fmt: skip
    """Acceptances, 429s, duplicates and each intent's start -> acceptance, counted at the arm's emulator."""
    figures.accepted = len(listed)
    figures.rejected_429 = stats["rate_limited"]
    figures.submits = stats["accepted"] + stats["rejected"]
    per_recipient = Counter(m["to"] for m in listed)
    figures.duplicate_recipients = sum(1 for n in per_recipient.values() if n > 1)
    figures.duplicate_messages = sum(n - 1 for n in per_recipient.values() if n > 1)
    first_accepted: dict[str, float] = {}
    for m in listed:
        at = datetime.fromisoformat(m["date_created"]).timestamp()
        first_accepted[m["to"]] = min(at, first_accepted.get(m["to"], at))
    for workflow_id, to in to_of.items():
        if to in first_accepted:
            figures.classes[class_of[workflow_id]].start_to_accepted.append(first_accepted[to] - starts[workflow_id])


def _utilisation(figures: BacklogArm, listed: list[dict], tenant_a: set[str], resent: set[str]) -> None:
    """Acceptances per second from the first to tenant A's last while A had a backlog.

    A resend after a submit that got no answer (`resent`: attempt references) leaves the backlog:
    it goes once the provider's queue validity has proved the first copy absent, ten minutes on in
    the production policy, and would stretch the span over an idle route; such acceptances are
    left out of the span's end and counted apart.
    """
    accepted = sorted(
        (datetime.fromisoformat(m["date_created"]).timestamp(), m["to"], _attempt_ref(m["status_callback"]))
        for m in listed
    )
    a_times = [at for at, to, ref in accepted if to in tenant_a and ref not in resent]
    figures.resent_accepted = sum(1 for _, _, ref in accepted if ref in resent)
    if not accepted or not a_times:
        return
    a_last = a_times[-1]
    in_span = [at for at, _, _ in accepted if at <= a_last]
    figures.utilisation_span = a_last - in_span[0]
    figures.accepted_in_span = len(in_span)
    figures.longest_gap = max((b - a for a, b in itertools.pairwise(in_span)), default=None)
    counts = [0] * max(1, math.ceil(figures.utilisation_span / SLICE_SECONDS))
    for at in in_span:
        counts[min(len(counts) - 1, int((at - in_span[0]) // SLICE_SECONDS))] += 1
    figures.slice_counts = counts


def _attempt_ref(callback_url: str | None) -> str | None:
    """Our attempt reference, from the status callback URL Herald gave the provider."""
    refs = parse_qs(urlsplit(callback_url or "").query).get("attempt")
    return refs[0] if refs else None


# Every attempt of the arm's intents: when prepared (the workflow's clock), when the submit activity
# wrote its row (taken off the route's queue), the provider's first answer to its submit as the
# workflow recorded it (accepted, "not now" or a refusal: the queue age herald/ledger/report.py
# reports), and the priority key and policy version it was dispatched with.
_ATTEMPTS_SQL = """
SELECT a.workflow_id, a.number, a.priority, a.policy_version,
       extract(epoch FROM a.prepared_at)::float8,
       extract(epoch FROM a.recorded_at)::float8,
       extract(epoch FROM (SELECT min(o.observed_at) FROM observations o
                            WHERE o.workflow_id = a.workflow_id AND o.attempt_number = a.number
                              AND o.source = 'submit' AND o.kind IN ('accepted', 'retryable', 'rejected')))::float8
  FROM attempts a
 WHERE a.workflow_id LIKE %s
"""
_FINAL_STATES_SQL = """
SELECT DISTINCT ON (workflow_id) workflow_id, to_state FROM transitions
 WHERE workflow_id LIKE %s ORDER BY workflow_id, seq DESC
"""


async def _ledger_figures(
    bench: Bench,
    figures: BacklogArm,
    prefix: str,
    starts: dict[str, float],
    class_of: dict[str, str],
    listed: list[dict],
) -> set[str]:
    """Queue ages, dispatch keys and final states per class, from the ledger (and the split of each
    queue age from the workflows' histories). Returns the references of attempts that followed an
    attempt with no answer from the provider (resends)."""
    # The prefix holds no LIKE wildcard but '_', which matches itself too; rows are classed by exact id.
    async with bench.pool.connection() as conn:
        attempts = await (await conn.execute(_ATTEMPTS_SQL, (prefix + "%",))).fetchall()
        finals = await (await conn.execute(_FINAL_STATES_SQL, (prefix + "%",))).fetchall()
    prepared_at: dict[str, list[float]] = {}
    resent: set[str] = set()
    written: dict[str, tuple[ClassFigures, float]] = {}
    for workflow_id, number, priority, version, prepared, recorded, answered in sorted(attempts, key=lambda a: a[1]):
        if workflow_id not in class_of:
            continue
        prepared_at.setdefault(workflow_id, []).append(prepared)
        cls = figures.classes[class_of[workflow_id]]
        cls.attempts += 1
        cls.priorities[priority] += 1
        cls.policy_versions[version] += 1
        cls.route_waits.append(recorded - prepared)
        written[attempt_ref(workflow_id, number)] = (cls, recorded)
        if answered is None:
            cls.unanswered_attempts += 1
            resent.add(attempt_ref(workflow_id, number + 1))
        else:
            cls.queue_ages.append(answered - prepared)
        if number == 1:
            cls.start_to_prepared.append(prepared - starts[workflow_id])
    for workflow_id, state in finals:
        if workflow_id in class_of:
            figures.classes[class_of[workflow_id]].states[state] += 1
    for m in listed:
        ref = _attempt_ref(m["status_callback"])
        if ref in written:
            cls, recorded = written[ref]
            cls.row_to_accepted.append(datetime.fromisoformat(m["date_created"]).timestamp() - recorded)
    histories = await _history_times(bench, list(prepared_at))
    figures.backlogged_pace = _backlogged_pace([s[:2] for h in histories.values() for s in h.submits])
    for workflow_id, times in histories.items():
        prepared = prepared_at[workflow_id]
        cls = figures.classes[class_of[workflow_id]]
        first_task = times.first_task_at
        for stage, (a, b) in zip(START_STAGES, ((starts[workflow_id], times.started_at),
                                               (times.started_at, first_task), (first_task, prepared[0])),
                                 strict=True):  # fmt: skip
            if a is not None and b is not None:
                cls.start_split[stage].append(b - a)
        if len(times.submits) != len(prepared):
            continue  # an attempt withdrawn or not yet submitted: no one-to-one pairing
        split = cls.split
        for at, (scheduled, started, completed, recorded) in zip(prepared, times.submits, strict=True):
            for stage, (a, b) in zip(STAGES, ((at, scheduled), (scheduled, started), (started, completed),
                                             (completed, recorded)), strict=True):  # fmt: skip
                if a is not None and b is not None:
                    split[stage].append(b - a)
    return resent


def _backlogged_pace(submits: list[tuple[float, float | None]]) -> float | None:
    """Dispatches per second over the intervals between two dispatches that began with a submit still
    waiting in the server's queue: the route's pace when it had work, apart from the start of the
    pass, when the workflow side had not yet queued any."""
    scheduled = sorted(at for at, _ in submits)
    started = sorted(at for _, at in submits if at is not None)
    seconds, intervals = 0.0, 0
    for here, then in itertools.pairwise(started):
        # Waiting just after this dispatch: scheduled by then, not yet let out.
        if bisect.bisect_right(scheduled, here) - bisect.bisect_right(started, here) > 0:
            seconds += then - here
            intervals += 1
    return intervals / seconds if seconds > 0 else None


@dataclass
class HistoryTimes:
    """One workflow's moments as the Temporal server stamped them (wall clock, seconds)."""

    started_at: float | None = None  # WorkflowExecutionStarted
    first_task_at: float | None = None  # the first WorkflowTaskStarted
    # Each submit in order: (scheduled, started, completed, the next workflow task started).
    submits: list[tuple[float, float | None, float | None, float | None]] = field(default_factory=list)


async def _history_times(bench: Bench, workflow_ids: list[str], concurrency: int = 8) -> dict[str, HistoryTimes]:
    """Each workflow's start, first workflow task and submits, from its history."""
    slots = asyncio.Semaphore(concurrency)
    found: dict[str, HistoryTimes] = {}

    async def one(workflow_id: str) -> None:
        async with slots:
            history = await bench.herald_temporal.get_workflow_handle(workflow_id).fetch_history()
        times = HistoryTimes()
        scheduled: dict[int, float] = {}
        started: dict[int, float] = {}
        completed: dict[int, float] = {}
        wft_started: list[float] = []
        for event in history.events:
            at = event.event_time.ToDatetime(tzinfo=UTC).timestamp()
            if event.HasField("workflow_execution_started_event_attributes"):
                times.started_at = at
            elif event.HasField("activity_task_scheduled_event_attributes"):
                if event.activity_task_scheduled_event_attributes.activity_type.name == SUBMIT_ACTIVITY:
                    scheduled[event.event_id] = at
            elif event.HasField("activity_task_started_event_attributes"):
                started[event.activity_task_started_event_attributes.scheduled_event_id] = at
            elif event.HasField("activity_task_completed_event_attributes"):
                completed[event.activity_task_completed_event_attributes.scheduled_event_id] = at
            elif event.HasField("workflow_task_started_event_attributes"):
                wft_started.append(at)
        times.first_task_at = wft_started[0] if wft_started else None
        for event_id, at in sorted(scheduled.items()):
            done = completed.get(event_id)
            recorded = next((t for t in wft_started if done is not None and t >= done), None)
            times.submits.append((at, started.get(event_id), done, recorded))
        found[workflow_id] = times

    await asyncio.gather(*(one(workflow_id) for workflow_id in workflow_ids))
    return found
