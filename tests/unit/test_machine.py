"""The intent machine as tables: the events it is stepped with and the commands it answers, no Temporal.

Each case is a path; each row moves the test clock, steps the machine with one event and lists the
commands it returned (``tests/unit/machine_tables.py`` shows each as one line: rows as "intent,
attempt 1, t1 submitting, o1 unknown, inbox 7 applied", waits as their length). The same paths run
through the real workflow on the time-skipping server in ``tests/workflow``.
"""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest

from herald.core.contracts import AlreadyRecorded, AttemptStatus, Held, KeyConflict, NotSent
from herald.core.lifecycle import IntentState, SubmitResult
from herald.core.machine import IntentMachine
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.commands import ContinueAsNew, ReadOrder, Submit
from herald.core.machine.events import (
    Started,
    HistoryChecked,
    KeyConflictArrived,
    OrderRead,
    ProviderCancelAnswered,
    SubmitAnswered,
    SubmitFailed,
)
from herald.core.outcomes import ProviderStatus, Retryable, Unknown
from herald.core.rows import IntentRecorded
from herald.core.send_policy import Category, Decision, PolicyDecision, PolicyRules, built_in_order, dispatch_order
from herald.providers.twilio import TwilioAdapter
from tests.unit.clock import TestClock
from tests.unit.machine_tables import (
    AT,
    DONE,
    EMAIL,
    ENDED,
    LOST,
    ORDER_READ,
    POLICY,
    SHORT,
    SMS,
    STARTED,
    UNAVAILABLE,
    WRITTEN,
    Case,
    accepted,
    called,
    cancel,
    found,
    machine_for,
    not_found,
    play,
    refused,
    report,
    show,
    smtp,
    stream,
)

DELIVERED, SENT = ProviderStatus.DELIVERED, ProviderStatus.SENT
NOT_SENT = SubmitAnswered(step=NotSent(reason="ledger unavailable"))
NEVER_STARTED = SubmitFailed(failure="TimeoutError", never_started=True)
HOLD = SubmitAnswered(
    step=Held(
        decision=PolicyDecision(
            version=3, decision=Decision.DEFER, rule="cooldown", reason="cooldown", not_before=AT + timedelta(hours=1)
        )
    )
)
BUSY = called(Retryable(reason="busy"), TwilioAdapter.capabilities)
OTHER_RUN = IntentRecorded(
    created=False, same_payload=True, first_run_id="run-0", next_transition_seq=4, next_observation_seq=5,
    last_state=IntentState.DELIVERED,
)  # fmt: skip
LONG = HistoryChecked(long=True)  # Temporal suggests continuing as new
CANCELS = TwilioAdapter.capabilities.model_copy(update={"cancel_accepted": True})
EMAIL_ID = "<att_1@example.com>"
ERASED = "recipient: sealed under an erased recipient's key (recipient erased); it cannot be read"
MISMATCH = "attachment: the stored artifact's SHA-256 is not the one the intent names"


def expires_in(minutes: int) -> dict[str, object]:
    return {**SMS, "expires_at": (AT + timedelta(minutes=minutes)).isoformat()}


# The opening every path without a client-read order shares: the order is read, attempt 1 submitted.
OPENING = [
    (0, STARTED, ["read order"]),
    (0, ORDER_READ, ["submit attempt 1: intent, attempt 1, t1 submitting"]),
]
# An unknown submit to Twilio, checkpointed and waiting for its first lookup by our reference.
LOST_SMS = [
    *OPENING,
    (0, LOST, ["check history"]),
    (0, SHORT, ["write intent, attempt 1, t1 submitting, o1 unknown"]),
    (0, WRITTEN, ["publish submitting/1", "wait 5s"]),
]
CLOSE_DELIVERED = [
    (0, WRITTEN, ["publish delivered/1", "await handlers"]),
    (0, DONE, ["finish delivered"]),
]

CASES = [
    Case("a report after acceptance delivers; the first wait writes nothing; a report signalled twice counts once", [
        *OPENING,
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (3, report(7, DELIVERED), ["(woken)"]),
        (0, report(7, DELIVERED), ["(woken)"]),
        (0, ENDED, ["write t2 accepted, t3 delivered, o1 accepted, o2 status, inbox 7 applied"]),
        *CLOSE_DELIVERED,
    ]),
    Case("the starting client's order, read just now, spares the read", [
        (0, STARTED, ["submit attempt 1: intent, attempt 1, t1 submitting"]),
    ], first_order_at=AT),
    Case("the starting client's order, read 31 s ago, is read again", [
        (0, STARTED, ["read order"]),
    ], first_order_at=AT - timedelta(seconds=31)),
    Case("a submit that did not finish is looked up by our reference, never resent; its rows are written again", [
        *LOST_SMS,
        (5, ENDED, ["look attempt 1 by reference"]),
        (0, found(DELIVERED), ["write t2 delivered, o2 found"]),
        *CLOSE_DELIVERED,
    ]),
    Case("not found proves absence only past the proof window; the retry waits its backoff, reads the order again", [
        *LOST_SMS,
        (5, ENDED, ["look attempt 1 by reference"]),
        (0, not_found(5), ["check history"]),
        (0, SHORT, ["write o2 not_found (not applied)"]),
        (0, WRITTEN, ["wait 10s"]),
        (661, ENDED, ["look attempt 1 by reference"]),
        (0, not_found(666), ["check history"]),
        (0, SHORT, ["write t2 retryable_failure, o3 not_found"]),
        (0, WRITTEN, ["publish retryable_failure/1", "wait 3.75s"]),
        (2.5, ENDED, ["check history"]),
        (0, SHORT, ["wait 1.25s"]),  # woken early: the same deadline, nothing new to write
        (1.25, ENDED, ["check history"]),
        (0, SHORT, ["read order"]),
        (0, ORDER_READ, ["submit attempt 2: attempt 2, t3 pending, t4 submitting"]),
    ]),
    Case("a report of an attempt presumed absent, during the backoff, settles without a resend and is counted", [
        *LOST_SMS,
        (666, ENDED, ["look attempt 1 by reference"]),
        (0, not_found(666), ["check history"]),
        (0, SHORT, ["write t2 retryable_failure, o2 not_found"]),
        (0, WRITTEN, ["publish retryable_failure/1", "wait 3.75s"]),
        (1, report(9, DELIVERED), ["(woken)"]),
        (0, ENDED, ["write t3 delivered, o3 status, o4 presumed_not_accepted_then_seen, inbox 9 applied"]),
        *CLOSE_DELIVERED,
    ]),
    Case("a poll by id that finds nothing proves nothing, even past the proof window", [
        *OPENING,
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (30, ENDED, ["look attempt 1 by id SM1"]),
        (0, not_found(30), ["check history"]),
        (0, SHORT, ["write t2 accepted, o1 accepted, o2 not_found (not applied)"]),
        (0, WRITTEN, ["publish accepted/1", "wait 60s"]),
        (660, ENDED, ["look attempt 1 by id SM1"]),
        (0, found(DELIVERED), ["write t3 delivered, o3 found"]),
        *CLOSE_DELIVERED,
    ]),
    Case("the ledger cannot take the rows: a wait that writes nothing; a cancel meanwhile ends it never sent", [
        *OPENING,
        (0, NOT_SENT, ["wait 5s"]),
        (1, cancel(), ["reply cancelled", "(woken)"]),
        # Nothing of the first try was committed: its rows come back, ahead of the cancel's.
        (0, ENDED, ["write intent, attempt 1, t1 submitting, t2 cancelled, o1 not_sent"]),
        (0, WRITTEN, ["publish cancelled/1", "await handlers"]),
        (0, DONE, ["finish cancelled"]),
    ]),
    Case("the ledger back, the same attempt is submitted again with what was learned meanwhile", [
        *OPENING,
        (0, KeyConflictArrived(conflict=KeyConflict(intent_fingerprint="f" * 64, observed_at=AT)), []),
        (0, NOT_SENT, ["wait 5s"]),
        (5, ENDED, ["submit attempt 1: intent, attempt 1, t1 submitting, o1 key_conflict (not applied)"]),
    ]),
    Case("a submit still queued at expiry ends expired in the route queue, never sent", [
        *OPENING,
        (120, NEVER_STARTED, ["write intent, attempt 1, t1 submitting, t2 expired, o1 not_sent"]),
        (0, WRITTEN, ["publish expired/1", "await handlers"]),
        (0, DONE, ["finish expired"]),
    ], request=expires_in(2), reason="expired in the route queue"),
    Case("a deferral gives the attempt back; an expiry during it names both reasons", [
        *OPENING,
        # The withdrawn attempt leaves no row, and its transition number is given back.
        (0, HOLD, ["write intent, o1 deferred"]),
        (0, WRITTEN, ["wait 300s"]),
        (300, ENDED, ["write t1 expired"]),
        (0, WRITTEN, ["publish expired/0", "await handlers"]),
        (0, DONE, ["finish expired"]),
    ], request=expires_in(5), reason="held by policy v3 (cooldown)"),
    Case("refused before any call (the recipient erased): failed at once, the rule named, nothing looked up", [
        *OPENING,
        (0, refused(ERASED), ["write t2 permanent_failure, o1 rejected"]),
        (0, WRITTEN, ["publish permanent_failure/1", "await handlers"]),
        (0, DONE, ["finish permanent_failure"]),
    ], reason="recipient erased"),
    Case("an attachment not as stored is refused after the attempt was handed to its provider, which is named", [
        *OPENING,
        (0, refused(MISMATCH, "smtp"), ["write t2 permanent_failure, o1 rejected"]),
        (0, WRITTEN, ["publish permanent_failure/1", "await handlers"]),
        (0, DONE, ["finish permanent_failure"]),
    ], request=EMAIL, reason="attachment"),
    Case("the retry budget spent, the intent fails permanently", [
        *OPENING,
        (0, BUSY, ["check history"]),
        (0, SHORT, ["write t2 retryable_failure, o1 retryable"]),
        (0, WRITTEN, ["publish retryable_failure/1", "wait 3.75s"]),
        (10, ENDED, ["check history"]),
        (0, SHORT, ["read order"]),
        (0, ORDER_READ, ["submit attempt 2: attempt 2, t3 pending, t4 submitting"]),
        (0, BUSY, ["write t5 retryable_failure, t6 permanent_failure, o2 retryable"]),
    ], policy=POLICY.model_copy(update={"max_attempts": 2}), reason="retry budget exhausted after 2 attempts"),
    Case("at the horizon, a provider that cannot answer is asked again 2 s and 4 s later, then unknown", [
        *OPENING,
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 20s"]),
        (20, ENDED, ["look attempt 1 by id SM1"]),
        (0, UNAVAILABLE, ["pause 2s"]),
        (2, ENDED, ["look attempt 1 by id SM1"]),
        (0, UNAVAILABLE, ["pause 4s"]),
        (4, ENDED, ["look attempt 1 by id SM1"]),
        (0, UNAVAILABLE, [(
            "write t2 accepted, t3 unknown, o1 accepted, o2 unavailable (not applied), "
            "o3 unavailable (not applied), o4 unavailable (not applied)"
        )]),
        (0, WRITTEN, ["publish unknown/1", "await handlers"]),
        (0, DONE, ["finish unknown"]),
    ], policy=POLICY.model_copy(update={"resolution_horizon": timedelta(seconds=20)}), reason="attempt 1 unavailable"),
    Case("at the horizon, the last look's second try finds it delivered", [
        *OPENING,
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 20s"]),
        (20, ENDED, ["look attempt 1 by id SM1"]),
        (0, UNAVAILABLE, ["pause 2s"]),
        (2, ENDED, ["look attempt 1 by id SM1"]),
        (0, found(DELIVERED), ["write t2 accepted, t3 delivered, o1 accepted, o2 unavailable (not applied), o3 found"]),
        *CLOSE_DELIVERED,
    ], policy=POLICY.model_copy(update={"resolution_horizon": timedelta(seconds=20)})),
    Case("a cancel after acceptance asks a provider that can cancel, then follows the attempt; a second cancel is refused", [
        *OPENING,
        (0, accepted(capabilities=CANCELS), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (1, cancel(), ["reply cancelled", "(woken)"]),
        (0, ENDED, ["ask the provider to cancel SM1"]),
        (0, ProviderCancelAnswered(canceled=False, reason="already sent"), ["check history"]),
        (0, SHORT, ["write t2 accepted, t3 cancelled, o1 accepted, o2 provider_cancel (not applied)"]),
        (0, WRITTEN, ["publish cancelled/1", "wait 30s, a cancel does not wake it"]),
        (0, cancel(), ["reply cancelled (refused)"]),
        (30, ENDED, ["look attempt 1 by id SM1"]),
        (0, found(DELIVERED), ["write o3 found"]),
        (0, WRITTEN, ["await handlers"]),
        (0, DONE, ["finish cancelled"]),
    ]),
    Case("the key already in the ledger from a run Temporal forgot: suppressed, its rows numbered after that run's", [
        *LOST_SMS[:-1],
        (0, WRITTEN.model_copy(update={"recorded": OTHER_RUN}), ["write t4 suppressed"]),
        (0, WRITTEN, ["publish suppressed/0", "wait 5s"]),
        (5, ENDED, ["await handlers"]),
        (0, DONE, ["finish suppressed"]),
    ]),
    Case("the submit finds the key recorded by an earlier run: suppressed, nothing sent", [
        *OPENING,
        (0, SubmitAnswered(step=AlreadyRecorded(recorded=OTHER_RUN)), ["write t4 suppressed"]),
        (0, WRITTEN, ["publish suppressed/0", "await handlers"]),
        (0, DONE, ["finish suppressed"]),
    ]),
    # What the provider declares decides how an open attempt is asked about.
    Case("e-mail accepted by a relay with events: never asked; quiet until the first poll's time, then to the horizon", [
        *OPENING,
        (0, accepted(EMAIL_ID, smtp(events=True)), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (30, ENDED, ["check history"]),
        (0, SHORT, ["write t2 accepted, o1 accepted"]),
        (0, WRITTEN, ["publish accepted/1", "wait 86370s"]),
        (5, report(4, DELIVERED, provider_id=EMAIL_ID, request=EMAIL), ["(woken)"]),
        (0, ENDED, ["write t3 delivered, o2 status, inbox 4 applied"]),
        *CLOSE_DELIVERED,
    ], request=EMAIL),
    Case("e-mail accepted by a relay without events: relayed, nothing more can be known", [
        *OPENING,
        (0, accepted(EMAIL_ID, smtp(events=False)), ["write t2 accepted, t3 relayed, o1 accepted"]),
        (0, WRITTEN, ["publish relayed/1", "await handlers"]),
        (0, DONE, ["finish relayed"]),
    ], request=EMAIL),
    Case("e-mail accepted by a provider that declares lookups is polled by id: the declaration wins", [
        *OPENING,
        (0, accepted("EM1"), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (30, ENDED, ["look attempt 1 by id EM1"]),
    ], request=EMAIL),
    Case((
        "an unknown e-mail submit (the channel's assumption): the stream is read after the evidence window; "
        "silence counts only once the stream has flowed past it"
    ), [
        *OPENING,
        (0, LOST, ["check history"]),
        (0, SHORT, ["write intent, attempt 1, t1 submitting, o1 unknown"]),
        (0, WRITTEN, ["publish submitting/1", "wait 600s"]),
        (600, ENDED, ["read stream"]),
        (0, stream(), ["check history"]),
        (0, SHORT, ["write o2 stream_silent (not applied)"]),
        (0, WRITTEN, ["wait 60s"]),
        (600, ENDED, ["read stream"]),
        (0, stream(passed_after=90), ["check history"]),
        (0, SHORT, ["write t2 retryable_failure, o3 no_evidence"]),
        (0, WRITTEN, ["publish retryable_failure/1", "wait 3.75s"]),
    ], request=EMAIL, reason="presumed not accepted"),
    Case("an unknown submit to a relay without events still has a question: its stream is read", [
        *OPENING,
        (0, called(Unknown(reason="lost after DATA"), smtp(events=False), "relay"), ["check history"]),
        (0, SHORT, ["write o1 unknown"]),
        (0, WRITTEN, ["publish submitting/1", "wait 600s"]),
        (600, ENDED, ["read stream"]),
    ], request=EMAIL),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_path_steps_as_its_table(case: Case) -> None:
    """Stepped with the case's events, the machine answers with the case's commands, row by row."""
    play(case)


# A run started with no state shown (today's client): it shows one only when it has something to
# say that the close would not (herald.temporal.workflow_api.initial_search_attributes).
QUIET = Started(shown=None)
QUIET_CASES = [
    Case("a straight delivery shows no state: the close writes and finishes, no upsert", [
        (0, QUIET, ["read order"]),
        (0, ORDER_READ, ["submit attempt 1: intent, attempt 1, t1 submitting"]),
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (3, report(7, DELIVERED), ["(woken)"]),
        (0, ENDED, ["write t2 accepted, t3 delivered, o1 accepted, o2 status, inbox 7 applied"]),
        (0, WRITTEN, ["await handlers"]),
        (0, DONE, ["finish delivered"]),
    ]),
    Case("a delivery after a checkpointed wait shows delivered over the state it showed", [
        (0, QUIET, ["read order"]),
        (0, ORDER_READ, ["submit attempt 1: intent, attempt 1, t1 submitting"]),
        (0, LOST, ["check history"]),
        (0, SHORT, ["write intent, attempt 1, t1 submitting, o1 unknown"]),
        (0, WRITTEN, ["publish submitting/1", "wait 5s"]),
        (5, ENDED, ["look attempt 1 by reference"]),
        (0, found(DELIVERED), ["write t2 delivered, o2 found"]),
        *CLOSE_DELIVERED,
    ]),
    Case("a close that is not a delivery always shows its state", [
        (0, QUIET, ["read order"]),
        (0, ORDER_READ, ["submit attempt 1: intent, attempt 1, t1 submitting"]),
        (0, refused(ERASED), ["write t2 permanent_failure, o1 rejected"]),
        (0, WRITTEN, ["publish permanent_failure/1", "await handlers"]),
        (0, DONE, ["finish permanent_failure"]),
    ]),
]


@pytest.mark.parametrize("case", QUIET_CASES, ids=[case.name for case in QUIET_CASES])
def test_a_run_started_with_no_state_shows_one_unless_it_is_a_straight_delivery(case: Case) -> None:
    """Started with nothing shown, the machine upserts before a checkpointed wait and at every close
    but a straight delivery's, so a closed run with no state is a delivered one and nothing else."""
    play(case)


def test_a_run_continued_as_new_carries_everything_it_knows() -> None:
    """Asked to continue as new, the machine writes everything, lets the handlers finish and hands
    the next run a state from which it answers as this one would; a report it saw stays seen."""
    case = Case("continued as new", [
        *OPENING,
        (0, accepted(), ["check history"]),
        (0, SHORT, ["wait 30s"]),
        (1, report(3, SENT), ["(woken)"]),
        (0, ENDED, ["check history"]),
        (0, LONG, ["write t2 accepted, o1 accepted, o2 status, inbox 3 applied"]),
        (0, WRITTEN, ["publish accepted/1", "await handlers"]),
        (0, DONE, ["continue as new (accepted)"]),
    ])  # fmt: skip
    before, clock, (continued,) = play(case)
    assert isinstance(continued, ContinueAsNew)
    after = IntentMachine(continued.input, clock, "run-1")
    assert after.status() == before.status()
    assert [show(command, clock.now()) for command in after.step(STARTED)] == ["check history"]
    assert [show(command, clock.now()) for command in after.step(SHORT)] == ["wait 30s"]
    assert after.step(report(3, SENT)) == [] and not after.woken  # seen by the earlier run
    assert after.step(report(5, DELIVERED)) == [] and after.woken


def test_an_event_that_answers_nothing_the_machine_waits_on_is_refused() -> None:
    """The machine names the event and the command it waits on; started twice, it refuses too."""
    m = machine_for(Case("refused", []), TestClock(AT))
    with pytest.raises(ValueError, match="order_read: answers no command the machine waits on"):
        m.step(ORDER_READ)
    m.step(STARTED)
    with pytest.raises(ValueError, match=r"wait_ended: .* \(it waits on read_order\)"):
        m.step(ENDED)
    with pytest.raises(ValueError, match="started: the machine has started already"):
        m.step(STARTED)


@pytest.mark.parametrize(
    ("request_", "validity", "requested"),
    [
        (SMS, 600, None),  # the delivery policy's validity
        (expires_in(1), 60, None),  # never past the intent's expiry
        ({**SMS, "priority": 5}, 600, 5),  # an intent may ask to go lower than its category
    ],
)
def test_the_order_is_read_for_the_intent_and_the_submit_goes_where_it_says(
    request_: dict[str, object], validity: int, requested: int | None
) -> None:
    """The send policy is asked with the intent's requested priority; the submit carries the order's
    place in the route's queue and a validity no longer than the intent lives."""
    m = machine_for(Case("submit", [], request=request_), TestClock(AT))
    (read,) = m.step(STARTED)
    assert isinstance(read, ReadOrder) and (read.query.requested, read.query.at) == (requested, AT)
    order = dispatch_order(PolicyRules(), 4, Category.TRANSACTIONAL, "shared", requested)
    (submit,) = m.step(OrderRead(order=order))
    assert isinstance(submit, Submit)
    assert (submit.input.validity_seconds, submit.priority_key, submit.fairness_weight) == (
        validity, order.priority_key, order.fairness_weight,
    )  # fmt: skip
    assert (submit.input.policy_at, submit.fairness_key, submit.timeout) == (AT, "shared", POLICY.submit_timeout)


def test_an_order_that_cannot_be_read_sends_at_the_built_in_priorities() -> None:
    """The ledger away, the attempt goes at the built-in order rather than wait, and its
    preparation says why."""
    m = machine_for(Case("unread", []), TestClock(AT))
    m.step(STARTED)
    (submit,) = m.step(OrderRead(order=None, failure="ApplicationError"))
    assert isinstance(submit, Submit)
    assert submit.priority_key == built_in_order(Category.TRANSACTIONAL, "shared", None).priority_key
    assert "send policy unreadable (ApplicationError): built-in defaults" in m.status().transitions[-1].reason


def test_only_the_machine_changes_state_and_the_workflow_uses_its_door() -> None:
    """The workflow package assigns no attribute outside its own objects' setup, never reaches into
    the machine's rules, record, rows or attempts, and uses only the machine's step, status and woken."""
    paths = sorted((Path(__file__).parents[2] / "workflows").glob("*.py"))
    assert {path.name for path in paths} >= {"notification.py", "provider_calls.py"}
    used: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute):
                        owner = target.value
                        assert isinstance(owner, ast.Name) and owner.id == "self", (path.name, ast.unparse(node))
            if isinstance(node, ast.Attribute):
                reached = node.attr in {"_rules", "_record", "ledger", "transition", "settle"}
                assert not reached, (path.name, ast.unparse(node))
                if isinstance(node.value, ast.Attribute) and node.value.attr == "_machine":
                    used.add(node.attr)
    assert used == {"step", "status", "woken"}


# What the machine may import: the standard library's pure parts, pydantic, and Herald's own
# rules and types. No database, HTTP, Temporal, clock, randomness or environment of its own.
_PURE_STDLIB = {"__future__", "collections", "collections.abc", "dataclasses", "datetime", "enum", "typing"}
_IO = {"asyncio", "httpx", "os", "psycopg", "psycopg_pool", "random", "socket", "temporalio", "time"}


def test_the_machine_imports_no_io() -> None:
    """Every module of herald/core/machine imports only pure modules: no I/O library, and of Herald's
    only the core (the layer test holds the core as a whole; this one the machine's own imports)."""
    files = sorted((Path(__file__).parents[2] / "herald" / "core" / "machine").glob("*.py"))
    assert len(files) >= 8, "the machine's modules were not found: the test would pass on nothing"
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in _IO, (path.name, name)
                assert name in _PURE_STDLIB or name == "pydantic" or name.startswith("herald.core."), (path.name, name)

def test_a_refusal_names_the_provider_the_attempt_was_handed_to_and_nothing_it_can_do() -> None:
    """A refusal before the call keeps the provider the attempt's row names (an attachment found
    wrong after the hand-over), or none; no capabilities, since no provider was asked anything."""
    for request, reason, provider in ((SMS, ERASED, None), (EMAIL, MISMATCH, "smtp")):
        rows = [*OPENING, (0, refused(reason, provider), ["write t2 permanent_failure, o1 rejected"])]
        machine, _, _ = play(Case("refused", rows, request=request))
        [attempt] = machine.status().attempts
        assert (attempt.provider, attempt.capabilities) == (provider, None)
        assert attempt.submit_result is SubmitResult.REJECTED
        assert attempt.submit_reason == reason


def test_an_attempt_record_carries_every_field_of_its_status_across_continue_as_new() -> None:
    """Every field of AttemptStatus is the record's, set from it and shown again unchanged: none is
    dropped when a run continues as new (a new field must be named in attempt.py's lists)."""
    record = AttemptRecord(2, "att_x_2", AT)
    record.submit_result, record.provider_id, record.provider_status = SubmitResult.ACCEPTED, "SM2", SENT
    record.error_code, record.failure_retryable, record.lookups = 30003, True, 4
    record.seen_after_presumed_absent, record.provider = True, "twilio"
    record.capabilities, record.message_id_of, record.submit_reason = TwilioAdapter.capabilities, "att_x_1", "busy"
    record.waiting, record.waiting_rule, record.priority, record.fairness_weight = "silent", "rule", 3, 2.5
    record.retry_delay, record.retry_hint = timedelta(seconds=7.5), timedelta(seconds=2)
    record.give_up_after, record.validity = timedelta(hours=1), timedelta(minutes=10)
    record.next_provider = "infobip"
    record.resubmissions, record.resubmitted_at, record.next_resubmit_at = 2, AT, AT + timedelta(seconds=4)
    shown = record.status()
    assert shown.model_dump(exclude_defaults=True).keys() == set(AttemptStatus.model_fields) - {"waiting"}
    assert AttemptRecord.from_status(shown).status() == shown
    record.provider_id = None  # still waiting: its reason is shown and carried too
    assert record.status().waiting == "silent"
    assert AttemptRecord.from_status(record.status()).status() == record.status()
