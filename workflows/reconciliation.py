"""How an open attempt is resolved, chosen by what its provider can do (``Capabilities``).

    provider id known ─┬─ status lookup ........ poll by id on the poll schedule, reports meanwhile
                       └─ none (SMTP) .......... wait for events; nothing to ask until the horizon
    outcome unknown ───┬─ lookup by reference .. look up (the lookup schedule where the provider
                       │   (Twilio, an ESP's     bounds its queue, the poll schedule for an ESP's
                       │   activity feed)        rate-limited feed); "not found" proves absence
                       │                         only past the proof window or the feed's lag
                       └─ none (SMTP) .......... wait for an event carrying our reference; once the
                                                 evidence window has passed, read the ESP's event
                                                 stream from the ledger: its silence counts as
                                                 "not accepted" only while the stream is flowing
                                                 past the attempt (``herald.silence``); otherwise
                                                 look again on the poll schedule, to the horizon

Nothing here resends: a presumption of absence only settles the intent, and the workflow's
dispatch rules decide whether another attempt may go. Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from herald.channels import assumed_capabilities
    from herald.delivery_policy import (
        DeliveryPolicy,
        absence_proven,
        lookup_delay,
        poll_delay,
    )
    from herald.intent import Intent
    from herald.lifecycle import OPEN_STATES, IntentState, ObservationKind, Source, SubmitResult
    from herald.outcomes import Found, NotFound
    from herald.providers.port import Capabilities
    from herald.silence import silence_verdict, stream_query
    from workflows import provider_calls
    from workflows.attempt_record import AttemptRecord
    from workflows.intent_record import IntentRecord


# The last look at the horizon asks a provider that cannot answer again, 2 s and 4 s later: a
# passing outage must not turn into `unknown`, and a lasting one must not hold the verdict forever.
_LAST_LOOK_TRIES = 3
_LAST_LOOK_BACKOFF = timedelta(seconds=2)


class Reconciler:
    def __init__(self, record: IntentRecord, intent: Intent, policy: DeliveryPolicy) -> None:
        self._record = record
        self._intent = intent
        self._policy = policy

    def capabilities(self, attempt: AttemptRecord) -> Capabilities:
        """What the attempt's provider declared; the channel's assumption when its submit never answered."""
        return attempt.capabilities or assumed_capabilities(self._intent.channel)

    def can_poll(self, attempt: AttemptRecord) -> bool:
        return self.capabilities(attempt).status_lookup

    def can_ask(self, attempt: AttemptRecord) -> bool:
        """Whether the provider can be asked about this attempt as it stands (by id, or by reference)."""
        capabilities = self.capabilities(attempt)
        return capabilities.status_lookup if attempt.provider_id is not None else capabilities.lookup_by_reference

    def nothing_more_to_learn(self, attempt: AttemptRecord) -> bool:
        """Accepted by a provider that neither reports nor answers lookups: acceptance is final."""
        capabilities = self.capabilities(attempt)
        return attempt.provider_id is not None and not (capabilities.delivery_reports or capabilities.status_lookup)

    def look_delay(self, attempt: AttemptRecord) -> timedelta:
        """How long until the attempt is next asked about (or its evidence window closes)."""
        capabilities = self.capabilities(attempt)
        if attempt.provider_id is not None:
            if not capabilities.status_lookup:
                # Nothing to ask: reports arrive or the resolution horizon closes the wait.
                return self._policy.resolution_horizon
            return poll_delay(self._policy, attempt.lookups, workflow.random().random())
        if not capabilities.lookup_by_reference:
            if attempt.lookups == 0:
                return max(attempt.started_at + self._policy.event_evidence_window - workflow.now(), timedelta(0))
            # The stream was read and was not flowing past the attempt: read it again, less and less often.
            return poll_delay(self._policy, attempt.lookups, workflow.random().random())
        if not capabilities.bounded_queue:
            # An ESP's activity feed: "not found" proves nothing before its lag has passed, the event
            # stream brings acceptance sooner, and the feed is rate limited: look on the poll schedule.
            return poll_delay(self._policy, attempt.lookups, workflow.random().random())
        if attempt.lookups == 0:
            return self._policy.lookup_first_delay
        return lookup_delay(self._policy, attempt.lookups, workflow.random().random())

    async def look(self, attempt: AttemptRecord) -> str | None:
        """Ask the provider about one open attempt (poll by id, look up by reference), or apply the
        evidence-window rule where there is no one to ask.

        Returns what was found, or None when the provider could not answer (Unavailable).
        """
        capabilities = self.capabilities(attempt)
        if attempt.provider_id is not None:
            if not capabilities.status_lookup:
                return "no lookup possible; waiting for events"
            return await self.poll(attempt)
        if not capabilities.lookup_by_reference:
            return await self._read_silence(attempt)
        result = (await provider_calls.lookup(attempt, self._intent)).result
        if isinstance(result, Found):
            self._record.apply_observation(attempt, attempt.found(result), kind=ObservationKind.FOUND)
        elif isinstance(result, NotFound):
            proven = absence_proven(self._policy, attempt.started_at, result)
            self._record.observe_fact(
                attempt,
                Source.POLL,
                ObservationKind.NOT_FOUND,
                proven,
                "provider has no such message"
                + (" past the proof window: not accepted" if proven else "; within the proof window, looking again"),
            )
            if proven:
                attempt.submit_result = SubmitResult.NOT_ACCEPTED
                reason = f"lookup proved attempt {attempt.number} was not accepted"
                self._record.settle(reason, Source.POLL, attempt=attempt.number)
        else:
            self._record.observe_fact(attempt, Source.POLL, ObservationKind.UNAVAILABLE, False, result.reason)
            return None
        return _answer(result)

    async def last_look(self, reason: str) -> None:
        """The resolution horizon passed: look at every open attempt once more, and close as
        `unknown` only if that last look found nothing conclusive. A worker running late delays
        this verdict; it cannot manufacture it, since the look runs after the horizon."""
        looked_at = workflow.now()
        answers: list[str] = []
        for attempt in self._record.open_attempts():
            answer = None
            # A provider that cannot answer right now is asked again, a bounded number of times.
            for tries in range(_LAST_LOOK_TRIES):
                if not attempt.open:
                    break
                if tries:
                    await workflow.sleep(_LAST_LOOK_BACKOFF * tries)
                answer = await self.look(attempt)
                if answer is not None:
                    break
            answers.append(f"attempt {attempt.number} {answer or 'unavailable'}")
        if self._record.state in OPEN_STATES:
            summary = ", ".join(answers)
            self._record.close(IntentState.UNKNOWN, f"{reason}; last lookup at {looked_at.isoformat()}: {summary}", Source.CLOCK)

    async def poll(self, attempt: AttemptRecord) -> str | None:
        """Poll an attempt by its provider id; what the provider answered, or None if it could not."""
        result = (await provider_calls.lookup(attempt, self._intent)).result
        if isinstance(result, Found):
            self._record.apply_observation(attempt, attempt.found(result), kind=ObservationKind.FOUND)
        elif isinstance(result, NotFound):
            self._record.observe_fact(attempt, Source.POLL, ObservationKind.NOT_FOUND, False, "provider has no such message")
        else:
            self._record.observe_fact(attempt, Source.POLL, ObservationKind.UNAVAILABLE, False, result.reason)
            return None
        return _answer(result)

    async def _read_silence(self, attempt: AttemptRecord) -> str:
        """An unknown submit to a provider without lookups: once the evidence window has passed, read
        the ESP's event stream from the ledger and let ``herald.silence`` judge. Presumed (never
        proven) not accepted only while the stream flows past the attempt, recorded with the rule's
        inputs, so a later event contradicting it is counted as a possible duplicate; otherwise the
        attempt keeps waiting and says why (each change of reason is recorded once)."""
        if workflow.now() < attempt.started_at + self._policy.event_evidence_window:
            return "evidence window still open"
        attempt.lookups += 1
        stream = await provider_calls.read_event_stream(stream_query(self._policy, attempt.ref, attempt.started_at))
        verdict = silence_verdict(self._policy, attempt.started_at, workflow.now(), stream)
        if not verdict.counts:
            if verdict.rule.value != attempt.waiting_rule:
                self._record.observe_fact(attempt, Source.CLOCK, ObservationKind.STREAM_SILENT, False, verdict.reason)
            attempt.waiting, attempt.waiting_rule = verdict.reason, verdict.rule.value
            return verdict.reason
        attempt.waiting, attempt.waiting_rule = None, verdict.rule.value
        self._record.observe_fact(attempt, Source.CLOCK, ObservationKind.NO_EVIDENCE, True, verdict.reason)
        attempt.submit_result = SubmitResult.NO_EVIDENCE
        self._record.settle(verdict.reason, Source.CLOCK, attempt=attempt.number)
        return "no event while the event stream flowed past it: presumed not accepted"


def _answer(result: Found | NotFound) -> str:
    return f"found {result.status.value}" if isinstance(result, Found) else "not found"
