"""The ledger rows the intent machine has decided but not yet written, and their sequence numbers.

Rows are buffered and written at checkpoints: with each submit (the submit activity writes them
before it calls the provider), before every wait that may be long, before continue-as-new and at
the close. Each row carries the workflow time of its decision, not of its write, and a
deterministic key (the machine numbers transitions and observations), so a repeated write is the
same rows. Pure: the machine passes the time and the run id.
"""

from __future__ import annotations

from datetime import datetime

from herald.core.intent import Intent
from herald.core.lifecycle import IntentState, ObservationKind, Source
from herald.core.rows import (
    AttemptRow,
    Finding,
    IntentRecorded,
    LedgerBatch,
    ObservationRow,
    ReceiptOutcomeRow,
    RecordIntentInput,
    TransitionRow,
)


class LedgerBuffer:
    def __init__(self, intent: Intent, run_id: str) -> None:
        self._intent = intent
        self._run_id = run_id  # the first run's: the intent row names the run that created it
        self.attempts: list[AttemptRow] = []
        self.transitions: list[TransitionRow] = []
        self.observations: list[ObservationRow] = []
        self.outcomes: list[ReceiptOutcomeRow] = []
        self.next_transition_seq = 1
        self.next_observation_seq = 1
        self.observations_recorded = 0
        # The intent row is written with the first ledger write of the first run (normally the
        # first submit); a run created by continue-as-new inherits it.
        self.intent_recorded = False

    def add_attempt(
        self, number: int, ref: str, prepared_at: datetime, priority: int | None, fairness_weight: float | None
    ) -> None:
        self.attempts.append(
            AttemptRow(
                attempt_ref=ref, workflow_id=self._intent.workflow_id, number=number, prepared_at=prepared_at,
                priority=priority, fairness_weight=fairness_weight,
            )  # fmt: skip
        )

    def add_transition(
        self,
        at: datetime,
        from_state: IntentState,
        to_state: IntentState,
        reason: str,
        source: Source,
        attempt: int | None,
    ) -> None:
        self.transitions.append(
            TransitionRow(
                workflow_id=self._intent.workflow_id,
                seq=self.next_transition_seq,
                at=at,
                from_state=from_state,
                to_state=to_state,
                reason=reason,
                source=source,
                attempt_number=attempt,
            )
        )
        self.next_transition_seq += 1

    def add_observation(
        self,
        attempt_number: int | None,
        source: Source,
        kind: ObservationKind,
        applied: bool,
        reason: str,
        observed_at: datetime,
        *,
        provider_id: str | None = None,
        provider_status: str | None = None,
        error_code: int | None = None,
        inbox_id: int | None = None,
    ) -> None:
        """One observation row, from its parts (``add_finding``)."""
        self.add_finding(
            Finding(
                attempt_number=attempt_number, source=source, kind=kind, provider_id=provider_id,
                provider_status=provider_status, error_code=error_code, applied=applied, reason=reason,
                inbox_id=inbox_id, observed_at=observed_at,
            )  # fmt: skip
        )

    def add_finding(self, finding: Finding) -> None:
        """One observation row as decided (by the record, or a rule: ``herald.core.machine.presumptions``),
        numbered; a stored report's also gets its inbox verdict (applied or ignored)."""
        workflow_id = self._intent.workflow_id
        row = ObservationRow(workflow_id=workflow_id, seq=self.next_observation_seq, **dict(finding))
        self.observations.append(row)
        self.next_observation_seq += 1
        self.observations_recorded += 1
        if finding.inbox_id is not None:
            verdict, reason = "applied" if finding.applied else "ignored", finding.reason
            self.outcomes.append(
                ReceiptOutcomeRow(inbox_id=finding.inbox_id, outcome=verdict, reason=reason, workflow_id=workflow_id)
            )

    def take(self) -> LedgerBatch:
        """Every buffered row (and the intent row, until it is known written), leaving the buffer empty."""
        record = None
        if not self.intent_recorded:
            record = RecordIntentInput(intent=self._intent, run_id=self._run_id)
        batch = LedgerBatch(
            record=record,
            attempts=self.attempts,
            transitions=self.transitions,
            observations=self.observations,
            receipt_outcomes=self.outcomes,
        )
        self.attempts, self.transitions, self.observations, self.outcomes = [], [], [], []
        return batch

    def requeue(self, batch: LedgerBatch) -> None:
        """Put back rows whose write is not known to have committed, ahead of newer ones."""
        self.attempts = [*batch.attempts, *self.attempts]
        self.transitions = [*batch.transitions, *self.transitions]
        self.observations = [*batch.observations, *self.observations]
        self.outcomes = [*batch.receipt_outcomes, *self.outcomes]

    def withdraw(self, batch: LedgerBatch, attempt_ref: str, transition_seq: int) -> None:
        """Put back a batch the send policy held (none of it was written), without the held
        attempt's own row and its "prepared" transition, whose number is given back."""
        self.requeue(
            batch.model_copy(
                update={
                    "attempts": [row for row in batch.attempts if row.attempt_ref != attempt_ref],
                    "transitions": [row for row in batch.transitions if row.seq != transition_seq],
                }
            )
        )
        self.next_transition_seq = transition_seq

    def continue_after(self, recorded: IntentRecorded) -> None:
        """The ledger already holds this key from an earlier run: drop this run's unwritten rows
        (none was written) and number new rows after that run's."""
        self.attempts, self.transitions, self.observations = [], [], []
        self.intent_recorded = True
        self.next_transition_seq = recorded.next_transition_seq
        self.next_observation_seq = recorded.next_observation_seq
