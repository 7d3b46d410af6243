"""One attempt as the intent machine knows it: a mutable working copy, shown as AttemptStatus.

Only the machine (``herald.machine``) changes it. Pure: no clock of its own, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from herald.contracts import AttemptStatus
from herald.lifecycle import AttemptView, Observation, Source, SubmitResult
from herald.outcomes import Found, ProviderStatus
from herald.providers.port import Capabilities

_ENDED_SUBMITS = (
    SubmitResult.RETRYABLE,
    SubmitResult.UNREACHABLE,
    SubmitResult.REJECTED,
    SubmitResult.NOT_ACCEPTED,
    SubmitResult.NO_EVIDENCE,
    SubmitResult.NOT_SENT,
)


class AttemptRecord:
    """What the machine has learned about one attempt so far."""

    def __init__(self, number: int, ref: str, started_at: datetime) -> None:
        self.number = number
        self.ref = ref
        self.started_at = started_at
        self.submit_result: SubmitResult | None = None
        self.provider_id: str | None = None
        self.provider_status: ProviderStatus | None = None
        self.error_code: int | None = None
        self.failure_retryable = False
        self.retry_hint: timedelta | None = None
        self.retry_delay: timedelta | None = None
        self.lookups = 0
        self.seen_after_presumed_absent = False
        # From the submit's answer: the provider that took it and what it can do (None: no answer).
        self.provider: str | None = None
        self.capabilities: Capabilities | None = None
        # E-mail: the attempt whose Message-ID this copy carries (None: its own).
        self.message_id_of: str | None = None
        # Why an unresolved attempt is still waiting (an e-mail whose event stream is not flowing
        # past it), and which silence rule said so: each change of rule is recorded once.
        self.waiting: str | None = None
        self.waiting_rule: str | None = None
        # Why the submit did not end in acceptance (the adapter's reason), for the outage's account.
        self.submit_reason: str | None = None
        # The send policy's give-up on an unreachable provider for this intent's category, counted
        # from the intent's creation (None: the intent's expiry alone bounds an outage).
        self.give_up_after: timedelta | None = None
        # Where its submit stands in the route's queue (DispatchOrder), decided when it was prepared.
        self.priority: int | None = None
        self.fairness_weight: float | None = None
        # How long the provider may hold it in its queue (the ValidityPeriod it was sent with): its
        # proof window is the in-flight bound plus this. None: the delivery policy's.
        self.validity: timedelta | None = None

    @classmethod
    def from_status(cls, status: AttemptStatus) -> AttemptRecord:
        attempt = cls(status.number, status.attempt_ref, status.started_at)
        attempt.submit_result = status.submit_result
        attempt.provider_id = status.provider_id
        attempt.provider_status = status.provider_status
        attempt.error_code = status.error_code
        attempt.failure_retryable = status.failure_retryable
        attempt.lookups = status.lookups
        attempt.seen_after_presumed_absent = status.seen_after_presumed_absent
        attempt.provider = status.provider
        attempt.capabilities = status.capabilities
        attempt.message_id_of = status.message_id_of
        attempt.submit_reason = status.submit_reason
        attempt.waiting, attempt.waiting_rule = status.waiting, status.waiting_rule
        if status.give_up_after_seconds is not None:
            attempt.give_up_after = timedelta(seconds=status.give_up_after_seconds)
        if status.retry_hint_seconds is not None:
            attempt.retry_hint = timedelta(seconds=status.retry_hint_seconds)
        attempt.priority, attempt.fairness_weight = status.priority, status.fairness_weight
        if status.validity_seconds is not None:
            attempt.validity = timedelta(seconds=status.validity_seconds)
        if status.retry_delay_seconds is not None:
            attempt.retry_delay = timedelta(seconds=status.retry_delay_seconds)
        return attempt

    @property
    def resolved(self) -> bool:
        """True once nothing more can be learned about this attempt."""
        if self.provider_status is not None:
            return self.provider_status.is_final
        return self.submit_result in _ENDED_SUBMITS

    @property
    def open(self) -> bool:
        """Handed to the provider and not resolved: it is looked up or polled until it is."""
        return self.submit_result is not None and not self.resolved

    def view(self) -> AttemptView:
        return AttemptView(
            number=self.number,
            provider_id=self.provider_id,
            provider_status=self.provider_status,
            submit_result=self.submit_result,
            failure_retryable=self.failure_retryable,
        )

    def status(self) -> AttemptStatus:
        return AttemptStatus(
            number=self.number,
            attempt_ref=self.ref,
            started_at=self.started_at,
            submit_result=self.submit_result,
            provider_id=self.provider_id,
            provider_status=self.provider_status,
            error_code=self.error_code,
            failure_retryable=self.failure_retryable,
            retry_delay_seconds=self.retry_delay.total_seconds() if self.retry_delay else None,
            retry_hint_seconds=self.retry_hint.total_seconds() if self.retry_hint else None,
            lookups=self.lookups,
            seen_after_presumed_absent=self.seen_after_presumed_absent,
            provider=self.provider,
            capabilities=self.capabilities,
            message_id_of=self.message_id_of,
            submit_reason=self.submit_reason,
            # Only while it waits: evidence of acceptance (a provider id) or a resolution ends the wait.
            waiting=self.waiting if self.open and self.provider_id is None else None,
            waiting_rule=self.waiting_rule,
            give_up_after_seconds=self.give_up_after.total_seconds() if self.give_up_after else None,
            priority=self.priority,
            fairness_weight=self.fairness_weight,
            validity_seconds=int(self.validity.total_seconds()) if self.validity else None,
        )

    def fact(
        self,
        provider_id: str,
        status: ProviderStatus,
        error_code: int | None,
        source: Source,
        observed_at: datetime,
        failure_retryable: bool,
    ) -> Observation:
        """One provider fact about this attempt, whichever path (submit answer, poll, report) brought it."""
        return Observation(
            attempt_number=self.number,
            provider_id=provider_id,
            status=status,
            error_code=error_code,
            source=source,
            observed_at=observed_at,
            failure_retryable=failure_retryable,
        )

    def found(self, found: Found, now: datetime) -> Observation:
        return self.fact(found.provider_id, found.status, found.error_code, Source.POLL, now, found.failure_retryable)
