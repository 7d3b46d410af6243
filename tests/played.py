"""Scenarios that mostly wait on clocks, played at once: a module fixture starts each as a task, and
each test awaits its own, so a scenario's failure is its test's (`test_lifecycle`; `test_absence_proof`
starts its parametrised scenarios the same way, by hand).

Only for scenarios that share nothing a scenario changes: each its own key and recipient, and no
total (a report's counts, a shared fault) that another scenario moves.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

Scenario = Callable[..., Coroutine[Any, Any, None]]


def play(scenarios: list[Scenario], **fixtures: Any) -> dict[str, asyncio.Task[None]]:
    """Start every scenario now, each given the fixtures its parameters name; the tasks by scenario
    name (the function's, without its leading underscore)."""
    tasks = {}
    for scenario in scenarios:
        wanted = inspect.signature(scenario).parameters
        tasks[scenario.__name__.lstrip("_")] = asyncio.create_task(
            scenario(**{name: fixtures[name] for name in wanted})
        )
    return tasks
