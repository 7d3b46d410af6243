"""The intent machine: the one place an intent's state, its ledger rows and what comes next change.

Pure and synchronous: it is given the clock, the intent and the delivery policy, and is stepped
with events (``events.py``: what happened) that it answers with commands (``commands.py``: what
to do). The workflow (``workflows/notification.py``) only runs it: it runs each command (an
activity, a timer, a write) and steps the machine with the answer. Tested without Temporal as
tables of events and commands (``tests/unit/test_machine.py``), and on the time-skipping server
(``tests/workflow``).

    machine.py ....... IntentMachine: the one door (step), status() and woken
    events.py ........ the events it is stepped with
    commands.py ...... the commands it answers with, and which event answers each
    course.py ........ Course: what happens next, from pending to closed (a generator of commands)
    rules.py ......... IntentRules: what each answer changes, what the clocks and capabilities decide
    looks.py ......... LookPlan: when each open attempt is next asked about
    presumptions.py .. presumed absent, then seen: the rule for a fact about an attempt presumed
                       absent, before the intent's close or after (the ledger's receipt path too)
    record.py ........ IntentRecord: state, attempts, transitions, and the rows they write
    attempt.py ....... AttemptRecord: one attempt's working copy (never leaves the machine)
    ledger_buffer.py  LedgerBuffer: the decided, unwritten ledger rows and their numbers
    clock.py ......... Clock: the time and randomness the machine is given
"""

from herald.core.machine.machine import IntentMachine

__all__ = ["IntentMachine"]
