"""The intent machine, driven event by event with no Temporal: state, rows and what comes next.

The workflow (``workflows/notification.py``) only runs the machine; these tests give it the
events the workflow would and check what it answers. The same paths run through the real workflow
on the time-skipping server in ``tests/workflow``.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

from herald.contracts import (
    CancelRequest,
    DeliveryReport,
    Held,
    KeyConflict,
    NotificationInput,
    NotSent,
    ReportBatch,
    Sent,
)
from herald.delivery_policy import DeliveryPolicy, proof_window
from herald.intent import build_intent, parse_request
from herald.lifecycle import IntentState, ObservationKind, SubmitResult
from herald.machine import IntentMachine, Look
from herald.machine.attempt import AttemptRecord
from herald.machine.looks import LookPlan
from herald.outcomes import Accepted, Found, LookupOutcome, NotFound, ProviderStatus, SubmitOutcome, Unknown
from herald.providers.twilio import TwilioAdapter
from herald.send_policy import Category, Decision, PolicyDecision, PolicyRules, dispatch_order
from tests.unit.clock import TestClock

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DATA = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}
POLICY = DeliveryPolicy()
ORDER = dispatch_order(PolicyRules(), 1, Category.TRANSACTIONAL, "shared", None)


def machine(clock: TestClock, **request: object) -> IntentMachine:
    fields = {"business_key": "order_receipt:pay_1", "channel": "sms", "recipient": "+15551230001",
              "template_id": "order_receipt", "template_version": 1, "render_data": DATA, **request}  # fmt: skip
    intent = build_intent(parse_request(fields), clock.now())
    return IntentMachine(NotificationInput(intent=intent, policy=POLICY), clock, "run-1")


def submitting(clock: TestClock, **request: object) -> tuple[IntentMachine, AttemptRecord]:
    """A machine whose first attempt is prepared and handed to the submit (its rows taken)."""
    m = machine(clock, **request)
    attempt = m.begin_attempt(ORDER)
    assert attempt is not None
    m.rows_for_submit()
    return m, attempt


def accepted(provider_id: str = "SM1") -> Sent:
    result = Accepted(provider_id=provider_id, status=ProviderStatus.QUEUED)
    return Sent(outcome=SubmitOutcome(result=result), provider="twilio", capabilities=TwilioAdapter.capabilities)


def report(m: IntentMachine, inbox_id: int, status: ProviderStatus, at: datetime) -> ReportBatch:
    ref = m.attempts[-1].ref
    return ReportBatch(reports=[DeliveryReport(inbox_id=inbox_id, attempt_ref=ref, provider_id="SM1", status=status, received_at=at)])


def test_a_report_after_acceptance_delivers_and_every_change_is_a_numbered_row() -> None:
    clock = TestClock(AT)
    m = machine(clock)
    attempt = m.begin_attempt(ORDER)
    assert attempt is not None and m.state is IntentState.SUBMITTING
    rows = m.rows_for_submit()
    # The submit commits the intent row, the attempt row and the move into submitting first.
    assert rows.record is not None and rows.record.run_id == "run-1"
    assert [row.attempt_ref for row in rows.attempts] == [attempt.ref]
    assert [(row.seq, row.to_state) for row in rows.transitions] == [(1, IntentState.SUBMITTING)]
    assert m.on_submit(attempt, accepted()) is None
    assert m.state is IntentState.ACCEPTED and attempt.provider_id == "SM1"
    clock.advance(timedelta(seconds=3))
    m.receive_reports(report(m, 7, ProviderStatus.DELIVERED, clock.now()))
    m.receive_reports(report(m, 7, ProviderStatus.DELIVERED, clock.now()))  # signalled twice
    assert m.has_reports
    m.apply_reports()
    assert m.state is IntentState.DELIVERED and m.closed_by == "report:delivered"
    written = m.rows_to_write()
    assert written is not None and written.record is None  # the submit wrote the intent row
    assert [(row.seq, row.to_state) for row in written.transitions] == [(2, IntentState.ACCEPTED), (3, IntentState.DELIVERED)]
    assert [row.inbox_id for row in written.observations if row.inbox_id is not None] == [7]
    assert [row.outcome for row in written.receipt_outcomes] == ["applied"]
    assert m.rows_to_write() is None  # taken once


def test_a_submit_that_did_not_finish_is_unknown_and_its_rows_are_written_again() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    step = m.submit_did_not_finish("TimeoutError")
    assert isinstance(step.outcome.result, Unknown)
    m.on_submit(attempt, step)
    assert m.state is IntentState.SUBMITTING and attempt.submit_result is SubmitResult.UNKNOWN
    again = m.rows_to_write()
    # Whether the activity committed them is unknown: written again (idempotently), intent row included.
    assert again is not None and again.record is not None
    assert [row.attempt_ref for row in again.attempts] == [attempt.ref]
    assert [row.seq for row in again.transitions] == [1]
    # It is looked up by our reference, never submitted again.
    assert m.way_to_look(attempt) is Look.LOOKUP


def test_not_found_proves_absence_only_past_the_proof_window_then_a_retry_follows_its_backoff() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    m.on_submit(attempt, m.submit_did_not_finish("TimeoutError"))
    early = NotFound(searched_at=clock.now() + timedelta(seconds=5), queue_bounded=True)
    assert m.on_lookup(attempt, LookupOutcome(result=early), by_reference=True) == "not found"
    assert m.state is IntentState.SUBMITTING and attempt.lookups == 1
    clock.advance(proof_window(POLICY) + timedelta(seconds=1))
    late = NotFound(searched_at=clock.now(), queue_bounded=True)
    m.on_lookup(attempt, LookupOutcome(result=late), by_reference=True)
    assert attempt.submit_result is SubmitResult.NOT_ACCEPTED and m.state is IntentState.RETRYABLE_FAILURE
    due = m.retry_due()
    assert due is not None and due > clock.now() and attempt.retry_delay == due - clock.now()
    clock.at = due
    m.retry_elapsed()
    assert m.state is IntentState.PENDING
    second = m.begin_attempt(ORDER)
    assert second is not None and second.number == 2


def test_a_poll_by_id_that_finds_nothing_proves_nothing() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    m.on_submit(attempt, accepted())
    assert m.way_to_look(attempt) is Look.POLL
    clock.advance(timedelta(days=1))
    m.on_lookup(attempt, LookupOutcome(result=NotFound(searched_at=clock.now(), queue_bounded=True)), by_reference=False)
    assert m.state is IntentState.ACCEPTED and attempt.submit_result is SubmitResult.ACCEPTED
    m.on_lookup(attempt, LookupOutcome(result=Found(provider_id="SM1", status=ProviderStatus.DELIVERED)), by_reference=False)
    assert m.state is IntentState.DELIVERED


def test_a_ledger_that_cannot_take_the_rows_waits_and_a_cancel_meanwhile_ends_it_never_sent() -> None:
    clock = TestClock(AT)
    m = machine(clock)
    attempt = m.begin_attempt(ORDER)
    assert attempt is not None
    first = m.rows_for_submit()
    due = m.not_sent()
    assert due > clock.now() and m.waits_to_resubmit(due)
    m.on_cancel(CancelRequest(reason="refunded", operator="ops"))
    assert m.state is IntentState.CANCELLED and not m.waits_to_resubmit(due)
    assert m.abandon_not_sent(attempt, NotSent(reason="ledger unavailable"))
    assert attempt.submit_result is SubmitResult.NOT_SENT and attempt.resolved
    written = m.rows_to_write()
    # Nothing of the first try was committed: its rows come back, ahead of the cancel's.
    assert written is not None and written.record is not None
    assert [row.seq for row in written.transitions] == [1, 2] and written.transitions[0] == first.transitions[0]
    assert [(row.kind, row.applied) for row in written.observations] == [(ObservationKind.NOT_SENT, True)]


def test_the_ledger_coming_back_submits_the_same_attempt_with_what_was_learned_meanwhile() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    m.on_key_conflict(KeyConflict(intent_fingerprint="f" * 64, observed_at=clock.now()))
    clock.at = m.not_sent()
    assert not m.waits_to_resubmit(clock.now()) and not m.abandon_not_sent(attempt, NotSent(reason="ledger away"))
    again = m.rows_for_submit()
    assert [row.attempt_ref for row in again.attempts] == [attempt.ref]
    assert [row.kind for row in again.observations] == [ObservationKind.KEY_CONFLICT]


def test_a_deferral_gives_the_attempt_back_and_an_expiry_during_it_names_both_reasons() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock, expires_at=(AT + timedelta(minutes=5)).isoformat())
    not_before = AT + timedelta(hours=1)
    hold = Held(decision=PolicyDecision(version=3, decision=Decision.DEFER, rule="cooldown", reason="cooldown", not_before=not_before))
    assert m.on_submit(attempt, hold) == not_before
    assert m.state is IntentState.PENDING and m.attempts == [] and m.deferred(not_before)
    clock.advance(timedelta(minutes=5))
    m.deferral_woken(hold)
    assert m.state is IntentState.EXPIRED and not m.deferred(not_before)
    assert "held by policy v3 (cooldown)" in m.status().transitions[-1].reason
    written = m.rows_to_write()
    # The withdrawn attempt left no row, and its transition number was given back.
    assert written is not None and written.attempts == []
    assert [(row.seq, row.to_state) for row in written.transitions] == [(1, IntentState.EXPIRED)]


def test_an_accepted_attempt_first_waits_lazily_to_its_first_poll() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    m.on_submit(attempt, accepted())
    plan = LookPlan(m)
    until, governing, lazy = plan.next_wait()
    assert governing is attempt and lazy and until > clock.now()
    assert not plan.take_if_due(attempt)
    clock.at = until
    assert plan.take_if_due(attempt)


def test_a_run_continued_as_new_carries_everything_it_knows() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock)
    m.on_submit(attempt, accepted())
    m.receive_reports(report(m, 3, ProviderStatus.SENT, clock.now()))
    m.apply_reports()
    carried = m.carry()
    after = IntentMachine(NotificationInput(intent=m.intent, policy=POLICY, carried=carried), clock, "run-1")
    assert after.status() == m.status()
    after.receive_reports(report(after, 3, ProviderStatus.SENT, clock.now()))  # seen by the earlier run
    assert not after.has_reports


def test_only_the_machine_changes_state() -> None:
    """The workflow package assigns no attribute outside its own objects' setup and never reaches
    into the machine's record, rows or attempts to change them."""
    paths = sorted((Path(__file__).parents[2] / "workflows").glob("*.py"))
    assert {path.name for path in paths} >= {"notification.py", "checkpoints.py", "provider_calls.py"}
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
                assert node.attr not in {"_record", "ledger", "transition", "settle"}, (path.name, ast.unparse(node))


def test_a_submit_still_queued_at_expiry_ends_expired_in_the_route_queue_never_sent() -> None:
    clock = TestClock(AT)
    m, attempt = submitting(clock, expires_at=(AT + timedelta(minutes=2)).isoformat())
    step = m.expired_in_queue()
    clock.advance(timedelta(minutes=2))  # the queue's deadline is the intent's expiry
    m.not_sent()
    assert m.abandon_not_sent(attempt, step)
    assert m.state is IntentState.EXPIRED and attempt.submit_result is SubmitResult.NOT_SENT
    reason = m.status().transitions[-1].reason
    assert reason.startswith("intent expired at") and "expired in the route queue" in reason
    written = m.rows_to_write()
    # The attempt was prepared, never written by a submit: its rows go with the close.
    assert written is not None and [row.attempt_ref for row in written.attempts] == [attempt.ref]


def test_the_provider_may_hold_an_attempt_no_longer_than_the_intent_lives() -> None:
    clock = TestClock(AT)
    _, attempt = submitting(clock, expires_at=(AT + timedelta(seconds=45)).isoformat())
    assert attempt.validity == timedelta(seconds=45)  # the policy's 600 s would outlive the intent
    _, attempt = submitting(clock)
    assert attempt.validity == POLICY.provider_queue_validity


def test_the_starting_clients_order_serves_the_first_attempt_only_while_fresh() -> None:
    """An order read by the client at start spares the workflow its own read for the first attempt,
    read within the last 30 s; a stale one, and every later attempt, asks the send policy again."""
    clock = TestClock(AT)
    fields = {"business_key": "order_receipt:pay_1", "channel": "sms", "recipient": "+15551230001",
              "template_id": "order_receipt", "template_version": 1, "render_data": DATA}  # fmt: skip
    intent = build_intent(parse_request(fields), clock.now())
    order = dispatch_order(PolicyRules(), 4, Category.TRANSACTIONAL, "shared", 5)
    fresh = IntentMachine(NotificationInput(intent=intent, first_order=order, first_order_at=AT), clock, "run-1")
    assert fresh.known_order() == order
    attempt = fresh.begin_attempt(order)
    assert attempt is not None and attempt.priority == 5
    assert fresh.known_order() is None  # a second attempt would read the policy in force then

    later = TestClock(AT + timedelta(seconds=31))  # e.g. the first worker task came late
    stale = IntentMachine(NotificationInput(intent=intent, first_order=order, first_order_at=AT), later, "run-1")
    assert stale.known_order() is None
    assert machine(clock).known_order() is None  # a client without the ledger read nothing
