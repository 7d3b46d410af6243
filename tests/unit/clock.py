"""The intent machine's clock in unit tests."""

from __future__ import annotations

from datetime import datetime, timedelta


class TestClock:
    """The intent machine's clock in unit tests: a time the test moves, and fixed jitter."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, at: datetime, jitter: float = 0.5) -> None:
        self.at, self.jitter = at, jitter

    def now(self) -> datetime:
        return self.at

    def random(self) -> float:
        return self.jitter

    def advance(self, by: timedelta) -> None:
        self.at += by
