"""The workflow's time for the machine, and the one durable timer it waits on, kept across wake-ups.

A wait woken early by a report and resumed toward the same deadline keeps its timer: each timer
started is a billed Temporal action, and a report that changes nothing should not cost one.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from temporalio import workflow


class DurableClock:
    def __init__(self) -> None:
        self._timer: asyncio.Task[None] | None = None
        self._fires_at: datetime | None = None

    def arm(self, fire_at: datetime) -> asyncio.Task[None]:
        """The timer for `fire_at`: the running one if it is for the same deadline, else a new one."""
        if self._timer is not None and self._fires_at == fire_at and not self._timer.done():
            return self._timer
        self.disarm()
        self._fires_at = fire_at
        self._timer = asyncio.create_task(workflow.sleep(fire_at - workflow.now()))
        return self._timer

    def disarm(self) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
        self._timer, self._fires_at = None, None


class WorkflowClock:
    """The machine's clock (``herald.core.machine.clock.Clock``): the workflow's replayed time and seeded randomness."""

    def now(self) -> datetime:
        return workflow.now()

    def random(self) -> float:
        return workflow.random().random()
