"""Faults the ESP emulator injects, chosen per recipient address, and their registry.

A fault is armed for one address with a ``count`` (``None`` = always). Every
``RCPT TO`` naming that address consumes one use; once the count is spent the
address behaves normally again. An address carries at most one fault, and
addresses are compared case-insensitively, as SendGrid treats them.

Faults fall into three groups:

* answer faults decide an SMTP reply (``temp_fail``, ``perm_fail``), either at
  ``RCPT`` or at the end of ``DATA``; nothing is accepted;
* connection faults garble what the client hears after the final dot:
  ``drop_after_data`` accepts the message and hangs up instead of replying,
  ``drop_during_data`` hangs up the same way but without taking the message
  (nothing stored, no events), ``slow_reply`` accepts it and replies late.
  The client of either drop sees the same thing (a disconnect during ``DATA``);
  only the relay's store and its events tell the two apart;
* event faults accept the message and change its webhook events (bounce,
  deferral, drop, spam report, unsubscribe, silence, duplicates, order, delay).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from emulator import armed_faults
from emulator.armed_faults import MAX_HOLD_SECONDS, FaultBase, read_faults_file


class TempFail(FaultBase):
    """Refuse with a transient 4xx reply; nothing is accepted. After 421 the server closes the connection."""

    fault: Literal["temp_fail"]
    code: Literal[421, 451] = 451
    stage: Literal["rcpt", "data"] = "rcpt"


class PermFail(FaultBase):
    """Refuse for good: 550 at ``RCPT`` or 554 at the end of ``DATA``; nothing is accepted."""

    fault: Literal["perm_fail"]
    stage: Literal["rcpt", "data"] = "rcpt"


class DropAfterData(FaultBase):
    """Accept and store the message and send its events (unless ``events`` is false: then none ever
    comes), but close the connection instead of replying."""

    fault: Literal["drop_after_data"]
    events: bool = True


class DropDuringData(FaultBase):
    """Close the connection once the final dot has arrived, before the message is stored or any reply is
    written: the reply was lost and the relay really did not take the message (no record, no events)."""

    fault: Literal["drop_during_data"]


class SlowReply(FaultBase):
    """Accept the message, then hold the reply to the end of ``DATA`` for ``seconds`` before the 250."""

    fault: Literal["slow_reply"]
    seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)


class NoEvents(FaultBase):
    """Accept the message and never post a webhook event for it."""

    fault: Literal["no_events"]


class DuplicateEvents(FaultBase):
    """Post every event ``copies`` times concurrently (same body, same ``sg_event_id``)."""

    fault: Literal["duplicate_events"]
    copies: int = Field(default=2, ge=2, le=10)


class OutOfOrderEvents(FaultBase):
    """Post the final event (``delivered``) first, and ``processed`` only after it was answered."""

    fault: Literal["out_of_order_events"]


class Bounce(FaultBase):
    """``processed``, then ``bounce`` (``type`` bounce or blocked) instead of ``delivered``."""

    fault: Literal["bounce"]
    type: Literal["bounce", "blocked"] = "bounce"
    status: str = Field(default="5.1.1", pattern=r"^[245]\.\d{1,3}\.\d{1,3}$")
    reason: str = Field(
        default="550 5.1.1 The email account that you tried to reach does not exist.", min_length=1, max_length=1000
    )


class DeferredThenDelivered(FaultBase):
    """``processed``, ``deferrals`` x ``deferred`` (attempt 1, 2, ...), then ``delivered``."""

    fault: Literal["deferred_then_delivered"]
    deferrals: int = Field(default=1, ge=1, le=10)
    response: str = Field(default="451 4.3.0 Temporary local problem - please try later", min_length=1, max_length=1000)


class Dropped(FaultBase):
    """A suppressed recipient: one ``dropped`` event and nothing else (SendGrid sends no ``processed``)."""

    fault: Literal["dropped"]
    reason: str = Field(default="Bounced Address", min_length=1, max_length=1000)


class SpamReport(FaultBase):
    """``processed``, ``delivered``, then the recipient marks it as spam: ``spamreport``."""

    fault: Literal["spamreport"]


class Unsubscribe(FaultBase):
    """``processed``, ``delivered``, then the recipient leaves by a link in the message: ``unsubscribe``
    (SendGrid's own link) or ``group_unsubscribe`` (a suppression group's, naming the group)."""

    fault: Literal["unsubscribe"]
    event: Literal["unsubscribe", "group_unsubscribe"] = "group_unsubscribe"
    asm_group_id: int = Field(default=1, ge=1)


class DelayedEvents(FaultBase):
    """Hold every event ``seconds`` before posting it (its ``timestamp`` stays when it happened)."""

    fault: Literal["delayed_events"]
    seconds: float = Field(default=5.0, ge=0, le=MAX_HOLD_SECONDS)


Fault = Annotated[
    Union[
        TempFail,
        PermFail,
        DropAfterData,
        DropDuringData,
        SlowReply,
        NoEvents,
        DuplicateEvents,
        OutOfOrderEvents,
        Bounce,
        DeferredThenDelivered,
        Dropped,
        SpamReport,
        Unsubscribe,
        DelayedEvents,
    ],
    Field(discriminator="fault"),
]
FAULT_ADAPTER: TypeAdapter[Fault] = TypeAdapter(Fault)


class FaultAssignment(BaseModel):
    """One entry of a faults file: a fault and the address it applies to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    to: str = Field(min_length=3, max_length=320)
    fault: Fault


def load_faults_file(path: Path) -> tuple[FaultAssignment, ...]:
    """Read a faults file: a JSON list of ``{"to": ..., "fault": ..., ...params}``.

    Raises:
        ValueError: The file is not such a list or an entry is invalid.
    """
    return tuple(FaultAssignment(to=to, fault=fault) for to, fault in read_faults_file(path, FAULT_ADAPTER))


class FaultRegistry(armed_faults.FaultRegistry[Fault]):
    """The faults armed on this emulator, keyed by recipient address: case-insensitive, as mail is delivered."""

    def __init__(self) -> None:
        super().__init__(key=str.lower)
