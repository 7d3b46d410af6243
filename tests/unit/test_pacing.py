"""The submit pacer spaces calls one interval apart, never waits when idle, and hands each slot, when
it opens, to the most urgent waiter: lowest priority key, then the tenant furthest behind its weight;
the submit activity asks for its slot at the priority Temporal dispatched it with."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from datetime import UTC, datetime

import pytest
from temporalio.common import Priority
from temporalio.testing import ActivityEnvironment

from activities import provider
from herald.core.contracts import SubmitInput
from herald.core.message import Channel, Message
from herald.core.rows import LedgerBatch
from herald.providers.pacing import Pacer


class FakeTime:
    """A clock that moves only when the test says; sleepers wake when it passes their time."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        await future

    async def settle(self) -> None:
        """Let every task that can run, run (no real time passes)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for due, future in list(self._sleepers):
            if due <= self.now + 1e-9:
                self._sleepers.remove((due, future))
                future.set_result(None)
        await self.settle()

    async def run(self, *calls: Awaitable[float]) -> list[float]:
        """Run the calls together, moving the clock from one sleeper's time to the next until all are done."""
        tasks = [asyncio.ensure_future(call) for call in calls]
        await self.settle()
        while not all(task.done() for task in tasks):
            assert self._sleepers, "a waiter is stuck with no one sleeping"
            await self.advance(min(due for due, _ in self._sleepers) - self.now)
        return [task.result() for task in tasks]


class Order:
    """Records which waiter left the pacer when."""

    def __init__(self, fake: FakeTime, pacer: Pacer) -> None:
        self.fake, self.pacer = fake, pacer
        self.left: list[str] = []
        self.at: dict[str, float] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def arrive(self, name: str, **order: object) -> None:
        async def call() -> None:
            await self.pacer.wait(**order)  # type: ignore[arg-type]
            self.left.append(name)
            self.at[name] = self.fake.now

        self.tasks.append(asyncio.create_task(call()))

    async def until_all_left(self) -> None:
        await self.fake.run(*self.tasks)


async def test_a_burst_released_at_once_leaves_one_interval_apart() -> None:
    """The server's rate + 1 burst reaches the provider one interval apart, spanning a full second."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    waits = await fake.run(*(pacer.wait() for _ in range(11)))
    assert waits == pytest.approx([0.1 * k for k in range(11)])
    # In any t seconds the provider sees at most 1 + rate x t calls: 11 calls span a full second.
    assert max(waits) == pytest.approx(1.0)


async def test_a_releaser_woken_late_keeps_the_later_slots_on_schedule() -> None:
    """The releaser wakes 0.25 s after the second slot (a busy event loop): that call goes then, and the
    third, whose slot (0.2 s) has passed too, goes with it, not 0.1 s after the late one: lateness does
    not push the schedule back."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    tasks = [asyncio.ensure_future(pacer.wait()) for _ in range(3)]
    await fake.settle()
    assert tasks[0].done()
    await fake.advance(0.35)  # the slots at 0.1 and 0.2 both passed while the loop was busy
    assert tasks[1].done() and tasks[2].done()
    waits = [task.result() for task in tasks]
    assert waits == pytest.approx([0.0, 0.35, 0.35])


async def test_a_worker_slower_than_the_pace_never_waits() -> None:
    """Calls further apart than the interval go at once and nothing sleeps."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    for _ in range(5):
        assert await pacer.wait() == 0
        fake.now += 0.25
    assert fake.slept == []


async def test_a_late_call_after_a_burst_waits_only_for_what_is_left() -> None:
    """A call that comes while the next slot is near waits only until that slot."""
    fake = FakeTime()
    pacer = Pacer(4, clock=fake.clock, sleep=fake.sleep)
    assert await pacer.wait() == 0  # the next slot at +0.25
    fake.now += 0.1
    assert await fake.run(pacer.wait()) == pytest.approx([0.15])


def test_a_pace_that_is_not_positive_is_refused_naming_the_rule() -> None:
    """A pace of zero calls per second is refused, naming the argument and the rule."""
    with pytest.raises(ValueError, match="per_second: must be a positive number"):
        Pacer(0)


async def test_the_route_lets_half_its_pace_go_at_once_then_spaces_the_rest() -> None:
    """The route's pacer lets ceil(pace / 2) calls go at once, then one per interval."""
    fake = FakeTime()
    pacer = Pacer.for_route(9.7, clock=fake.clock, sleep=fake.sleep)  # burst ceil(9.7 / 2) = 5
    waits = await fake.run(*(pacer.wait() for _ in range(11)))
    assert waits == pytest.approx([0] * 5 + [k / 9.7 for k in range(1, 7)])


async def test_a_burst_allowance_is_spent_once_and_refills_at_the_pace() -> None:
    """Five at once, then one per interval; the allowance refills one call per interval, to five at most."""
    fake = FakeTime()
    pacer = Pacer(10, burst=5, clock=fake.clock, sleep=fake.sleep)
    waits = await fake.run(*(pacer.wait() for _ in range(11)))
    # Five at once, then one per interval: the provider sees at most 5 + 10 t calls in t seconds.
    assert waits == pytest.approx([0, 0, 0, 0, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    await fake.advance(0.1)  # the last slot was at +0.6; one interval on, one may go at once, not two
    assert await pacer.wait() == 0
    assert await fake.run(pacer.wait()) == pytest.approx([0.1])
    await fake.advance(10)  # a quiet spell refills the whole allowance, no more
    again = await fake.run(*(pacer.wait() for _ in range(6)))
    assert again == pytest.approx([0, 0, 0, 0, 0, 0.1])


def test_a_burst_below_one_is_refused_naming_the_rule() -> None:
    """A burst of zero calls is refused, naming the argument and the rule."""
    with pytest.raises(ValueError, match="burst: must be at least 1"):
        Pacer(10, burst=0)


async def test_a_caller_with_its_own_deadline_is_told_not_now_and_takes_no_slot() -> None:
    """wait_at_most refuses a slot further away than its limit without taking it; hold_for pushes every
    slot past a provider's reset time."""
    fake = FakeTime()
    pacer = Pacer(0.1, clock=fake.clock, sleep=fake.sleep)  # one call every 10 s
    assert await pacer.wait_at_most(5) == 0.0
    assert await pacer.wait_at_most(5) is None  # the next slot is 10 s away
    fake.now += 6
    assert await fake.run(pacer.wait_at_most(5)) == pytest.approx([4.0])
    pacer.hold_for(60)
    await fake.advance(10)
    assert await pacer.wait_at_most(5) is None
    await fake.advance(51)
    assert await pacer.wait_at_most(5) == 0.0


async def test_a_deadline_counts_everyone_already_waiting() -> None:
    """A caller behind others already waiting is told "not now" when its turn, behind them, is too far."""
    fake = FakeTime()
    pacer = Pacer(1, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    for name in ("a", "b", "c"):
        order.arrive(name)
    await fake.settle()  # a went at once; b and c wait for +1 and +2
    assert await pacer.wait_at_most(2.5) is None  # its slot would be +3
    await order.until_all_left()
    assert order.left == ["a", "b", "c"]


async def test_an_urgent_call_leaves_before_the_backlog_released_ahead_of_it() -> None:
    """An urgent submit (key 1) that arrives while marketing submits (key 5) wait takes the next slot."""
    fake = FakeTime()
    pacer = Pacer(10, burst=2, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    for k in range(6):
        order.arrive(f"marketing {k}", priority=5, tenant="a")
    await fake.settle()
    assert order.left == ["marketing 0", "marketing 1"]  # the burst, at once
    order.arrive("urgent", priority=1, tenant="a")
    order.arrive("receipt", priority=2, tenant="b")
    await order.until_all_left()
    assert order.left == ["marketing 0", "marketing 1", "urgent", "receipt",
                          "marketing 2", "marketing 3", "marketing 4", "marketing 5"]  # fmt: skip
    # The slots themselves stay one interval apart: the order changes, the pace does not.
    assert order.at["urgent"] == pytest.approx(100.1)
    assert order.at["marketing 5"] == pytest.approx(100.6)


async def test_a_call_without_a_priority_waits_at_the_servers_default_key() -> None:
    """A call naming no priority goes after key 2 and before key 4, as Temporal's default 3 does."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first")  # takes the idle slot
    order.arrive("low", priority=4)
    order.arrive("default")
    order.arrive("high", priority=2)
    await order.until_all_left()
    assert order.left == ["first", "high", "default", "low"]


async def test_within_one_key_tenants_share_the_slots_by_weight() -> None:
    """At one priority key, a tenant of weight 2 gets two slots for each of a tenant of weight 1, first
    come first served within each tenant."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first", priority=5, tenant="c")  # takes the idle slot
    for k in range(6):
        order.arrive(f"a{k}", priority=5, tenant="a", weight=1.0)
    for k in range(6):
        order.arrive(f"b{k}", priority=5, tenant="b", weight=2.0)
    await order.until_all_left()
    served = order.left[1:]
    assert [name for name in served if name.startswith("a")] == [f"a{k}" for k in range(6)]
    assert [name for name in served if name.startswith("b")] == [f"b{k}" for k in range(6)]
    # Over the first nine slots: six of b's, three of a's.
    assert sorted(name[0] for name in served[:9]) == ["a"] * 3 + ["b"] * 6


async def test_a_tenant_arriving_late_starts_level_and_saves_nothing_up() -> None:
    """A tenant with nothing waiting while another used the route starts level with it: it alternates
    with the busy tenant from its arrival on, not first for as long as the busy one ran alone."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    for k in range(8):
        order.arrive(f"a{k}", priority=5, tenant="a")
    await fake.settle()
    for _ in range(3):
        await fake.advance(0.1)
    assert order.left == ["a0", "a1", "a2", "a3"]
    for k in range(3):
        order.arrive(f"b{k}", priority=5, tenant="b")
    await order.until_all_left()
    assert order.left == ["a0", "a1", "a2", "a3", "b0", "a4", "b1", "a5", "b2", "a6", "a7"]


async def test_a_caller_that_gives_up_waiting_leaves_its_slot_to_the_next() -> None:
    """A waiter cancelled (its activity timed out) takes no slot: the next waiter gets it on time."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first")
    order.arrive("gives up", priority=1)
    order.arrive("next", priority=5)
    await fake.settle()
    order.tasks.pop(1).cancel()
    await order.until_all_left()
    assert order.left == ["first", "next"]
    assert order.at["next"] == pytest.approx(100.1)


class RecordingPacer(Pacer):
    """A pacer that records the order each call asked for and never waits."""

    def __init__(self) -> None:
        super().__init__(10)
        self.asked: list[dict[str, object]] = []

    async def wait(self, **order: object) -> float:  # type: ignore[override]
        self.asked.append(order)
        return 0.0


@pytest.mark.parametrize(
    ("dispatched", "asked"),
    [
        (
            Priority(priority_key=1, fairness_key="acme", fairness_weight=3.0),
            {"priority": 1, "tenant": "acme", "weight": 3.0, "leave_by": None},
        ),
        # A task without a priority (a worker of an older build scheduled it): the server's default key, no tenant.
        (Priority.default, {"priority": 3, "tenant": "", "weight": 1.0, "leave_by": None}),
    ],
)
async def test_the_submit_waits_at_the_priority_temporal_dispatched_it_with(
    dispatched: Priority, asked: dict[str, object]
) -> None:
    """The submit activity asks the pacer for the priority key, fairness key and weight of its own task,
    as Temporal delivered them in the activity's info."""
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, priority=dispatched)
    pacer = RecordingPacer()
    assert await environment.run(provider._paced, pacer, None) is True
    assert pacer.asked == [asked]


async def test_the_submit_must_leave_the_pacer_by_three_quarters_of_its_budget() -> None:
    """However urgent the others, the submit's slot is due by three quarters of its budget, the rest
    left for the provider call."""
    pacer = RecordingPacer()
    assert await ActivityEnvironment().run(provider._paced, pacer, (1000.0, 20.0)) is False  # long past
    assert pacer.asked[0]["leave_by"] == pytest.approx(1015.0)


async def test_a_submit_held_past_its_budget_calls_no_provider() -> None:
    """A slot that came after the activity's whole budget (the workflow has given up on this
    execution) sends nothing: a call that late could reach the provider after the not-found proof."""
    called: list[object] = []

    class Provider:
        name = "twilio"

        async def submit(self, outbound: object) -> None:
            called.append(outbound)

    activities = provider.ProviderActivities(
        {Channel.SMS: Provider()}, "http://127.0.0.1:9", None, pacer=RecordingPacer(), vault=None, keyring=None
    )  # type: ignore[arg-type, dict-item]
    message = Message(channel=Channel.SMS, recipient="+15558675310", body="code 482913")
    input = SubmitInput(attempt_ref="att_0123456789abcdef01234567_1", message=message, workflow_id="k/sms",
                        policy_at=datetime.now(UTC), validity_seconds=120, ledger=LedgerBatch())  # fmt: skip
    started = time.monotonic() - 30.0
    sent = await ActivityEnvironment().run(activities._send, Provider(), input, [], window=(started, 20.0))
    assert sent is None and called == []


async def test_a_waiter_due_soon_goes_before_more_urgent_ones() -> None:
    """Priority reorders only while every waiter can still leave by its deadline: a marketing submit
    whose slot is due goes before urgent ones that came later, then they go by priority."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first")  # takes the idle slot
    order.arrive("marketing due", priority=5, leave_by=100.15)
    order.arrive("marketing", priority=5)
    for k in range(3):
        order.arrive(f"urgent {k}", priority=1, leave_by=110.0)
    await order.until_all_left()
    assert order.left == ["first", "marketing due", "urgent 0", "urgent 1", "urgent 2", "marketing"]
    assert order.at["marketing due"] == pytest.approx(100.1)


async def test_deadlines_that_cannot_all_be_met_by_priority_are_met_earliest_first() -> None:
    """Three low-priority waiters due within three slots leave before an urgent one, earliest deadline
    first, each by its deadline."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first")
    order.arrive("late", priority=5, leave_by=100.35)
    order.arrive("early", priority=5, leave_by=100.15)
    order.arrive("middle", priority=4, leave_by=100.25)
    order.arrive("urgent", priority=1)
    await order.until_all_left()
    assert order.left == ["first", "early", "middle", "late", "urgent"]
    assert [order.at[n] for n in ("early", "middle", "late")] == pytest.approx([100.1, 100.2, 100.3])


async def test_a_tenant_that_empties_its_queue_and_comes_back_keeps_what_it_spent() -> None:
    """A tenant with one submit waiting at a time, the next arriving as soon as it left, does not go
    first every time: it shares the slots with a tenant of the same weight that has several waiting."""
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    order = Order(fake, pacer)
    order.arrive("first")  # takes the idle slot
    for k in range(6):
        order.arrive(f"b{k}", priority=5, tenant="b")
    await fake.advance(0.1)  # b0 leaves
    arrived = 0
    while len(order.left) < 8:
        if arrived == sum(1 for name in order.left if name.startswith("a")):
            order.arrive(f"a{arrived}", priority=5, tenant="a")  # a's next, once its last has left
            arrived += 1
            await fake.settle()
        await fake.advance(0.1)
    assert order.left[:8] == ["first", "b0", "a0", "b1", "a1", "b2", "a2", "b3"]
    for task in order.tasks:
        task.cancel()
