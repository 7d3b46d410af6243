"""Provider activities: submit, look up and cancel one attempt through the adapter.

No retry loops here: the adapter reports what it saw as a typed outcome and the
workflow owns every retry decision. The submit activity is scheduled with one
attempt only, because resubmitting after a lost answer is the duplicate send.
"""

from __future__ import annotations

from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from temporalio import activity

from herald.contracts import (
    LookupInput,
    ProviderCancelInput,
    ProviderCancelResult,
    SubmitInput,
    SubmitStep,
)
from herald.fault_points import FaultPoint, FaultPoints
from herald.ledger import store
from herald.outcomes import Accepted, LookupOutcome
from herald.providers.twilio import TwilioAdapter


class ProviderActivities:
    def __init__(
        self,
        adapter: TwilioAdapter,
        receipt_public_url: str,
        ledger: AsyncConnectionPool,
        faults: FaultPoints | None = None,
    ) -> None:
        self._adapter = adapter
        self._receipt_public_url = receipt_public_url.rstrip("/")
        self._ledger = ledger
        self._faults = faults or FaultPoints()

    def status_callback_url(self, attempt_ref: str) -> str:
        """The exact URL the provider calls (and signs) for this attempt's reports."""
        return f"{self._receipt_public_url}/twilio/status?attempt={attempt_ref}"

    @activity.defn(name="submit_attempt")
    async def submit(self, input: SubmitInput) -> SubmitStep:
        """Commit the attempt row, then send the attempt once.

        The ledger write and the send share one activity so that the happy path costs one
        Temporal action, yet the attempt row is still committed before the provider hears of
        it. Timeouts after sending come back as Unknown, never raised.
        """
        # A quarter of the activity's budget for the ledger: with the database away the answer
        # must be "not sent" (retried by the workflow), not a timeout (an unknown outcome).
        budget = activity.info().start_to_close_timeout
        # The attempt row says which provider it was handed to, committed before that provider is called.
        rows = input.ledger.handed_to(input.attempt_ref, self._adapter.name)
        try:
            recorded = await store.write_batch(self._ledger, rows, timeout=budget.total_seconds() / 4 if budget else None)
        except (DatabaseError, PoolTimeout, OSError) as error:
            return SubmitStep(not_sent=f"ledger unavailable before the provider call ({type(error).__name__})")
        record = input.ledger.record
        if recorded is not None and record is not None and recorded.first_run_id != record.run_id:
            return SubmitStep(recorded=recorded)
        self._faults.hit(FaultPoint.BEFORE_PROVIDER_CALL)
        outcome = await self._adapter.submit(
            to=input.to,
            body=input.body,
            status_callback=self.status_callback_url(input.attempt_ref),
            validity_seconds=input.validity_seconds,
        )
        if isinstance(outcome.result, Accepted):
            self._faults.hit(FaultPoint.AFTER_PROVIDER_ACCEPTED)
        return SubmitStep(recorded=recorded, outcome=outcome)

    @activity.defn(name="lookup_attempt")
    async def lookup(self, input: LookupInput) -> LookupOutcome:
        """Find the same attempt at the provider: by its id when we have one, else by our reference."""
        if input.provider_id is not None:
            return await self._adapter.fetch(input.provider_id)
        return await self._adapter.find_by_reference(
            to=input.to, content_sha256=input.content_sha256, since=input.since
        )

    @activity.defn(name="cancel_attempt")
    async def cancel(self, input: ProviderCancelInput) -> ProviderCancelResult:
        """Ask the provider to drop an attempt it has not sent; refusals are answers, not errors."""
        outcome = await self._adapter.cancel(input.provider_id)
        return ProviderCancelResult(canceled=outcome.canceled, reason=outcome.reason)
