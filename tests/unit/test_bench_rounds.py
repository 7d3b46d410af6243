"""The bench's rounds pool into one figure per variant: sums, not averages of ratios."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.common import Phase


def _round(completed: int, start: float, end: float, worker_cpu: float, latencies: list[float]) -> Phase:
    phase = Phase(variant="herald", offered_rate=None, intents=completed, completed=completed)
    phase.first_start, phase.last_end = start, end
    phase.cpu = {"worker": worker_cpu}
    phase.latencies = latencies
    phase.actions = Counter({"signal": completed})
    return phase


def test_rounds_pool_completions_over_their_summed_spans_and_add_up_cpu() -> None:
    fast = _round(300, 100.0, 106.0, 3.0, [0.1, 0.2])  # 50/s
    slow = _round(300, 500.0, 510.0, 6.0, [0.3])  # 30/s: the machine slowed down
    pooled = Phase.pooled([fast, slow])

    assert pooled.completed == 600 and pooled.intents == 600
    assert pooled.throughput == pytest.approx(600 / 16)  # not the mean of 50 and 30, nor over 410 s of gap
    assert pooled.cpu_ms_per_intent == {"worker": pytest.approx(1000 * 9.0 / 600)}
    assert sorted(pooled.latencies) == [0.1, 0.2, 0.3]
    assert pooled.actions == Counter({"signal": 600})


def test_one_round_is_itself() -> None:
    only = _round(10, 0.0, 1.0, 0.1, [0.5])
    assert Phase.pooled([only]) is only
