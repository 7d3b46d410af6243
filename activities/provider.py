"""Provider activities: submit one attempt to the provider its route chooses; look it up and cancel it there.

No retry loops here: the adapter reports what it saw as a typed outcome and the workflow owns
every retry decision. The submit activity is scheduled with one attempt only, because
resubmitting after a lost answer is the duplicate send. The activities speak only to the
provider port (``herald.providers.port``): which adapters a worker has, by name and channel, is
decided once, in the composition root (``worker.py``); which one an attempt goes to, by the send
policy's route in the submit's transaction (``activities.route_gate``), and every later call about
the attempt goes to the provider its row names. The one deliberate second call: a resubmission
(``SubmitInput.resubmission``) of an attempt whose answer was lost, to the same provider under the
same id, which that provider's dedupe refuses to send twice; its own ledger row is its claim.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from temporalio import activity

from activities.policy_gate import PolicyGate
from activities.route_gate import RouteGate
from herald.core.artifacts import ArtifactMismatch, verify
from herald.core.contracts import (
    AlreadyRecorded,
    Called,
    Held,
    LookupInput,
    NotSent,
    ProviderCancelInput,
    ProviderCancelResult,
    Refused,
    Resubmission,
    SubmitInput,
    SubmitStep,
)
from herald.core.message import Channel
from herald.core.outcomes import Candidates, LookupOutcome, SubmitOutcome, Unavailable, Unknown
from herald.core.routes import Mark
from herald.ledger import claims, provider_marks, store
from herald.ledger.artifacts import ArtifactStore
from herald.metrics.instruments import ProviderCall, record_queue_age
from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import KeyUnavailable
from herald.privacy.recipient_vault import UNOPENABLE, Opening, RecipientVault
from herald.providers.pacing import Pacer
from herald.providers.port import Attachment, OutboundMessage, Provider
from herald.providers.registry import Providers
from herald.temporal.route_backlog import SERVER_DEFAULT_PRIORITY

# The submit's answers that came from the provider (accepted, "not now", a refusal): their time
# since the attempt was prepared is the route's queue age. Unknown and unreachable have none.
_PROVIDER_ANSWERS = frozenset({"accepted", "retryable", "rejected"})


def _priority_key() -> int:
    """The priority key this activity was dispatched with (the server's default when it had none)."""
    priority = activity.info().priority
    return (priority.priority_key if priority else None) or SERVER_DEFAULT_PRIORITY


# The share of the submit's budget by which the pacer must hand it its slot, however many more
# urgent submits came meanwhile; the rest is the provider call's.
_PACED_BY = 0.75


async def _paced(pacer: Pacer, window: tuple[float, float] | None) -> bool:
    """Wait for the pacer's slot in the order the server released this submit by: its priority key,
    then its tenant's fairness, as Temporal delivered them with the task (the workflow sets all three).
    `window` is the activity's start and budget (monotonic seconds): the slot comes by three
    quarters of the budget. False when it came after the whole budget all the same (a starved
    worker): the workflow has given up on this execution, and nothing may be sent now (a call
    that late could reach the provider after the not-found proof counted it absent)."""
    priority = activity.info().priority
    started, budget = window if window is not None else (0.0, math.inf)
    await pacer.wait(
        priority=_priority_key(),
        tenant=(priority.fairness_key if priority else None) or "",
        weight=(priority.fairness_weight if priority else None) or 1.0,
        leave_by=started + _PACED_BY * budget if window is not None else None,
    )
    return time.monotonic() < started + budget


class ProviderActivities:
    def __init__(
        self,
        providers: Providers | Mapping[Channel, Provider],
        receipt_public_url: str,
        ledger: AsyncConnectionPool,
        artifacts: ArtifactStore | None = None,
        pacer: Pacer | None = None,
        *,
        vault: RecipientVault,
        keyring: Keyring,
    ) -> None:
        # By name, and which names serve which channel (a one-per-channel mapping: its only provider each).
        self._providers = providers if isinstance(providers, Providers) else Providers.one_per_channel(providers)
        # Opens the sealed recipient, body and subject (herald/privacy/recipient_vault.py) just before use.
        self._vault = vault
        # Names the recipient as the policy gate and a lookup's claims know them.
        self._keyring = keyring
        self._pacer = pacer
        self._receipt_public_url = receipt_public_url.rstrip("/")
        self._ledger = ledger
        self._artifacts = artifacts

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
        started = time.monotonic()
        window = (started, budget.total_seconds()) if budget else None
        ledger_seconds = budget.total_seconds() / 4 if budget else None
        # The recipient's key row is read here, at every submit: a key erased (or replaced, the
        # person erased and back) since any cache is known before anything is opened or sent.
        opening = self._vault.opening(timeout=ledger_seconds)
        refused: Exception | None = None
        try:
            try:
                input = await self._opened(input, opening)
            except UNOPENABLE as error:
                # Erased while the intent ran (or unreadable for good): nothing can be sent; the rows
                # are written, the attempt refused naming the rule.
                refused, input = error, input.model_copy(update={"ledger": await opening.open_batch(input.ledger)})
        except KeyUnavailable as error:
            return NotSent(reason=str(error))  # a KEK missing on this worker: configuration, retried
        except (DatabaseError, PoolTimeout, OSError) as error:
            return NotSent(reason=f"ledger unavailable before the provider call ({type(error).__name__})")
        channel = input.message.channel
        if input.resubmission is not None:
            return await self._resubmit(input, input.resubmission, refused, ledger_seconds, window)
        gate = _gate(input, self._keyring)
        # Admitted, the route chooses the provider in the same transaction and the attempt row says
        # which provider and route it was handed to, and why, committed before the call.
        route = RouteGate(gate, input, self._providers)
        try:
            recorded = await store.write_batch(self._ledger, input.ledger, timeout=ledger_seconds,
                                               admit=(input.attempt_ref, route))  # fmt: skip
        except store.NotAdmitted as held:
            return Held(decision=held.decision)
        except store.AlreadyHanded as handed:
            return Refused(reason=str(refused)) if refused is not None else self._handed_earlier(channel, handed)
        except (DatabaseError, PoolTimeout, OSError) as error:
            return NotSent(reason=f"ledger unavailable before the provider call ({type(error).__name__})")
        record = input.ledger.record
        if recorded is not None and record is not None and recorded.first_run_id != record.run_id:
            return AlreadyRecorded(recorded=recorded)
        provider = route.provider
        if refused is not None:
            return Refused(reason=str(refused))
        if provider is None:
            # A deployment without this channel configured: a definite refusal; nothing was sent.
            return Refused(reason=f"channel {channel.value}: no provider is configured on this worker")
        try:
            attachments = await self._attachments(input)
        except ArtifactMismatch as error:
            # Never other bytes: the attempt ends refused, naming the rule, and nothing is sent.
            return Refused(reason=str(error), provider=provider.name)
        outcome = await self._send(provider, input, attachments, window=window)
        if outcome is None:
            # The row says handed: a try of the same attempt again finds it so and looks it up.
            return NotSent(reason="held past the submit's budget before the provider call: nothing sent")
        if outcome.result.kind in _PROVIDER_ANSWERS:
            waited = datetime.now(UTC) - input.policy_at
            record_queue_age(activity.metric_meter(), waited, _priority_key(), provider.name)
        # Within what is left of the budget: the answer must reach the workflow, stamp or not.
        left = budget.total_seconds() - (time.monotonic() - started) if budget else None
        seconds = None if left is None or ledger_seconds is None else max(0.0, min(ledger_seconds, left / 2))
        if gate.claimed_cooldown:
            await gate.provider_answered(self._ledger, within=seconds)
        mark = route.mark_for(outcome.result.kind)
        if mark is not None:
            # The outage rule's evidence (herald.core.routes), across intents.
            await provider_marks.mark(self._ledger, provider.name, mark, input.attempt_ref, within=seconds)
        admitted = gate.admitted
        give_up_after = admitted.give_up_after_seconds if admitted is not None else None
        next_provider = route.next_provider() if outcome.result.kind == "unreachable" else None
        return Called(outcome=outcome, provider=provider.name, capabilities=provider.capabilities,
                      give_up_after_seconds=give_up_after, next_provider=next_provider)  # fmt: skip

    async def _send(
        self, provider: Provider, input: SubmitInput, attachments: list[Attachment], call_by: datetime | None = None,
        *, window: tuple[float, float] | None = None,
    ) -> SubmitOutcome | None:  # fmt: skip
        """One call of the provider's submit; None, without calling, once `call_by` has passed or
        the pacer held it past the activity's budget (`window`: its start and budget)."""
        if self._pacer is not None and not await _paced(self._pacer, window):
            # The pacer smooths the burst the server's queue limit lets out after a quiet spell,
            # the most urgent first (herald.providers.pacing).
            return None
        if call_by is not None and datetime.now(UTC) > call_by:
            return None
        with ProviderCall(activity.metric_meter(), provider.name, "submit") as call:
            outcome = await provider.submit(
                OutboundMessage(
                    message=input.message,
                    attempt_ref=input.attempt_ref,
                    attachments=attachments,
                    message_id_of=input.message_id_of,
                    receipts_url=self._receipt_public_url,
                    validity_seconds=input.validity_seconds,
                )
            )
            call.outcome = outcome.result.kind
        return outcome

    async def _resubmit(
        self, input: SubmitInput, resubmission: Resubmission, refused: Exception | None, ledger_seconds: float | None,
        window: tuple[float, float] | None = None,
    ) -> SubmitStep:  # fmt: skip
        """Send an attempt whose answer was lost again, under its own id, to the provider its row
        names, which refuses a repeated id within its grace. No route is asked again, nor the policy's
        windows and cooldown: it is the same attempt, already admitted and handed. Only the recipient's
        suppression is read again (a repeat the provider does not recognise is a new message). Its
        observation row, committed first, is this execution's claim on the call; past its call-by time
        nothing is sent. An Unreachable answer is marked for the outage rule, as any submit's."""
        channel, number = input.message.channel, resubmission.number
        provider = self._providers.for_attempt(channel, resubmission.provider)
        if provider is None:
            return NotSent(reason=f"provider {resubmission.provider!r} is not configured on this worker")
        if provider.capabilities.resubmit_dedupe_seconds is None:
            # This worker's settings declare no dedupe (turned off since): a repeat could be a second message.
            return Refused(reason=f"{provider.name} declares no dedupe of a repeated id here", provider=provider.name)
        claim = (input.attempt_ref, resubmission.claim_seq)
        try:
            await store.write_batch(self._ledger, input.ledger, timeout=ledger_seconds, claim=claim)
        except store.AlreadyHanded:
            lost = Unknown(reason=f"resubmission {number} already made by an earlier execution")
            step = SubmitOutcome(result=lost)
            return Called(outcome=step, provider=provider.name, capabilities=provider.capabilities)
        except (DatabaseError, PoolTimeout, OSError) as error:
            return NotSent(reason=f"ledger unavailable before the provider call ({type(error).__name__})")
        if refused is not None:
            return Refused(reason=str(refused), provider=provider.name)
        try:
            suppressed = await _gate(input, self._keyring).suppressed_now(self._ledger, timeout=ledger_seconds)
        except (DatabaseError, PoolTimeout, OSError, TimeoutError) as error:
            return NotSent(reason=f"ledger unavailable before the provider call ({type(error).__name__})")
        if suppressed is not None:
            # Opted out (or bounced) since the attempt was admitted: not sent again; it is looked up.
            return Refused(
                reason=f"not sent again: the recipient is suppressed since: {suppressed}", provider=provider.name
            )
        try:
            attachments = await self._attachments(input)
        except ArtifactMismatch as error:
            return Refused(reason=str(error), provider=provider.name)
        outcome = await self._send(provider, input, attachments, resubmission.call_by, window=window)
        if outcome is None:
            return NotSent(reason=f"past its call-by time {resubmission.call_by.isoformat()}: the grace may be over")
        if outcome.result.kind == "unreachable":
            # The outage rule's evidence like any submit's (herald.core.routes): no answer from the provider.
            await provider_marks.mark(
                self._ledger, provider.name, Mark.UNREACHABLE, input.attempt_ref, within=ledger_seconds
            )
        return Called(outcome=outcome, provider=provider.name, capabilities=provider.capabilities)

    def _handed_earlier(self, channel: Channel, handed: store.AlreadyHanded) -> SubmitStep:
        """Another execution committed this attempt's row, and may have called its provider: never a
        second call (to that provider or, by today's route, to another). What came of it is unknown
        here, and is found out as for any lost answer: looked up at the provider the row names."""
        provider = self._providers.for_attempt(channel, handed.provider)
        if provider is None:
            # Not on this worker: it cannot look the attempt up either; the same attempt is offered
            # again (nothing is written or sent here), for a worker that has its provider.
            return NotSent(reason=f"{handed}; provider {handed.provider!r} is not configured on this worker")
        return Called(outcome=SubmitOutcome(result=Unknown(reason=str(handed))), provider=provider.name,
                      capabilities=provider.capabilities)  # fmt: skip

    @staticmethod
    async def _opened(input: SubmitInput, opening: Opening) -> SubmitInput:
        """The input with its sealed fields opened (plaintext ones as they are)."""
        message, ledger = await opening.open_message(input.message), await opening.open_batch(input.ledger)
        return input.model_copy(update={"message": message, "ledger": ledger})

    async def _attachments(self, input: SubmitInput) -> list[Attachment]:
        """Load the named artifact and check it is byte for byte what the intent names."""
        ref = input.message.attachment
        if ref is None:
            return []
        if self._artifacts is None:
            raise ArtifactMismatch("no artifact store is configured on this worker")
        content = verify(await self._artifacts.load(ref.sha256), ref)
        return [Attachment(filename=ref.filename, media_type=ref.media_type, content=content)]

    @activity.defn(name="lookup_attempt")
    async def lookup(self, input: LookupInput) -> LookupOutcome:
        """Find the same attempt at the provider: by its id when we have one, else by our reference.

        A search by recipient and content may find messages that fit this attempt and another's
        alike: which one, if any, it may claim is decided and claimed in the ledger
        (``herald.ledger.claims``), never by the fit alone."""
        try:
            name = input.provider or await store.attempt_provider(self._ledger, input.reference.attempt_ref)
        except (DatabaseError, PoolTimeout, OSError) as error:
            return LookupOutcome(
                result=Unavailable(reason=f"the attempt's provider could not be read ({type(error).__name__})")
            )
        provider = self._providers.for_attempt(input.channel, name)
        if provider is None:
            where = f"provider {name}" if name else f"channel {input.channel.value}: no provider"
            return LookupOutcome(result=Unavailable(reason=f"{where} not configured on this worker"))
        if input.provider_id is not None:
            # Timed apart: fetching one message by id and searching by our reference cost differently.
            with ProviderCall(activity.metric_meter(), provider.name, "fetch") as call:
                outcome = await provider.fetch(input.provider_id)
                call.outcome = outcome.result.kind
            return outcome
        try:
            to = await self._vault.open(input.reference.recipient, "recipient")
        except (*UNOPENABLE, KeyUnavailable) as unopened:
            return LookupOutcome(result=Unavailable(reason=str(unopened)))
        reference = input.reference.model_copy(update={"recipient": to})
        with ProviderCall(activity.metric_meter(), provider.name, "find_by_reference") as call:
            search = (await provider.find_by_reference(reference)).result
            call.outcome = search.kind
        if not isinstance(search, Candidates):
            return LookupOutcome(result=search)
        try:
            decision = await claims.settle_search(
                self._ledger,
                attempt_ref=reference.attempt_ref,
                recipient_fingerprints=self._keyring.recipient_candidates(to),
                search=search,
                in_flight_bound=reference.created_by - reference.since,
            )
        except (DatabaseError, PoolTimeout, OSError) as error:
            reason = (
                f"{len(search.messages)} message(s) fit; the ledger could not settle whose ({type(error).__name__})"
            )
            return LookupOutcome(result=Unavailable(reason=reason))
        return LookupOutcome(result=decision.result)

    @activity.defn(name="cancel_attempt")
    async def cancel(self, input: ProviderCancelInput) -> ProviderCancelResult:
        """Ask the provider to drop an attempt it has not sent; refusals are answers, not errors."""
        provider = self._providers.for_attempt(input.channel, input.provider)
        if provider is None:
            where = f"provider {input.provider}" if input.provider else f"channel {input.channel.value}: no provider"
            return ProviderCancelResult(canceled=False, reason=f"{where} not configured on this worker")
        with ProviderCall(activity.metric_meter(), provider.name, "cancel") as call:
            outcome = await provider.cancel(input.provider_id)
            call.outcome = "canceled" if outcome.canceled else "refused"
        return ProviderCancelResult(canceled=outcome.canceled, reason=outcome.reason)


def _gate(input: SubmitInput, keyring: Keyring) -> PolicyGate:
    """The send-policy gate for this attempt."""
    gate = PolicyGate(
        keyring=keyring,
        channel=input.message.channel.value,
        recipient=input.message.recipient,
        category=input.message.category,
        time_zone=input.time_zone,
        workflow_id=input.workflow_id,
        at=input.policy_at,
    )
    return gate
