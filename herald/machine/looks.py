"""LookPlan: when each open attempt is next asked about, while the intent stays open.

Normally one attempt is open; two are open only when evidence showed the provider had an attempt
Herald had concluded it never took. An attempt without a provider id (its submit's outcome is
unknown) is looked up by our reference on the lookup schedule; one with an id is polled on the
slower poll schedule while reports are awaited. The course makes one plan each time the intent
enters the open states; the plan only reads the rules.
"""

from __future__ import annotations

from datetime import datetime

from herald.machine.attempt import AttemptRecord
from herald.machine.rules import IntentRules


class LookPlan:
    def __init__(self, machine: IntentRules) -> None:
        self._machine = machine
        self._clock = machine.clock
        self._due: dict[int, tuple[bool, datetime]] = {}  # attempt number -> (polled by id, when)
        self._quiet_until: datetime | None = None  # end of a report-only attempt's lazy first wait
        self._watched: list[AttemptRecord] = []

    def next_wait(self) -> tuple[datetime, AttemptRecord, bool]:
        """Until when to wait, the attempt whose horizon governs the wait, and whether the wait is
        lazy (the ledger and search attributes are not written before it)."""
        machine, now = self._machine, self._clock.now()
        self._watched = machine.open_attempts()
        for attempt in self._watched:
            by_id = attempt.provider_id is not None
            if self._due.get(attempt.number, (None,))[0] is not by_id:
                self._due[attempt.number] = (by_id, now + machine.look_delay(attempt))
        for number in [number for number in self._due if number not in {a.number for a in self._watched}]:
            del self._due[number]
        if not any(attempt.open for attempt in self._watched):
            # The evidence rules keep an open attempt behind these states; looping here would
            # spin without waiting. Failing the task makes the bug visible instead.
            raise RuntimeError(f"intent is {machine.state.value} with no open attempt")
        until = min(self._due[attempt.number][1] for attempt in self._watched)
        # Until an accepted attempt's first poll, the ledger and search attributes are not
        # written: on the normal path the final report arrives first and one write at the close
        # records everything. An intent still waiting at its first poll is checkpointed then.
        lazy = all(
            attempt.provider_id is not None and attempt.lookups == 0 and machine.can_poll(attempt)
            for attempt in self._watched
        )
        if not lazy and machine.awaits_first_event(self._watched):
            # Nothing to poll (SMTP): the same laziness, on a clock of its own: at poll_initial
            # the wait is checkpointed and goes on to the resolution horizon as before.
            self._quiet_until = self._quiet_until or now + machine.policy.poll_initial
            if now < self._quiet_until:
                until, lazy = min(until, self._quiet_until), True
        return until, self._watched[-1], lazy

    @property
    def watched(self) -> list[AttemptRecord]:
        """The open attempts the last wait was planned for."""
        return self._watched

    def take_if_due(self, attempt: AttemptRecord) -> bool:
        """Whether the attempt's time to be asked has come (still open): then it is off the plan."""
        if self._due[attempt.number][1] <= self._clock.now() and attempt.open:
            del self._due[attempt.number]
            return True
        return False
