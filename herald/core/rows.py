"""Typed rows the workflow hands to the ledger activity, one model per table, and the inbox's report."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from herald.core.intent import Intent
from herald.core.lifecycle import IntentState, ObservationKind, Source
from herald.core.outcomes import Frozen


class AttemptRow(Frozen):
    attempt_ref: str
    workflow_id: str
    number: int
    prepared_at: datetime
    # The provider the attempt was handed to, set by the submit activity in the transaction that
    # precedes its one provider call; None in a row the workflow writes itself: never handed over.
    provider: str | None = None
    # Which account and sender, or relay, it went through (set with the provider).
    route: str | None = None
    # Why the send policy's route chose that provider (herald.core.routes), set with it.
    route_reason: str | None = None
    # The send-policy version and decision that admitted it, in the same transaction.
    policy_version: int | None = None
    policy_decision: str | None = None
    # Where its submit stood in the route's queue (Temporal's priority key and fairness weight),
    # decided by the workflow when it prepared the attempt.
    priority: int | None = None
    fairness_weight: float | None = None


class TransitionRow(Frozen):
    workflow_id: str
    seq: int
    at: datetime
    from_state: IntentState
    to_state: IntentState
    reason: str
    source: Source
    attempt_number: int | None = None


class Finding(Frozen):
    """One observation as decided, before whoever writes it numbers it (the machine's ledger buffer
    while the workflow runs, the ledger for a report after it closed)."""

    attempt_number: int | None
    source: Source
    kind: ObservationKind
    provider_id: str | None = None
    provider_status: str | None = None
    error_code: int | None = None
    applied: bool
    reason: str
    inbox_id: int | None = None
    observed_at: datetime


class ObservationRow(Finding):
    """A finding numbered in its intent's sequence: one row of the observations table."""

    workflow_id: str
    seq: int


class ReceiptOutcomeRow(Frozen):
    inbox_id: int
    outcome: str  # applied | ignored
    reason: str
    workflow_id: str | None


class RecordIntentInput(Frozen):
    intent: Intent
    run_id: str


class LedgerBatch(Frozen):
    """Everything the workflow learned since its last write, written in one transaction, idempotently.

    ``record`` travels with the first write of a run that has not recorded its intent row yet.
    """

    record: RecordIntentInput | None = None
    attempts: list[AttemptRow] = []
    transitions: list[TransitionRow] = []
    observations: list[ObservationRow] = []
    receipt_outcomes: list[ReceiptOutcomeRow] = []

    def is_empty(self) -> bool:
        return not (self.record or self.attempts or self.transitions or self.observations or self.receipt_outcomes)

    def handed_to(
        self, attempt_ref: str, provider: str, route: str | None = None, reason: str | None = None
    ) -> LedgerBatch:
        """This batch with the named attempt's row marked as handed to `provider` (by the submit
        activity, which is about to call it), and why; other attempt rows in the batch stay as they are."""
        update = {"provider": provider, "route": route, "route_reason": reason}
        attempts = [row.model_copy(update=update) if row.attempt_ref == attempt_ref else row for row in self.attempts]
        return self.model_copy(update={"attempts": attempts})

    def admitted(self, attempt_ref: str, policy_version: int, decision: str) -> LedgerBatch:
        """This batch with the named attempt's row stamped with the policy decision that admitted it."""
        update = {"policy_version": policy_version, "policy_decision": decision}
        attempts = [row.model_copy(update=update) if row.attempt_ref == attempt_ref else row for row in self.attempts]
        return self.model_copy(update={"attempts": attempts})

    def merged_with(self, later: LedgerBatch) -> LedgerBatch:
        """This batch followed by `later` (a write that must be repeated, plus what came since)."""
        return LedgerBatch(
            record=self.record or later.record,
            attempts=[*self.attempts, *later.attempts],
            transitions=[*self.transitions, *later.transitions],
            observations=[*self.observations, *later.observations],
            receipt_outcomes=[*self.receipt_outcomes, *later.receipt_outcomes],
        )


class IntentRecorded(Frozen):
    """What the ledger already knew about this key when the workflow recorded its intent."""

    # False when the row existed: a redelivered activity, or a start after Temporal's retention.
    created: bool
    same_payload: bool
    first_run_id: str
    # The ledger's own sequences continue where an earlier run left them.
    next_transition_seq: int
    next_observation_seq: int
    last_state: IntentState | None


class InboxReport(Frozen):
    """A verified report as the inbox stores it (its provider's fields, our attempt reference)."""

    provider: str
    provider_message_id: str
    provider_status: str
    attempt_ref: str | None
    error_code: int | None
    provider_event_at: datetime | None
    payload: dict[str, Any]  # what the provider posted, less personal data (JSON)
