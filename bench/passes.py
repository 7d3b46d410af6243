"""The side-by-side passes: an untimed warm-up, then rounds of every variant in alternating order, pooled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.common import Phase
from bench.context import Bench

# One variant's run: (bench, intents, offered rate or None for unlimited, timeout) -> its phase.
Runner = Callable[[Bench, int, float | None, float], Awaitable[Phase]]
WARMUP_INTENTS = 10


def pass_rates(rate: float, latency_rate: float) -> list[tuple[str, float | None]]:
    """The side-by-side passes: throughput offered at `rate` (0: as fast as the driver can), then
    latency at `latency_rate` unless that is 0."""
    return [("throughput", rate or None)] + ([("latency", latency_rate)] if latency_rate else [])


async def run_passes(
    bench: Bench,
    runners: dict[str, Runner],
    intents: int,
    rounds: int,
    passes: list[tuple[str, float | None]],
    timeout: float,
    unit: str = "intents",
) -> tuple[dict[str, dict[str, Phase]], dict[str, dict[str, list[Phase]]]]:
    """Each (pass name, offered rate) of `passes` in turn, `rounds` rounds of every runner.

    Returns each pass's phases pooled over its rounds by variant, and the rounds themselves.
    """
    # Untimed warm-up: workers polling, imports and connection pools warm, caches primed.
    for runner in runners.values():
        await runner(bench, WARMUP_INTENTS, None, timeout)
    pooled: dict[str, dict[str, Phase]] = {}
    by_round: dict[str, dict[str, list[Phase]]] = {}
    for pass_name, rate in passes:
        phases: dict[str, list[Phase]] = {name: [] for name in runners}
        for round_number in range(rounds):
            # Every other round runs the variants in reverse order, so a machine that speeds up
            # or slows down during the pass does not favour the variant that always runs first.
            order = list(runners.items()) if round_number % 2 == 0 else list(reversed(runners.items()))
            for name, runner in order:
                print(
                    f"{pass_name} pass, round {round_number + 1}/{rounds}: {name}, {intents} {unit},"
                    f" offered {rate or 'unlimited'}/s",
                    flush=True,
                )
                phases[name].append(await runner(bench, intents, rate, timeout))
        pooled[pass_name] = {name: Phase.pooled(phases[name]) for name in runners}
        by_round[pass_name] = phases
    return pooled, by_round
