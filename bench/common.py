"""What every phase shares: the offered load, waiting for completion, reading histories, the result record."""

from __future__ import annotations

import asyncio
import math
import secrets
import string
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.actions import billable_actions, next_run_id

# Intents in flight from the driver at once when the offered rate is unlimited: enough to keep
# both cores busy, few enough that the driver's own queueing does not dominate latency.
UNLIMITED_CONCURRENCY = 32
BODY_TEMPLATE = "Herald Shop: payment of 42.50 EUR for order ord_{n} received. Thank you."


def new_tag() -> str:
    """Letters only: a business key must not contain anything that could be a phone number."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))


def fresh_recipient() -> str:
    return "+1555" + f"{secrets.randbelow(10**7):07d}"


def fresh_address() -> str:
    """An e-mail recipient of its own, so a fault armed for it at the ESP touches no other message."""
    return f"member.{new_tag()}{secrets.randbelow(10**6):06d}@example.com"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (no interpolation): p99 of 200 values is the 198th smallest."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Phase:
    """One variant at one offered rate: what was offered, what completed, and what it cost."""

    variant: str
    offered_rate: float | None  # intents/s; None = as fast as the driver can offer
    intents: int
    completed: int = 0
    failed_to_start: int = 0
    first_start: float = 0.0  # wall clock, seconds
    last_end: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds, start call -> end
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per display column
    process_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per stack process, by name
    accepted_at_provider: int = 0  # messages the emulator accepted during the phase
    events: int = 0  # history events, all runs
    history_bytes: int = 0  # their serialized size
    actions: Counter[str] = field(default_factory=Counter)
    close_events: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)  # Herald: final intent states from the ledger
    worker_rss: tuple[float, float] | None = None  # MiB (current, peak)
    server_rss: tuple[float, float] | None = None
    timed_out: bool = False
    window_seconds: float = 0.0  # wall time between the two CPU snapshots
    foreign_cpu: float = 0.0  # CPU seconds other processes on the machine used in that window

    @property
    def foreign_cores(self) -> float | None:
        return self.foreign_cpu / self.window_seconds if self.window_seconds else None

    @property
    def throughput(self) -> float | None:
        span = self.last_end - self.first_start
        return self.completed / span if self.completed and span > 0 else None

    def per_intent(self, total: float) -> float | None:
        return total / self.completed if self.completed else None

    @property
    def cpu_ms_per_intent(self) -> dict[str, float]:
        return {name: 1000 * seconds / self.completed for name, seconds in self.cpu.items()} if self.completed else {}

    @classmethod
    def pooled(cls, rounds: list[Phase]) -> Phase:
        """Several rounds of one variant as one phase: counts, CPU, latencies and actions added up,
        intents/s as all completions over the rounds' summed spans, RSS from the last round."""
        if len(rounds) == 1:
            return rounds[0]
        first, last = rounds[0], rounds[-1]
        pooled = cls(variant=first.variant, offered_rate=first.offered_rate, intents=sum(r.intents for r in rounds))
        for phase in rounds:
            pooled.completed += phase.completed
            pooled.failed_to_start += phase.failed_to_start
            pooled.latencies += phase.latencies
            pooled.accepted_at_provider += phase.accepted_at_provider
            pooled.events += phase.events
            pooled.history_bytes += phase.history_bytes
            pooled.actions += phase.actions
            pooled.close_events += phase.close_events
            pooled.states += phase.states
            pooled.timed_out = pooled.timed_out or phase.timed_out
            pooled.window_seconds += phase.window_seconds
            pooled.foreign_cpu += phase.foreign_cpu
            for name, seconds in phase.cpu.items():
                pooled.cpu[name] = pooled.cpu.get(name, 0.0) + seconds
            for name, seconds in phase.process_cpu.items():
                pooled.process_cpu[name] = pooled.process_cpu.get(name, 0.0) + seconds
        pooled.first_start = 0.0
        pooled.last_end = sum(phase.last_end - phase.first_start for phase in rounds)
        pooled.worker_rss, pooled.server_rss = last.worker_rss, last.server_rss
        return pooled


async def offer(n: int, rate: float | None, start_one: Callable[[int], Awaitable[None]]) -> None:
    """Call start_one(0..n-1): at `rate` per second on a fixed schedule, or as fast as allowed.

    At a fixed rate every start is launched on schedule whether or not earlier ones finished
    (an open-loop load, as real traffic is); unlimited runs UNLIMITED_CONCURRENCY at a time.
    """
    tasks: list[asyncio.Task[None]] = []
    if rate:
        origin = time.monotonic()
        for i in range(n):
            delay = origin + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(start_one(i)))
    else:
        slots = asyncio.Semaphore(UNLIMITED_CONCURRENCY)

        async def bounded(i: int) -> None:
            async with slots:
                await start_one(i)

        tasks = [asyncio.create_task(bounded(i)) for i in range(n)]
    await asyncio.gather(*tasks)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(interval)
    return False


async def workflows_closed(client: Client, id_prefix: str, expected: int) -> bool:
    """All `expected` workflows whose id starts with the prefix are visible and none is running."""
    base = f'WorkflowId STARTS_WITH "{id_prefix}"'
    total = (await client.count_workflows(base)).count
    if total < expected:
        return False
    return (await client.count_workflows(f'{base} AND ExecutionStatus="Running"')).count == 0


@dataclass
class HistoryFigures:
    ends: dict[str, float]  # workflow id -> close time (wall clock seconds) of its last run
    closed_as: dict[str, str]  # workflow id -> its last run's close event (WORKFLOW_EXECUTION_COMPLETED, ...)
    events: int
    actions: Counter[str]
    close_events: Counter[str]
    history_bytes: int = 0  # serialized size of every run's history, as Temporal stores and bills it


async def read_histories(client: Client, first_runs: dict[str, str | None], concurrency: int = 8) -> HistoryFigures:
    """Fetch every run of every workflow (following continue-as-new) and count events and actions."""
    figures = HistoryFigures({}, {}, 0, Counter(), Counter())
    slots = asyncio.Semaphore(concurrency)

    async def one(workflow_id: str, run_id: str | None) -> None:
        async with slots:
            while True:
                history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
                events = list(history.events)
                figures.events += len(events)
                figures.history_bytes += sum(event.ByteSize() for event in events)
                figures.actions.update(billable_actions(events))
                run_id = next_run_id(events)
                if run_id is None:
                    break
            last = events[-1]
            closed_as = EventType.Name(last.event_type).removeprefix("EVENT_TYPE_")
            figures.closed_as[workflow_id] = closed_as
            figures.close_events[closed_as] += 1
            figures.ends[workflow_id] = last.event_time.ToDatetime(tzinfo=UTC).timestamp()

    await asyncio.gather(*(one(workflow_id, run_id) for workflow_id, run_id in first_runs.items()))
    return figures


def completed_latencies(
    phase: Phase, starts: dict[str, float], figures: HistoryFigures, group: Callable[[str], str] | None = None
) -> None:
    """Fill the phase's completion figures from histories: only completed workflows count as done.

    With `group` (workflow id -> the key `starts` uses), several workflows make one unit, done when
    every one of them completed, at the last one's close: a notice and its per-channel workflows."""
    done: dict[str, float] = {}
    unfinished: set[str] = set()
    for workflow_id, end in figures.ends.items():
        key = group(workflow_id) if group else workflow_id
        if figures.closed_as[workflow_id] != "WORKFLOW_EXECUTION_COMPLETED":
            unfinished.add(key)
        done[key] = max(done.get(key, end), end)
    done = {key: end for key, end in done.items() if key not in unfinished}
    phase.events, phase.actions, phase.close_events = figures.events, figures.actions, figures.close_events
    phase.history_bytes = figures.history_bytes
    phase.completed = len(done)
    phase.latencies = [done[w] - starts[w] for w in done]
    phase.first_start = min(starts.values())
    phase.last_end = max(done.values(), default=phase.first_start)
