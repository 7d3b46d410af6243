"""The time and the randomness the machine is given: the workflow's, replayed; a test's, fixed."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time (the workflow's deterministic time, never the wall clock's)."""
        ...

    def random(self) -> float:
        """A number in [0, 1) for a schedule's jitter (the workflow's seeded generator)."""
        ...
