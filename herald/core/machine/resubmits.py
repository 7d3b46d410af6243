"""Resubmits: an attempt whose submit answer was lost, sent again under its own message id while
its provider's dedupe makes the repeat safe (``herald.core.resubmission``), and what each answer proves.

Only an attempt whose provider declares ``resubmit_dedupe_seconds`` is ever resubmitted; for any
other, nothing here issues a command. The same attempt goes to the same provider (the route's pin
already holds an unknown attempt there), never a new attempt, never another provider:

    answer to a resubmission        what it proves                     next
    Accepted ...................... the attempt exists at the provider, once (this call's or the
                                    first's; a repeat is refused there) ......... accepted
    Unknown, Unreachable, did not
    finish, not sent .............. nothing ............................. resubmit again within the
                                                                          grace, else look it up
    Retryable, Rejected, refused
    before any call ............... nothing about the first call ........ look it up

Every resubmission is an observation row written before its call (the claim on the call, so an
execution that finds it committed calls nobody), and its answer another: the ledger shows each call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from herald.core.capabilities import Capabilities
from herald.core.contracts import Called, NotSent, Refused, Resubmission, SubmitStep
from herald.core.lifecycle import IntentState, ObservationKind, Source, SubmitResult
from herald.core.machine.attempt import AttemptRecord
from herald.core.machine.clock import Clock
from herald.core.machine.record import IntentRecord
from herald.core.outcomes import Accepted, SubmitOutcome, Unknown, Unreachable
from herald.core.resubmission import call_by, next_resubmission


class Resubmits:
    def __init__(
        self, record: IntentRecord, clock: Clock, capabilities: Callable[[AttemptRecord], Capabilities]
    ) -> None:
        self._record = record
        self._clock = clock
        self._capabilities = capabilities

    def _grace(self, attempt: AttemptRecord) -> int | None:
        return self._capabilities(attempt).resubmit_dedupe_seconds

    def plan(self, attempt: AttemptRecord) -> None:
        """After a lost answer: when to send the attempt again (None: no dedupe, or too late for it)."""
        grace, now = self._grace(attempt), self._clock.now()
        attempt.next_resubmit_at = next_resubmission(attempt.started_at, grace, attempt.resubmissions, now)

    def waiting(self, attempt: AttemptRecord) -> bool:
        """Whether the attempt's next step is a resubmission: its answer still lost, the intent submitting."""
        return (
            attempt.next_resubmit_at is not None
            and self._record.state is IntentState.SUBMITTING
            and attempt.submit_result is SubmitResult.UNKNOWN
            and attempt.provider_id is None
            and attempt.provider is not None
        )

    def due(self, attempt: AttemptRecord) -> bool:
        due = attempt.next_resubmit_at
        return self.waiting(attempt) and due is not None and self._clock.now() >= due

    def delay(self, attempt: AttemptRecord) -> timedelta:
        assert attempt.next_resubmit_at is not None
        return max(attempt.next_resubmit_at - self._clock.now(), timedelta(0))

    def latest_call(self, attempt: AttemptRecord) -> datetime:
        """The latest moment a call of the attempt can have begun: a message of it was created, if at
        all, within the in-flight bound after (the proof window of its lookups counts from here). A
        resubmission waits in the submit queue no later than its ``call_by``."""
        grace = self._grace(attempt)
        if not attempt.resubmissions:
            return attempt.started_at
        if grace is None:
            return attempt.resubmitted_at or attempt.started_at
        return max(call_by(attempt.started_at, grace), attempt.resubmitted_at or attempt.started_at)

    def begin(self, attempt: AttemptRecord) -> Resubmission:
        """The next resubmission, recorded (its row is the claim on the call) before it is sent."""
        grace, provider = self._grace(attempt), attempt.provider
        assert grace is not None and provider is not None  # only a waiting attempt is resubmitted
        number, by = attempt.resubmissions + 1, call_by(attempt.started_at, grace)
        attempt.resubmissions, attempt.resubmitted_at, attempt.next_resubmit_at = number, self._clock.now(), None
        claim_seq = self._record.ledger.next_observation_seq
        self._record.observe_fact(
            attempt, Source.SUBMIT, ObservationKind.RESUBMITTED, True,
            f"answer lost: resubmission {number} under the same message id to {provider}, which refuses a "
            f"repeated id within {grace} s; called by {by.isoformat()} or not at all",
        )  # fmt: skip
        return Resubmission(number=number, provider=provider, claim_seq=claim_seq, call_by=by)

    def answered(
        self, attempt: AttemptRecord, number: int, step: SubmitStep | None, failure: str
    ) -> SubmitOutcome | None:
        """The resubmission's answer (None: it did not finish, `failure` says why). Returns the
        acceptance to apply to the attempt; anything else is recorded here and changes nothing."""
        again = True
        if isinstance(step, Called) and isinstance(step.outcome.result, Accepted):
            return step.outcome
        if isinstance(step, Called):
            result = step.outcome.result
            kind = ObservationKind(result.kind)
            if isinstance(result, (Unknown, Unreachable)):
                reason = f"resubmission {number}: {result.reason}; the attempt is still unknown"
            else:
                again = False
                reason = f"resubmission {number} refused ({result.reason}): that proves nothing about the first call"
        elif isinstance(step, NotSent):
            kind, reason = ObservationKind.NOT_SENT, f"resubmission {number} not made: {step.reason}"
        elif step is None:
            kind, reason = ObservationKind.UNKNOWN, f"resubmission {number} did not finish ({failure}); still unknown"
        else:
            again = False
            said = step.reason if isinstance(step, Refused) else step.kind
            kind, reason = ObservationKind.REJECTED, f"resubmission {number} refused before any call: {said}"
        if again:
            self.plan(attempt)
        if attempt.next_resubmit_at is None:
            reason += "; looked up from now"
        self._record.observe_fact(attempt, Source.SUBMIT, kind, False, reason)
        return None
