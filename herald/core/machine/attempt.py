"""One attempt as the intent machine knows it: a mutable working copy, shown as AttemptStatus.

Only the machine (``herald.core.machine``) changes it. Pure: no clock of its own, no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from herald.core.capabilities import Capabilities
from herald.core.contracts import AttemptStatus
from herald.core.lifecycle import AttemptView, Observation, Source, SubmitResult
from herald.core.outcomes import Found, ProviderStatus
from herald.core.routes import PastAttempt

_ENDED_SUBMITS = (
    SubmitResult.RETRYABLE,
    SubmitResult.UNREACHABLE,
    SubmitResult.REJECTED,
    SubmitResult.NOT_ACCEPTED,
    SubmitResult.NO_EVIDENCE,
    SubmitResult.NOT_SENT,
)

# What AttemptStatus carries of a record as it is, and the durations it carries in seconds
# (``retry_delay`` as ``retry_delay_seconds``); the queue validity goes in whole seconds, and
# ``waiting`` is shown only while the attempt waits.
_AS_IS = (
    "submit_result", "provider_id", "provider_status", "error_code", "failure_retryable", "lookups",
    "seen_after_presumed_absent", "provider", "capabilities", "message_id_of", "submit_reason", "waiting",
    "waiting_rule", "priority", "fairness_weight", "next_provider", "resubmissions", "resubmitted_at",
    "next_resubmit_at",
)  # fmt: skip
_DURATIONS = ("retry_delay", "retry_hint", "give_up_after")


def _seconds(duration: timedelta | None) -> float | None:
    return duration.total_seconds() if duration else None


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
        # After an Unreachable: the other provider the route offered the next attempt (no backoff then).
        self.next_provider: str | None = None
        # Its answer lost at a provider that refuses a repeated id within a grace: how often it was
        # sent again under its own id, when last, and when next (None: no more, it is looked up).
        self.resubmissions = 0
        self.resubmitted_at: datetime | None = None
        self.next_resubmit_at: datetime | None = None

    @classmethod
    def from_status(cls, status: AttemptStatus) -> AttemptRecord:
        """The record a run continued as new resumes from (``status`` carried it over)."""
        attempt = cls(status.number, status.attempt_ref, status.started_at)
        for name in _AS_IS:
            setattr(attempt, name, getattr(status, name))
        for name in _DURATIONS:
            seconds = getattr(status, f"{name}_seconds")
            setattr(attempt, name, None if seconds is None else timedelta(seconds=seconds))
        if status.validity_seconds is not None:
            attempt.validity = timedelta(seconds=status.validity_seconds)
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

    def past(self) -> PastAttempt:
        """The attempt as the route rule weighs it (herald.core.routes): where it went, what it proved."""
        taken = self.provider_id is not None or self.provider_status is not None or self.seen_after_presumed_absent
        return PastAttempt(ref=self.ref, provider=self.provider, submit_result=self.submit_result, taken=taken)

    def view(self) -> AttemptView:
        return AttemptView(
            number=self.number,
            provider_id=self.provider_id,
            provider_status=self.provider_status,
            submit_result=self.submit_result,
            failure_retryable=self.failure_retryable,
        )

    def status(self) -> AttemptStatus:
        carried: dict[str, Any] = {name: getattr(self, name) for name in _AS_IS}
        # Only while it waits: evidence of acceptance (a provider id) or a resolution ends the wait.
        carried["waiting"] = self.waiting if self.open and self.provider_id is None else None
        return AttemptStatus(
            number=self.number,
            attempt_ref=self.ref,
            started_at=self.started_at,
            **carried,
            **{f"{name}_seconds": _seconds(getattr(self, name)) for name in _DURATIONS},
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
