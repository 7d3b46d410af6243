"""IntentMachine: one notification intent, from pending to an explained outcome, behind one door.

    commands = machine.step(event)

The runner (``workflows/notification.py``) steps the machine with ``Started``, runs the commands
it returns in order, and steps it with the answer of the last one; handlers step it with what
arrives (reports, a refused key reuse, a cancel, whose ``Reply`` the update returns). Besides the
door, two readings: ``status()`` (the query) and ``woken`` (whether the wait the machine is in has
news to judge: the runner's wait condition). Nothing mutable crosses: events and commands are
frozen, and the attempts' working copies never leave the machine.

Only the machine changes an intent's state and decides its ledger rows and what happens next:
the course (``course.py``) decides what comes next, the rules (``rules.py``) what each answer
changes. Pure and synchronous, time and randomness only through its ``Clock``.
"""

from __future__ import annotations

from herald.core.contracts import IntentStatus, NotificationInput
from herald.core.machine.clock import Clock
from herald.core.machine.commands import ANSWERED_BY, Command, Publish, Reply, WaitUntil
from herald.core.machine.course import Course, Steps
from herald.core.machine.events import Answer, CancelAsked, Event, KeyConflictArrived, ReportsArrived, Started
from herald.core.machine.rules import IntentRules


class IntentMachine:
    def __init__(self, input: NotificationInput, clock: Clock, run_id: str) -> None:
        self._rules = IntentRules(input, clock, run_id)
        self._course = Course(self._rules)
        self._steps: Steps[None] | None = None  # the course, once started
        self._awaiting: Command | None = None  # the command whose answer the course waits for

    def step(self, event: Event) -> list[Command]:
        """Take one event; the commands to run now, in order (only the last one is answered).

        Raises:
            ValueError: `event` answers no command the machine is waiting on (or it started twice).
        """
        rules = self._rules
        if isinstance(event, ReportsArrived):
            rules.receive_reports(event.batch)
            return []
        if isinstance(event, KeyConflictArrived):
            rules.on_key_conflict(event.conflict)
            return []
        if isinstance(event, CancelAsked):
            return [Reply(answer=rules.on_cancel(event.request))]
        if isinstance(event, Started):
            if self._steps is not None:
                raise ValueError("started: the machine has started already")
            self._steps = self._course.run(event.shown)
            return self._resume(None)
        awaiting = self._awaiting
        if awaiting is None or not isinstance(event, ANSWERED_BY[type(awaiting)]):
            waited = awaiting.kind if awaiting is not None else "nothing"
            raise ValueError(f"{event.kind}: answers no command the machine waits on (it waits on {waited})")
        return self._resume(event)

    def status(self) -> IntentStatus:
        return self._rules.status()

    @property
    def woken(self) -> bool:
        """The wait the machine is in has news to judge: reports not yet applied, or a cancel when
        the wait is one a cancel ends. False outside a wait."""
        waiting = self._awaiting
        if not isinstance(waiting, WaitUntil):
            return False
        return self._rules.has_reports or (waiting.cancel_wakes and self._rules.cancel_request is not None)

    def _resume(self, answer: Answer | None) -> list[Command]:
        """Run the course up to its next answered command (or its end): every command it gave meanwhile."""
        assert self._steps is not None
        self._awaiting = None
        commands: list[Command] = []
        while True:
            command = self._steps.send(answer)
            commands.append(command)
            if not isinstance(command, Publish):
                break
            answer = None
        if type(command) in ANSWERED_BY:
            self._awaiting = command
        return commands
