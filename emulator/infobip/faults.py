"""Faults the Infobip emulator injects, chosen per destination number, and their registry.

The vocabulary is the Twilio emulator's (``emulator.faults``), in Infobip's words where the two
differ (a status callback is a delivery report here). A fault is armed for one ``to`` number with a
``count`` (``None`` = always); every destination of a send naming that number consumes one use.
Numbers are compared without a leading ``+`` (Infobip takes both forms).

* answer faults decide the HTTP answer of the send (hang, 5xx before or after acceptance, 429,
  reports before the answer). When several destinations of one request carry answer faults, the
  first refusal (nothing accepted) wins over everything, then the longest hang;
* lifecycle faults accept the message and change what happens afterwards: its outcome
  (undeliverable, rejected, expired in the queue, silent) and its reports (never, twice, out of
  order, delayed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter, field_validator

from emulator import armed_faults
from emulator.armed_faults import MAX_HOLD_SECONDS, Assignment, FaultBase, load_assignments
from emulator.infobip.vocabulary import FAULT_ERRORS, REJECTED_STATUSES, UNDELIVERABLE_STATUSES


class AcceptThenHang(FaultBase):
    """Accept the message, then hold the HTTP answer so the client's read timeout fires."""

    fault: Literal["accept_then_hang"]
    hang_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)
    # False: no delivery report either, so only a lookup by messageId (logs) can find the message.
    reports: bool = True
    # How long the message waits in Infobip's queue before it leaves; past its validityPeriod it
    # expires there instead (EXPIRED, never sent).
    queue_seconds: float = Field(default=0.0, ge=0, le=MAX_HOLD_SECONDS)


class HangWithoutAccept(FaultBase):
    """Hold the HTTP answer, then answer 500; the message never exists."""

    fault: Literal["hang_without_accept"]
    hang_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)


class Error500(FaultBase):
    """Answer 500 with the ApiError body; nothing is accepted."""

    fault: Literal["error_500"]


class Error503(FaultBase):
    """Answer 503 (a gateway's answer; Infobip documents none) with an ApiError body; nothing is accepted."""

    fault: Literal["error_503"]


class AcceptThenError(FaultBase):
    """Accept the message (it is sent and reported as usual), then answer ``status`` instead of 200."""

    fault: Literal["accept_then_error"]
    status: Literal[500, 502, 503, 504] = 500


class RateLimit(FaultBase):
    """Answer 429 with the ApiError429 body; nothing is accepted. Infobip documents no Retry-After
    header, so none is sent unless ``retry_after`` asks for one."""

    fault: Literal["rate_limit"]
    retry_after: float | None = Field(default=None, ge=0, le=86_400)


class ReportBeforeResponse(FaultBase):
    """Accept, run the lifecycle, post its reports and wait for their answers, only then answer 200."""

    fault: Literal["report_before_response"]


class HeldInQueue(FaultBase):
    """Accept; the message waits ``queue_seconds`` in Infobip's queue, and expires there (EXPIRED,
    never sent) when that is longer than its validityPeriod."""

    fault: Literal["held_in_queue"]
    queue_seconds: float = Field(default=30.0, gt=0, le=MAX_HOLD_SECONDS)


class Undeliverable(FaultBase):
    """Accept; the message is sent and ends UNDELIVERABLE with the given status and error ids."""

    fault: Literal["undeliverable"]
    status_id: int = 9
    error_id: int = 1

    @field_validator("status_id")
    @classmethod
    def _known_status(cls, value: int) -> int:
        if value not in UNDELIVERABLE_STATUSES:
            raise ValueError(f"must be one of {sorted(UNDELIVERABLE_STATUSES)}")
        return value

    @field_validator("error_id")
    @classmethod
    def _known_error(cls, value: int) -> int:
        if value not in FAULT_ERRORS:
            raise ValueError(f"must be one of {sorted(FAULT_ERRORS)}")
        return value


class Rejected(FaultBase):
    """Accept (200); the message is never sent and ends REJECTED with the given status id."""

    fault: Literal["rejected"]
    status_id: int = 6

    @field_validator("status_id")
    @classmethod
    def _known_status(cls, value: int) -> int:
        if value not in REJECTED_STATUSES:
            raise ValueError(f"must be one of {sorted(REJECTED_STATUSES)}")
        return value


class DuplicateReports(FaultBase):
    """Deliver every report ``copies`` times, each copy in a POST of its own, concurrently."""

    fault: Literal["duplicate_reports"]
    copies: int = Field(default=2, ge=2, le=10)


class OutOfOrderReports(FaultBase):
    """Deliver the final report first, then an intermediate PENDING report for the same message
    (sent whether or not the message asked for intermediate reports)."""

    fault: Literal["out_of_order_reports"]


class NoReport(FaultBase):
    """Run the lifecycle to DELIVERED but deliver no report, pushed or pulled; only the logs show it."""

    fault: Literal["no_report"]


class Silent(FaultBase):
    """Stop the lifecycle at PENDING for good and deliver no report: no evidence, ever."""

    fault: Literal["silent"]


class DelayedReport(FaultBase):
    """Hold every report ``delay_seconds`` before delivering it."""

    fault: Literal["delayed_report"]
    delay_seconds: float = Field(default=5.0, ge=0, le=MAX_HOLD_SECONDS)


Fault = Annotated[
    Union[
        AcceptThenHang,
        HangWithoutAccept,
        Error500,
        Error503,
        AcceptThenError,
        RateLimit,
        ReportBeforeResponse,
        HeldInQueue,
        Undeliverable,
        Rejected,
        DuplicateReports,
        OutOfOrderReports,
        NoReport,
        Silent,
        DelayedReport,
    ],
    Field(discriminator="fault"),
]
FAULT_ADAPTER: TypeAdapter[Fault] = TypeAdapter(Fault)
# Faults that refuse the whole request before anything is accepted.
REFUSALS = (HangWithoutAccept, Error500, Error503, RateLimit)


def number_key(to: str) -> str:
    """The registry's key for a destination: Infobip takes numbers with and without the ``+``."""
    return to.strip().lstrip("+")


# One entry of a faults file: a fault and the number it applies to.
FaultAssignment = Assignment[Fault]


def load_faults_file(path: Path) -> tuple[FaultAssignment, ...]:
    """Read a faults file: a JSON list of ``{"to": ..., "fault": ..., ...params}`` (ValueError if it is not)."""
    return load_assignments(path, FaultAssignment, FAULT_ADAPTER)


class FaultRegistry(armed_faults.FaultRegistry[Fault]):
    """The faults armed on this emulator, keyed by destination number (without its ``+``)."""

    def __init__(self) -> None:
        super().__init__(key=number_key)
