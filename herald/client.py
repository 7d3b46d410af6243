"""The typed client API a service imports to create intents and read their status.

    runtime = ProcessRuntime(settings)      # herald.runtime: what a process opens from its settings
    herald = HeraldClient(await runtime.temporal(), settings.temporal.task_queue, keyring=runtime.keyring())
    receipt = await herald.send({"business_key": "order_receipt:pay_157", ...})

``send`` validates and renders before anything starts: a bad request raises
``InvalidIntent`` (field and rule, never the value) and no workflow exists.
Starting the same key again attaches to the running intent; the same key with
another payload raises ``IntentConflict``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from herald.core.contracts import CancelAnswer, CancelRequest, IntentStatus, KeyConflict, NotificationInput
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.intent import Intent, workflow_id_for
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.core.send_policy import DispatchOrder, built_in_order
from herald.intake.errors import IntentConflict, IntentNotFound
from herald.intake.notice import NoticeRequest, parse_notice
from herald.intake.requests import IntentRequest, build_intent, parse_request, same_intent
from herald.ledger.policy_store import orders_at_start
from herald.privacy.fingerprints import Keyring
from herald.privacy.recipient_vault import RecipientVault
from herald.temporal.task_queues import workflow_task_queue
from herald.temporal.workflow_api import (
    QUERY_STATUS,
    SIGNAL_KEY_CONFLICT,
    UPDATE_CANCEL,
    WORKFLOW_TYPE,
    initial_search_attributes,
)

_FINGERPRINT_MEMO = "intent_fingerprint"


class SendReceipt(Frozen):
    workflow_id: str
    run_id: str | None
    content_sha256: str


class NoticeReceipt(Frozen):
    """One notice's intents, one per channel, in the order the request named them."""

    business_key: str
    intents: dict[Channel, SendReceipt]


class HeraldClient:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        *,
        keyring: Keyring,
        policy: DeliveryPolicy | None = None,
        vault: RecipientVault | None = None,
        urgent_lane: bool = True,
    ) -> None:
        """`keyring` (the fingerprint keys, herald/privacy/fingerprints.py) names each intent's recipient and
        payload as the ledger and the policy gate know them. `vault` (the ledger's recipient keys)
        seals each intent's personal fields before they reach Temporal, so an erasure makes them
        unreadable there too; without one they travel under the deployment's codec key only,
        readable until the namespace's retention ends. `urgent_lane` (HERALD_URGENT_LANE): priority-1
        intents start on the route's urgent lane (herald/temporal/task_queues.py); off, on `task_queue`."""
        self._client = client
        self._urgent_lane = urgent_lane
        self._task_queue = task_queue
        self._keyring = keyring
        self._policy = policy or DeliveryPolicy()
        self._vault = vault

    def with_vault(self, vault: RecipientVault | None) -> HeraldClient:
        """This client, sealing with `vault` (None: not sealing)."""
        return HeraldClient(self._client, self._task_queue, keyring=self._keyring, policy=self._policy, vault=vault,
                            urgent_lane=self._urgent_lane)  # fmt: skip

    @property
    def temporal(self) -> Client:
        return self._client

    @property
    def keyring(self) -> Keyring:
        """The fingerprint keys this client names recipients with."""
        return self._keyring

    async def send(
        self, request: IntentRequest | dict[str, Any], *, policy: DeliveryPolicy | None = None
    ) -> SendReceipt:
        """Create the intent, or attach to the one this key already names."""
        parsed = request if isinstance(request, IntentRequest) else parse_request(request)
        now = datetime.now(UTC)
        intent = build_intent(parsed, now, self._keyring)
        [order] = await self._orders([intent], now)
        return await self._start(intent, policy or self._policy, order, now)

    async def _orders(self, intents: list[Intent], now: datetime) -> list[DispatchOrder | None]:
        """With the ledger (a client given the vault), the send policy's order for each intent's first
        attempt, read once for all of them: the workflow need not read it (one billed action less)."""
        orders = await orders_at_start(self._vault.pool, intents, now) if self._vault is not None else None
        return list(orders) if orders is not None else [None] * len(intents)

    async def _start(
        self, intent: Intent, policy: DeliveryPolicy, order: DispatchOrder | None = None, read_at: datetime | None = None
    ) -> SendReceipt:
        priority = start_priority(intent, order)
        try:
            handle = await self._client.start_workflow(
                WORKFLOW_TYPE,
                NotificationInput(
                    intent=await self._sealed(intent),
                    policy=policy,
                    first_order=order,
                    first_order_at=read_at if order is not None else None,
                ),
                result_type=IntentStatus,
                id=intent.workflow_id,
                # The urgent lane for the first priority key, so its workflow tasks never wait for a
                # worker slot behind a backlog's (herald/temporal/task_queues.py); its submits still
                # join the route's one paced submit queue.
                task_queue=workflow_task_queue(self._task_queue, priority.priority_key)
                if self._urgent_lane
                else self._task_queue,
                # A running intent for this key is the intent: attach to it instead of failing...
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # ...and a closed one is never run again: one business event, one intent.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                memo={_FINGERPRINT_MEMO: intent.intent_fingerprint},
                search_attributes=initial_search_attributes(
                    f"{intent.template_id}.v{intent.template_version}", intent.message.channel.value
                ),
                priority=priority,
            )
        except WorkflowAlreadyStartedError:
            handle = self._client.get_workflow_handle(intent.workflow_id, result_type=IntentStatus)
        if not _started_new(handle):
            # Attached to an existing intent: it must be this payload's.
            await self._refuse_other_payload(handle, intent)
        return SendReceipt(
            workflow_id=intent.workflow_id, run_id=handle.result_run_id, content_sha256=intent.content_sha256
        )

    async def _sealed(self, intent: Intent) -> Intent:
        return await self._vault.seal_intent(intent) if self._vault is not None else intent

    async def _refuse_other_payload(self, handle: WorkflowHandle[Any, Any], intent: Intent) -> None:
        description = await handle.describe()
        memo = await description.memo()
        recorded = memo.get(_FINGERPRINT_MEMO)
        if isinstance(recorded, str) and same_intent(recorded, intent, self._keyring):
            return
        if description.close_time is None:
            # Leave a durable trace on the intent it collided with, so conflicts can be counted.
            try:
                await handle.signal(
                    SIGNAL_KEY_CONFLICT,
                    KeyConflict(intent_fingerprint=intent.intent_fingerprint, observed_at=datetime.now(UTC)),
                )
            except RPCError:
                pass  # the intent closed meanwhile; the refusal below stands either way
        raise IntentConflict(intent.workflow_id)

    async def send_notice(
        self, notice: NoticeRequest | dict[str, Any], *, policy: DeliveryPolicy | None = None
    ) -> NoticeReceipt:
        """One business event on several channels: one independent intent per channel
        (``<key>/sms``, ``<key>/email``), sharing nothing at run time but the key.

        Every channel's entry is validated and rendered before any intent starts, so a bad entry
        starts none (``InvalidIntent`` names ``channels.<i>.<field>``). Starting is idempotent per
        channel: after a failure part-way (the cluster went away), calling again with the same
        notice attaches to what started and starts the rest.
        """
        parsed = notice if isinstance(notice, NoticeRequest) else parse_notice(notice)
        now = datetime.now(UTC)
        intents = [build_intent(request, now, self._keyring) for request in parsed.requests()]
        receipts: dict[Channel, SendReceipt] = {}
        for intent, order in zip(intents, await self._orders(intents, now), strict=True):
            receipts[intent.message.channel] = await self._start(intent, policy or self._policy, order, now)
        return NoticeReceipt(business_key=parsed.business_key, intents=receipts)

    async def notice_status(self, business_key: str) -> dict[Channel, IntentStatus | None]:
        """Each channel's live status under this key (None: no intent on that channel)."""
        found: dict[Channel, IntentStatus | None] = {}
        for channel in Channel:
            try:
                found[channel] = await self.status(business_key, channel)
            except IntentNotFound:
                found[channel] = None
        return found

    def handle(self, business_key: str, channel: Channel | str = Channel.SMS) -> WorkflowHandle[Any, IntentStatus]:
        return self._client.get_workflow_handle(workflow_id_for(business_key, channel), result_type=IntentStatus)

    async def status(self, business_key: str, channel: Channel | str = Channel.SMS) -> IntentStatus:
        """The intent's live status (answered by a worker, also for closed intents)."""
        try:
            return await self.handle(business_key, channel).query(QUERY_STATUS, result_type=IntentStatus)
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                raise IntentNotFound(workflow_id_for(business_key, channel)) from None
            raise

    async def cancel(
        self, business_key: str, reason: str, operator: str, channel: Channel | str = Channel.SMS
    ) -> CancelAnswer:
        """Close the intent's future work; a closed intent answers that there is nothing to cancel."""
        handle = self.handle(business_key, channel)
        request = CancelRequest(reason=reason, operator=operator)
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                raise IntentNotFound(workflow_id_for(business_key, channel)) from None
            raise
        if description.close_time is not None:
            final = await handle.query(QUERY_STATUS, result_type=IntentStatus)
            return CancelAnswer(
                cancelled=False, state=final.state, message=f"intent is already {final.state.value}; nothing to cancel"
            )
        return await handle.execute_update(UPDATE_CANCEL, request, result_type=CancelAnswer)

    async def wait(self, business_key: str, channel: Channel | str = Channel.SMS) -> IntentStatus:
        return await self.handle(business_key, channel).result()


def _started_new(handle: WorkflowHandle[Any, Any]) -> bool:
    """True when the start request created the workflow (so it carries our payload).

    The server says so in StartWorkflowExecutionResponse.started; the SDK keeps the response on
    the handle without a public accessor. Anything unexpected counts as "not known to be new",
    which costs one describe call and never skips the payload check.
    """
    response = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(response, "started", False))


def start_priority(intent: Intent, order: DispatchOrder | None = None) -> Priority:
    """The workflow's own tasks (and the lookups that inherit it): the policy's order when the client
    read it, else the category's built-in priority; its tenant as fairness key. Each submit, where a
    backlog forms, goes at the policy's order in force when its attempt is prepared."""
    order = order or built_in_order(intent.message.category, intent.tenant, intent.priority)
    return Priority(priority_key=order.priority_key, fairness_key=intent.tenant, fairness_weight=order.fairness_weight)
