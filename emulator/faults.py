"""Faults the emulator injects, chosen per recipient number, and their registry.

A fault is armed for one ``To`` number with a ``count`` (``None`` = always).
Every create request to that number consumes one use; once the count is spent
the number behaves normally again. A number carries at most one fault.

Faults fall into two groups:

* answer faults decide the HTTP answer of the create request
  (hang, 5xx, 429, reject, callback before response);
* lifecycle faults accept the message and change what happens afterwards
  (final status, callback duplication, ordering, delay, silence).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter

from emulator import armed_faults
from emulator.armed_faults import MAX_HOLD_SECONDS, Assignment, FaultBase, load_assignments


class AcceptThenHang(FaultBase):
    """Accept the message, then hold the HTTP answer so the client's read timeout fires."""

    fault: Literal["accept_then_hang"]
    hang_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)
    # False: no status callbacks either, so only a lookup by our own reference can find the message.
    callbacks: bool = True
    # How long the message waits in the sender's queue (`queued`, no `date_sent`) before it starts
    # sending, as Twilio queues behind a sender's rate; past the message's ValidityPeriod it is
    # dropped instead (`failed`, 30036) and never sent.
    queue_seconds: float = Field(default=0.0, ge=0, le=MAX_HOLD_SECONDS)


class LostThenReported(FaultBase):
    """A provider that contradicts itself, to prove Herald counts what it cannot prevent: accept,
    hold the answer (the client times out), keep the message out of ListMessage for good, and hold
    its status callbacks until the admin API releases them (or ``release_after_seconds`` pass).
    A lookup by reference then proves "absence" wrongly, and the reports arrive afterwards."""

    fault: Literal["lost_then_reported"]
    hang_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)
    release_after_seconds: float = Field(default=120.0, gt=0, le=MAX_HOLD_SECONDS)


class HangWithoutAccept(FaultBase):
    """Hold the HTTP answer, then answer 503; the message never exists."""

    fault: Literal["hang_without_accept"]
    hang_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)


class AcceptThenError(FaultBase):
    """Accept the message (it is sent and reported as usual), then answer 500 or 503 with Twilio's error
    body: a gateway failing after the API created the message. The caller cannot tell it from a 5xx
    that created nothing; only a lookup can."""

    fault: Literal["accept_then_error"]
    status: Literal[500, 503] = 500


class Error500(FaultBase):
    """Answer 500 with Twilio's error body; nothing is accepted."""

    fault: Literal["error_500"]


class Error503(FaultBase):
    """Answer 503 with Twilio's error body; nothing is accepted."""

    fault: Literal["error_503"]


class RateLimit(FaultBase):
    """Answer 429 (code 20429) with a Retry-After header; nothing is accepted."""

    fault: Literal["rate_limit"]
    retry_after: float = Field(default=1.0, ge=0, le=86_400)
    retry_after_format: Literal["seconds", "http-date"] = "seconds"


class Reject(FaultBase):
    """Answer 400 with the given Twilio error code (21610 opt-out, 21211, 21614, ...)."""

    fault: Literal["reject"]
    code: int = Field(default=21610, ge=10_000, le=99_999)


class Undelivered(FaultBase):
    """Accept; the lifecycle ends ``undelivered`` with the given error code."""

    fault: Literal["undelivered"]
    code: int = Field(default=30003, ge=10_000, le=99_999)


class Failed(FaultBase):
    """Accept; the lifecycle ends ``failed`` (never ``sent``) with the given error code."""

    fault: Literal["failed"]
    code: int = Field(default=30008, ge=10_000, le=99_999)


class CallbackBeforeResponse(FaultBase):
    """Accept, run the lifecycle and its callbacks to completion, only then answer 201."""

    fault: Literal["callback_before_response"]


class DuplicateCallbacks(FaultBase):
    """Send every callback ``copies`` times concurrently."""

    fault: Literal["duplicate_callbacks"]
    copies: int = Field(default=3, ge=2, le=10)


class OutOfOrderCallbacks(FaultBase):
    """Send the final callback before the ``sent`` one."""

    fault: Literal["out_of_order_callbacks"]


class NoCallback(FaultBase):
    """Run the lifecycle to ``delivered`` but send no callback; only polling finds it."""

    fault: Literal["no_callback"]


class Silent(FaultBase):
    """Stop the lifecycle at ``sent`` for good and send no callback: no evidence, ever."""

    fault: Literal["silent"]


class DelayedCallback(FaultBase):
    """Hold every callback ``delay_seconds`` before sending it."""

    fault: Literal["delayed_callback"]
    delay_seconds: float = Field(default=5.0, ge=0, le=MAX_HOLD_SECONDS)


Fault = Annotated[
    Union[
        AcceptThenHang,
        LostThenReported,
        HangWithoutAccept,
        AcceptThenError,
        Error500,
        Error503,
        RateLimit,
        Reject,
        Undelivered,
        Failed,
        CallbackBeforeResponse,
        DuplicateCallbacks,
        OutOfOrderCallbacks,
        NoCallback,
        Silent,
        DelayedCallback,
    ],
    Field(discriminator="fault"),
]
FAULT_ADAPTER: TypeAdapter[Fault] = TypeAdapter(Fault)


# One entry of a faults file: a fault and the number it applies to.
FaultAssignment = Assignment[Fault]


def load_faults_file(path: Path) -> tuple[FaultAssignment, ...]:
    """Read a faults file: a JSON list of ``{"to": ..., "fault": ..., ...params}`` (ValueError if it is not)."""
    return load_assignments(path, FaultAssignment, FAULT_ADAPTER)


class FaultRegistry(armed_faults.FaultRegistry[Fault]):
    """The faults armed on this emulator, keyed by recipient number."""
