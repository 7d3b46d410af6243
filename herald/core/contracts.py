"""Typed inputs and outputs of the workflow, its signal, query and update, and its activities.

One model per message, so a field added to one can never silently change another.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from herald.core.capabilities import Capabilities
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import Intent
from herald.core.lifecycle import IntentState, Source, SubmitResult
from herald.core.message import Channel, Message, MessageReference
from herald.core.outcomes import Frozen, ProviderStatus, SubmitOutcome
from herald.core.routes import IntentRoute
from herald.core.rows import IntentRecorded, LedgerBatch
from herald.core.send_policy import SHARED_TENANT, Category, DispatchOrder, PolicyDecision


def attempt_ref(workflow_id: str, number: int) -> str:
    """Our reference for one attempt, carried in the status callback URL.

    Opaque on purpose: the provider sees it, so it carries neither the business key nor
    anything personal; the ledger's attempts table maps it back.
    """
    return f"att_{hashlib.sha256(workflow_id.encode()).hexdigest()[:24]}_{number}"


def attempt_number_of(ref: str) -> int | None:
    head, _, tail = ref.rpartition("_")
    # isdigit() alone accepts "²", which int() refuses: only ASCII digits name an attempt.
    return int(tail) if head.startswith("att_") and tail.isascii() and tail.isdigit() else None


class DispatchQuery(Frozen):
    """Where an attempt prepared at `at` stands in its route's queue: asked of the send policy."""

    category: Category
    tenant: str
    requested: int | None = None
    at: datetime


class DeliveryReport(Frozen):
    """A stored provider report, sent to the workflow after its inbox row committed."""

    inbox_id: int
    attempt_ref: str
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    provider_event_at: datetime | None = None
    received_at: datetime
    # Classified by the receipt edge from the provider's vocabulary: whether a failure may be retried.
    failure_retryable: bool = False


class ReportBatch(Frozen):
    """Stored reports for one attempt, signalled together: a non-final report held briefly by the
    receipt server travels with the final one that follows it, one signal instead of two."""

    reports: list[DeliveryReport] = Field(min_length=1)


class KeyConflict(Frozen):
    """A client was refused: it reused this intent's key with another payload (only hashes travel)."""

    intent_fingerprint: str
    observed_at: datetime


class CancelRequest(Frozen):
    reason: str = Field(min_length=1, max_length=500)
    operator: str = Field(min_length=1, max_length=100)


class CancelAnswer(Frozen):
    cancelled: bool
    state: IntentState
    message: str


class AttemptStatus(Frozen):
    number: int
    attempt_ref: str
    started_at: datetime
    submit_result: SubmitResult | None = None
    provider_id: str | None = None
    provider_status: ProviderStatus | None = None
    error_code: int | None = None
    # For a final failure: whether its error code is classified retryable.
    failure_retryable: bool = False
    retry_delay_seconds: float | None = None
    retry_hint_seconds: float | None = None
    lookups: int = 0
    # Evidence arrived that the provider had it although Herald had concluded it never did.
    seen_after_presumed_absent: bool = False
    # Which provider took the attempt and what it can do (None: its submit never answered, or
    # the attempt was made before providers declared themselves; then the channel's default).
    provider: str | None = None
    capabilities: Capabilities | None = None
    # E-mail: the attempt whose Message-ID this copy carried (None: its own).
    message_id_of: str | None = None
    # Why the submit did not end in acceptance (the adapter's reason: codes and classes, no PII).
    submit_reason: str | None = None
    # Why an unresolved attempt is still waiting ("waiting: event stream silent since ..."), and
    # the rule that said so (herald.core.silence.SilenceRule).
    waiting: str | None = None
    waiting_rule: str | None = None
    # The send policy's give-up on an unreachable provider for this category, from the intent's creation.
    give_up_after_seconds: float | None = None
    # Where its submit stood in the route's queue: the priority key, the tenant's fairness weight.
    priority: int | None = None
    fairness_weight: float | None = None
    # The provider queue validity it was sent with (seconds): its proof window is built on it.
    validity_seconds: int | None = None
    # After an Unreachable: the other provider the route offered the next attempt, which then
    # goes at once (None: the same provider again, after the backoff).
    next_provider: str | None = None
    # Its submit's answer lost, at a provider that refuses a repeated id within a grace: how often it
    # was sent again under its own id, when last, and when next (None: no more; it is looked up).
    resubmissions: int = 0
    resubmitted_at: datetime | None = None
    next_resubmit_at: datetime | None = None


class TransitionStatus(Frozen):
    at: datetime
    from_state: IntentState
    to_state: IntentState
    reason: str
    source: Source


class IntentHeader(Frozen):
    """Which intent, and which content, wherever one is read back: its live status, the ledger's history."""

    workflow_id: str
    business_key: str
    channel: str
    template_id: str
    template_version: int
    content_sha256: str


class IntentStatus(IntentHeader):
    """What an operator sees: no recipient, only what explains the outcome."""

    state: IntentState
    closed_by: str | None = None
    # Who the notice is for: its fairness key on a backlogged route.
    tenant: str = SHARED_TENANT
    attempts: list[AttemptStatus] = []
    transitions: list[TransitionStatus] = []
    observations_recorded: int = 0
    # The keyed recipient fingerprint's first 16 hex: which destination, without naming it (None
    # for intents recorded before keyed fingerprints).
    destination_fingerprint: str | None = None


class Resubmission(Frozen):
    """An attempt whose submit answer was lost, sent again under its own message id to the provider
    its first call went to, which refuses a repeated id within its grace (``herald.core.resubmission``)."""

    number: int  # 1 for the first resubmission of the attempt
    provider: str  # the provider the attempt was handed to: never another
    # The observation row that records this resubmission: committed before the call, it is the
    # execution's claim on it (an execution that finds it committed calls nobody).
    claim_seq: int
    # Past this instant (the worker's clock) the call is not made: the provider's grace may be over.
    call_by: datetime


class SubmitInput(Frozen):
    attempt_ref: str
    # As the intent holds it: its personal fields sealed, opened by the activity just before use.
    message: Message
    # E-mail: the attempt whose Message-ID this copy carries (the evidence-window rule's resend).
    message_id_of: str | None = None
    # The send policy's inputs besides the message's channel and category.
    workflow_id: str
    time_zone: str | None = None
    # The workflow's clock when it prepared the attempt: the instant the policy is evaluated at.
    policy_at: datetime
    # The longest the provider may hold the message in its queue (Twilio: ValidityPeriod), in
    # whole seconds.
    validity_seconds: int
    # Written in one transaction before the provider hears of the attempt: the attempt row, the
    # transition into submitting, whatever else the workflow had not yet recorded, and (for the
    # first attempt of a key) the intent row itself.
    ledger: LedgerBatch
    # What the route rule needs to know about this intent, from its machine's own attempt records:
    # the attempt it is pinned to (failover only on proof), the providers moved last. The default,
    # for a history recorded before routes: nothing pinned, nothing moved.
    route: IntentRoute = IntentRoute()
    # Set when this submit sends again an attempt whose answer was lost (None: the attempt's first call).
    resubmission: Resubmission | None = None


class Called(Frozen):
    """The attempt's rows are committed and its provider was called once: ``outcome`` is what came
    of the call (``Unknown`` when the answer was lost, ``Unreachable`` when none could be asked)."""

    kind: Literal["called"] = "called"
    outcome: SubmitOutcome
    # The provider that was called, and what it declares it can do.
    provider: str
    capabilities: Capabilities
    # The admitting policy's give-up on an unreachable provider for the category.
    give_up_after_seconds: int | None = None
    # After an Unreachable: the other provider the route would give the next attempt now (None:
    # the same one, or no other): the machine then retries at once instead of backing off.
    next_provider: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _recorded_as_sent(cls, data: Any) -> Any:
        """A step recorded before calls and refusals had names of their own says "sent" for both
        (the committed histories under tests/replay/histories): one that names its provider was a call."""
        if isinstance(data, dict) and data.get("kind") == "sent" and data.get("provider") is not None:
            return {**data, "kind": "called"}
        return data


class Refused(Frozen):
    """The attempt's rows are committed and it was refused before any provider was called: the
    recipient erased, no provider for the channel on this worker, an attachment that is not what
    was stored. ``reason`` names the rule; the attempt can never be sent."""

    kind: Literal["refused"] = "refused"
    reason: str
    # The provider the attempt's row names (handed to it before an attachment was found wrong);
    # None when it went to none.
    provider: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _recorded_as_sent(cls, data: Any) -> Any:
        """A refusal recorded as "sent" (see ``Called``): a Rejected outcome, no provider named."""
        if isinstance(data, dict) and data.get("kind") == "sent" and data.get("provider") is None:
            return {"kind": "refused", "reason": data["outcome"]["result"]["reason"]}
        return data


class NotSent(Frozen):
    """The provider was not called (the ledger could not be written, or the submit was held past its
    budget before the call): the same attempt may be prepared again, since nothing can have reached
    the provider (an attempt whose row was written is then found handed, and looked up)."""

    kind: Literal["not_sent"] = "not_sent"
    reason: str


class Held(Frozen):
    """The send policy deferred or suppressed the attempt: nothing was written or sent."""

    kind: Literal["held"] = "held"
    decision: PolicyDecision


class AlreadyRecorded(Frozen):
    """The ledger already holds this key from an earlier workflow run (Temporal's retention forgot
    it): nothing was written or sent."""

    kind: Literal["already_recorded"] = "already_recorded"
    recorded: IntentRecorded


# What one run of the submit activity did: exactly one of these, told apart by ``kind``. No
# discriminator annotation: Temporal reads an activity's result type without Annotated metadata, so
# this is how the workflow decodes it anyway (each model's own ``kind`` and validators decide).
SubmitStep = Called | Refused | NotSent | Held | AlreadyRecorded


class LookupInput(Frozen):
    channel: Channel
    provider_id: str | None
    # For a search without the provider's id, and to claim what it finds: the recipient sealed, as
    # the intent holds it.
    reference: MessageReference
    # The attempt's own provider (the name its submit answered with). None: the machine never heard
    # (its submit did not finish, or a history before routes): the attempt's ledger row says, and a
    # row that names none went to the channel's default.
    provider: str | None = None


class ProviderCancelInput(Frozen):
    channel: Channel
    provider_id: str
    # The attempt's own provider; None (a history before routes): the channel's default.
    provider: str | None = None


class ProviderCancelResult(Frozen):
    canceled: bool
    reason: str


class CarriedState(Frozen):
    """What a workflow hands to its next run when it continues as new (long polls keep history small)."""

    state: IntentState
    closed_by: str | None
    attempts: list[AttemptStatus]
    seen_inbox_ids: list[int]
    cancel: CancelRequest | None
    transitions: list[TransitionStatus]
    next_transition_seq: int
    next_observation_seq: int
    observations_recorded: int
    # False only when a run continued as new before its first ledger write (the intent row).
    intent_recorded: bool = True


class NotificationInput(Frozen):
    intent: Intent
    policy: DeliveryPolicy = DeliveryPolicy()
    # Set only by continue-as-new; a fresh intent starts without it.
    carried: CarriedState | None = None
    # The send policy's order for the first attempt, read by a client that has the ledger as it
    # started the intent, and when: it spares the workflow its own read (a billed local activity)
    # while fresh. None: the workflow asks the policy itself.
    first_order: DispatchOrder | None = None
    first_order_at: datetime | None = None
