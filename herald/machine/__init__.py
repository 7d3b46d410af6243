"""The intent machine: the one place an intent's state and its ledger rows change.

Pure and synchronous: it is given the clock, the intent, the delivery policy and each event (a
submit's answer, a report, a lookup's or the event stream's answer, a timer, a cancel, a policy
decision), and answers with the new state, the rows to write and what to do next. The workflow
(``workflows/notification.py``) only runs it: it waits, calls activities and hands back what they
said. Tested without Temporal (``tests/unit``) and on the time-skipping server (``tests/workflow``).

    machine.py ..... IntentMachine: the events and what comes next
    record.py ...... IntentRecord: state, attempts, transitions, and the rows they write
    looks.py ....... LookPlan: when each open attempt is next asked about
    attempt.py ..... AttemptRecord: one attempt's working copy
    rows.py ........ LedgerBuffer: the decided, unwritten ledger rows and their numbers
    clock.py ....... Clock: the time and randomness the machine is given
"""

from herald.machine.machine import IntentMachine, Look

__all__ = ["IntentMachine", "Look"]
