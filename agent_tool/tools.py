"""The agent tools' handlers: deterministic application code between a model and Herald.

A model chooses a tool and fills two or three fields whose values are ids and enum members. Every
thing else is decided here, from the service's own records: who the recipient is, whether this
caller may notify them for this action, whether the action fits the record's state, which approved
template version says it, what the business key is (so a repeated call is the same intent). No
text from the model reaches a message body; the model gets back the intent's key and state, or a
structured refusal.

The tenant an intent is for (its fairness key on a busy route) comes from the record too: the
order's seller, the class's studio. A model naming it could file one seller's notices under
another's share. What the model may add is a lower priority for a notice that can wait: a priority
key only ever lets it wait longer (a higher one than its category's is recorded as not granted). The model never enters the delivery state machine: it starts an intent, as any
service does, and Herald takes it from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field

from agent_tool.store import DemoStore
from herald.client import HeraldClient
from herald.core.message import Channel
from herald.core.outcomes import Frozen
from herald.core.send_policy import PRIORITY_KEYS
from herald.intake.errors import HeraldError, IntentNotFound


class SellerAction(str, Enum):
    NEW_ORDER = "new_order"
    ORDER_CANCELLED = "order_cancelled"


class MemberAction(str, Enum):
    SEAT_OPENED = "seat_opened"
    CLASS_CANCELLED = "class_cancelled"


OrderId = Annotated[
    str,
    Field(
        pattern=r"^ord_[0-9]{1,12}$",
        description=(
            "The marketplace order's id, exactly as the order system shows it (for example 'ord_1001'). "
            "The seller, the phone number and the order details are looked up from it; never pass them."
        ),
    ),
]
SellerActionField = Annotated[
    SellerAction,
    Field(
        description=(
            "Which approved notice to send. 'new_order': tell the seller a new order was placed (only for an "
            "order in state 'placed'). 'order_cancelled': tell the seller the buyer cancelled (only for an "
            "order in state 'cancelled')."
        )
    ),
]
OccurrenceId = Annotated[
    str,
    Field(
        pattern=r"^cls_[0-9]{1,12}$",
        description="The class occurrence's id from the booking system (for example 'cls_501'): one class on one date.",
    ),
]
MemberId = Annotated[
    str,
    Field(
        pattern=r"^mem_[0-9]{1,12}$",
        description="The member's id from the booking system (for example 'mem_7'); their phone number is looked up.",
    ),
]
MemberActionField = Annotated[
    MemberAction,
    Field(
        description=(
            "Which approved notice to send. 'seat_opened': offer a seat to a member on the class's waitlist "
            "(only while the class is scheduled). 'class_cancelled': tell a booked member the class is cancelled "
            "(only for a cancelled class)."
        )
    ),
]

# As IntentRequest.priority: a strict whole number (not true, 3.0 or "3"), from the send policy's range.
PriorityField = Annotated[
    int | None,
    Field(
        ge=PRIORITY_KEYS[0],
        le=PRIORITY_KEYS[1],
        strict=True,
        description=(
            f"Optional. A priority key from {PRIORITY_KEYS[0]} (first) to {PRIORITY_KEYS[1]} (last), only to let a "
            "notice that can wait go after more urgent ones when the route is busy; leave it out to send at the "
            "message's own priority. A key ahead of the message's own is not granted."
        ),
    ),
]

RefusalCode = Literal[
    "unknown_order", "unknown_class", "unknown_member", "not_authorised", "action_not_allowed", "refused_by_herald"
]


class Started(Frozen):
    outcome: Literal["started"] = "started"
    business_key: str
    channel: Channel
    state: str  # the intent's state when the tool answered (pending, submitting, delivered, ...)


class Refused(Frozen):
    outcome: Literal["refused"] = "refused"
    code: RefusalCode
    message: str


@dataclass(frozen=True)
class Caller:
    """Who the agent acts for, and what they may do: configured by the service, not by the model."""

    name: str
    marketplaces: frozenset[str]
    studios: frozenset[str]
    actions: frozenset[str]


CALLERS = {
    "eu-marketplace-agent": Caller(
        "eu-marketplace-agent",
        marketplaces=frozenset({"eu"}),
        studios=frozenset({"riverside"}),
        actions=frozenset({a.value for a in SellerAction} | {a.value for a in MemberAction}),
    ),
}

# The approved template version for each action: a code change reviewed like any other.
TEMPLATES = {
    SellerAction.NEW_ORDER: ("seller_new_order", 2),
    SellerAction.ORDER_CANCELLED: ("seller_order_cancelled", 1),
    MemberAction.SEAT_OPENED: ("class_opening", 1),
    MemberAction.CLASS_CANCELLED: ("class_cancelled", 1),
}


class AgentTools:
    def __init__(self, store: DemoStore, herald: HeraldClient, caller: Caller) -> None:
        self._store = store
        self._herald = herald
        self._caller = caller

    async def notify_seller(
        self, order_id: str, action: SellerAction, priority: int | None = None
    ) -> Started | Refused:
        order = self._store.orders.get(order_id)
        if order is None:
            return Refused(code="unknown_order", message=f"no order {order_id}")
        if order.marketplace not in self._caller.marketplaces or action.value not in self._caller.actions:
            return Refused(
                code="not_authorised",
                message=f"{self._caller.name} may not notify sellers of {order_id} ({action.value})",
            )
        wanted = {SellerAction.NEW_ORDER: "placed", SellerAction.ORDER_CANCELLED: "cancelled"}[action]
        if order.state != wanted:
            return Refused(
                code="action_not_allowed",
                message=f"{action.value} needs an order in state {wanted}; {order_id} is {order.state}",
            )
        seller = self._store.sellers[order.seller_id]
        template_id, version = TEMPLATES[action]
        data: dict[str, str | int] = {"order_ref": order.order_id, "order_total": order.total}
        if action is SellerAction.NEW_ORDER:
            data["item_count"] = order.item_count
        key = f"{template_id}:{order.order_id}"
        return await self._start(
            key, seller.phone, template_id, version, data, tenant=seller.seller_id, priority=priority
        )

    async def notify_member(
        self, class_occurrence_id: str, member_id: str, action: MemberAction, priority: int | None = None
    ) -> Started | Refused:
        occurrence = self._store.classes.get(class_occurrence_id)
        if occurrence is None:
            return Refused(code="unknown_class", message=f"no class occurrence {class_occurrence_id}")
        member = self._store.members.get(member_id)
        if member is None:
            return Refused(code="unknown_member", message=f"no member {member_id}")
        if occurrence.studio not in self._caller.studios or action.value not in self._caller.actions:
            return Refused(
                code="not_authorised", message=f"{self._caller.name} may not notify members of {class_occurrence_id}"
            )
        if action is MemberAction.SEAT_OPENED and not (
            occurrence.state == "scheduled" and member_id in occurrence.waitlist
        ):
            return Refused(
                code="action_not_allowed", message="seat_opened needs a scheduled class and a waitlisted member"
            )
        if action is MemberAction.CLASS_CANCELLED and not (
            occurrence.state == "cancelled" and member_id in occurrence.booked
        ):
            return Refused(
                code="action_not_allowed", message="class_cancelled needs a cancelled class and a booked member"
            )
        template_id, version = TEMPLATES[action]
        data: dict[str, str | int] = {"class_name": occurrence.name, "starts_at": occurrence.starts_at}
        if action is MemberAction.SEAT_OPENED:
            data["hold_minutes"] = occurrence.hold_minutes
        key = f"{template_id}:{occurrence.occurrence_id}_{member.member_id}"
        return await self._start(
            key, member.phone, template_id, version, data, tenant=occurrence.studio, priority=priority
        )

    async def _start(
        self,
        key: str,
        phone: str,
        template_id: str,
        version: int,
        data: dict[str, Any],
        *,
        tenant: str,
        priority: int | None,
    ) -> Started | Refused:
        request = {"business_key": key, "recipient": phone, "template_id": template_id, "template_version": version,
                   "render_data": data, "tenant": tenant}  # fmt: skip
        if priority is not None:  # Herald checks it again, as every caller's
            request["priority"] = priority
        try:
            await self._herald.send(request)
        except HeraldError as refused:  # a record Herald cannot send (bad data): structured, never a traceback
            return Refused(code="refused_by_herald", message=str(refused))
        try:
            state = (await self._herald.status(key, Channel.SMS)).state.value
        except (IntentNotFound, RuntimeError):
            state = "pending"
        return Started(business_key=key, channel=Channel.SMS, state=state)
