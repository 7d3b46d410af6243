"""The submit pacer spaces calls one interval apart, in call order, and never waits when idle."""

from __future__ import annotations

import asyncio

import pytest

from herald.providers.pacing import Pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def test_a_burst_released_at_once_leaves_one_interval_apart() -> None:
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    waits = await asyncio.gather(*(pacer.wait() for _ in range(11)))  # the server's rate + 1 burst
    assert waits == pytest.approx([0.1 * k for k in range(11)])
    # In any t seconds the provider sees at most 1 + rate x t calls: 11 calls span a full second.
    assert max(waits) == pytest.approx(1.0)


async def test_a_worker_slower_than_the_pace_never_waits() -> None:
    fake = FakeTime()
    pacer = Pacer(10, clock=fake.clock, sleep=fake.sleep)
    for _ in range(5):
        assert await pacer.wait() == 0
        fake.now += 0.25
    assert fake.slept == []


async def test_a_late_call_after_a_burst_waits_only_for_what_is_left() -> None:
    fake = FakeTime()
    pacer = Pacer(4, clock=fake.clock, sleep=fake.sleep)
    await pacer.wait()
    await pacer.wait()  # slot at +0.25
    fake.now += 0.4
    assert await pacer.wait() == pytest.approx(0.1)  # slot at +0.5


def test_a_pace_that_is_not_positive_is_refused_naming_the_rule() -> None:
    with pytest.raises(ValueError, match="per_second: must be a positive number"):
        Pacer(0)


async def test_the_route_lets_half_its_pace_go_at_once_then_spaces_the_rest() -> None:
    fake = FakeTime()
    pacer = Pacer.for_route(9.7, clock=fake.clock, sleep=fake.sleep)  # burst ceil(9.7 / 2) = 5
    waits = await asyncio.gather(*(pacer.wait() for _ in range(11)))
    assert waits == pytest.approx([0] * 5 + [k / 9.7 for k in range(1, 7)])


async def test_a_burst_allowance_is_spent_once_and_refills_at_the_pace() -> None:
    fake = FakeTime()
    pacer = Pacer(10, burst=5, clock=fake.clock, sleep=fake.sleep)
    waits = await asyncio.gather(*(pacer.wait() for _ in range(11)))
    # Five at once, then one per interval: the provider sees at most 5 + 10 t calls in t seconds.
    assert waits == pytest.approx([0, 0, 0, 0, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    fake.now += 0.7  # the allowance refills one call per interval: at +0.7 one may go at once, not two
    assert await pacer.wait() == 0
    assert await pacer.wait() == pytest.approx(0.1)
    fake.now += 10  # a quiet spell refills the whole allowance, no more
    again = await asyncio.gather(*(pacer.wait() for _ in range(6)))
    assert again == pytest.approx([0, 0, 0, 0, 0, 0.1])


def test_a_burst_below_one_is_refused_naming_the_rule() -> None:
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
    assert await pacer.wait_at_most(5) == pytest.approx(4.0)
    pacer.hold_for(60)
    fake.now += 10
    assert await pacer.wait_at_most(5) is None
    fake.now += 51
    assert await pacer.wait_at_most(5) == 0.0
