"""The bench's rounds pool into one figure per variant (sums, not averages of ratios), and each
round's Herald/floor ratio is shown beside it, so the machine's drift can be read off."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.common import Phase
from bench.report import round_ratios


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


def _timed(variant: str, completed: int, span: float, cpu: float) -> Phase:
    phase = Phase(variant=variant, offered_rate=None, intents=completed, completed=completed)
    phase.first_start, phase.last_end = 0.0, span
    phase.cpu = {"worker": cpu}
    phase.latencies = [span / 10]
    return phase


def test_each_round_is_compared_herald_to_floor_with_the_median_and_range() -> None:
    rounds = {
        "floor": [_timed("floor", 100, 10.0, 5.0), _timed("floor", 100, 20.0, 10.0), _timed("floor", 100, 10.0, 5.0)],
        # 0.80x, 1.00x and 0.50x the floor's intents/s; CPU 1.2x, 1.0x, 1.1x.
        "herald": [_timed("herald", 100, 12.5, 6.0), _timed("herald", 100, 20.0, 10.0), _timed("herald", 100, 20.0, 5.5)],
    }
    lines = round_ratios("throughput", rounds)

    assert lines[0] == (
        "- throughput pass, Herald/floor intents/s by round: 0.80×, 1.00×, 0.50× (median 0.80×, range 0.50–1.00×)"
    )
    assert lines[1] == (
        "- throughput pass, Herald/floor CPU ms/intent, total by round: 1.20×, 1.00×, 1.10× (median 1.10×, range 1.00–1.20×)"
    )
    assert [line.split(" by round")[0] for line in lines[2:]] == [
        "- throughput pass, Herald/floor latency p50",
        "- throughput pass, Herald/floor latency p99",
    ]


def test_a_single_round_has_no_spread_to_show() -> None:
    assert round_ratios("latency", {"floor": [_timed("floor", 1, 1.0, 1.0)], "herald": [_timed("herald", 1, 1.0, 1.0)]}) == []
