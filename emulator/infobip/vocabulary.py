"""Infobip's words as the emulator speaks them: message statuses, message errors, ``ApiError`` bodies
and the date-time format of every timestamp it writes.

Ids, names and groups are Infobip's documented tables (/work/wt/infobip_spec.md sections 1.3 and 6);
where the tables give no description text, the description here is a short paraphrase, said so below.
Group names are upper-case, exactly the official Python client's strict enums.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any


@dataclass(frozen=True)
class Status:
    """A message status: ``{groupId, groupName, id, name, description}``."""

    group_id: int
    group_name: str
    id: int
    name: str
    description: str

    @property
    def final(self) -> bool:
        # Infobip: PENDING_* and DELIVERED_TO_OPERATOR are intermediate, every other group final.
        return self.group_name != "PENDING" and self.id != DELIVERED_TO_OPERATOR.id

    def as_json(self) -> dict[str, Any]:
        return {
            "groupId": self.group_id,
            "groupName": self.group_name,
            "id": self.id,
            "name": self.name,
            "description": self.description,
        }


@dataclass(frozen=True)
class MessageError:
    """A message error: ``{groupId, groupName, id, name, description, permanent}``."""

    group_id: int
    group_name: str
    id: int
    name: str
    description: str
    permanent: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "groupId": self.group_id,
            "groupName": self.group_name,
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "permanent": self.permanent,
        }


# The answer to a send: the spec's own example, description included.
PENDING_ACCEPTED = Status(1, "PENDING", 26, "PENDING_ACCEPTED", "Message sent to next instance")
# Descriptions below are paraphrases except DELIVERED_TO_HANDSET's, which is Infobip's text.
PENDING_WAITING_DELIVERY = Status(
    1, "PENDING", 3, "PENDING_WAITING_DELIVERY", "Message sent, waiting for delivery report"
)
DELIVERED_TO_OPERATOR = Status(3, "DELIVERED", 2, "DELIVERED_TO_OPERATOR", "Message delivered to operator")
DELIVERED_TO_HANDSET = Status(3, "DELIVERED", 5, "DELIVERED_TO_HANDSET", "Message delivered to handset")
EXPIRED_EXPIRED = Status(4, "EXPIRED", 15, "EXPIRED_EXPIRED", "Message expired")
REJECTED_DUPLICATE_MESSAGE_ID = Status(
    5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID", "Duplicate Message ID rejected"
)
REJECTED_MESSAGE_TOO_LONG = Status(5, "REJECTED", 25, "REJECTED_MESSAGE_TOO_LONG", "Message too long")
MISSING_TO = Status(5, "REJECTED", 51, "MISSING_TO", "Missing destination")
REJECTED_DESTINATION = Status(5, "REJECTED", 52, "REJECTED_DESTINATION", "Invalid destination address")

# The outcomes a fault may ask for, by id (Infobip's table: UNDELIVERABLE group 2, REJECTED group 5).
UNDELIVERABLE_STATUSES = {
    status.id: status
    for status in (
        Status(2, "UNDELIVERABLE", 4, "UNDELIVERABLE_REJECTED_OPERATOR", "Message rejected by operator"),
        Status(2, "UNDELIVERABLE", 9, "UNDELIVERABLE_NOT_DELIVERED", "Message sent, not delivered"),
        Status(2, "UNDELIVERABLE", 31, "UNDELIVERABLE_NOT_SENT", "Message not sent"),
    )
}
REJECTED_STATUSES = {
    status.id: status
    for status in (
        Status(5, "REJECTED", 6, "REJECTED_NETWORK", "Network is forbidden"),
        Status(5, "REJECTED", 8, "REJECTED_PREFIX_MISSING", "Number prefix missing"),
        Status(5, "REJECTED", 10, "REJECTED_DND", "Destination on DND list"),
        Status(5, "REJECTED", 12, "REJECTED_NOT_ENOUGH_CREDITS", "Not enough credits"),
        Status(5, "REJECTED", 14, "REJECTED_DESTINATION_BLOCKLISTED", "Destination blocklisted"),
        Status(5, "REJECTED", 19, "REJECTED_ROUTE_NOT_AVAILABLE", "Route not available"),
        Status(5, "REJECTED", 21, "REJECTED_SYSTEM_ERROR", "System error"),
        REJECTED_DUPLICATE_MESSAGE_ID,
        REJECTED_MESSAGE_TOO_LONG,
        MISSING_TO,
        REJECTED_DESTINATION,
    )
}
GENERAL_STATUS_NAMES = ("ACCEPTED", "PENDING", "UNDELIVERABLE", "DELIVERED", "EXPIRED", "REJECTED")

NO_ERROR = MessageError(0, "OK", 0, "NO_ERROR", "No Error", False)
# A message that waited in Infobip's queue past its validity: EC_MESSAGE_CANCELED is the code whose
# description says exactly that ("has not been sent to the next instance within its validity period
# and has expired"); which pair Infobip emits is UNCONFIRMED (spec section 8).
EC_MESSAGE_CANCELED = MessageError(
    2, "USER_ERRORS", 4100, "EC_MESSAGE_CANCELED", "Message not sent within its validity period, expired", True
)
# The duplicate of an idempotent send: the error that names a repeat of an accepted message (UNCONFIRMED
# that Infobip pairs it with status 23; the spec documents no pair).
EC_DUPLICATE_MESSAGE = MessageError(
    3, "OPERATOR_ERRORS", 5492, "EC_DUPLICATE_MESSAGE", "The same message has already been sent", True
)
EC_MSG_TEXT_TOO_LONG = MessageError(2, "USER_ERRORS", 355, "EC_MSG_TEXT_TOO_LONG", "Message text too long", True)
EC_INVALID_DESTINATION_ADDRESS = MessageError(
    2, "USER_ERRORS", 351, "EC_INVALID_DESTINATION_ADDRESS", "Invalid destination address", False
)
# The errors a fault may ask for, by id ([EC] general error codes; permanence as listed there).
FAULT_ERRORS = {
    error.id: error
    for error in (
        NO_ERROR,
        MessageError(1, "HANDSET_ERRORS", 1, "EC_UNKNOWN_SUBSCRIBER", "Unknown subscriber", True),
        MessageError(1, "HANDSET_ERRORS", 6, "EC_ABSENT_SUBSCRIBER_SM", "Absent subscriber", False),
        MessageError(1, "HANDSET_ERRORS", 27, "EC_ABSENT_SUBSCRIBER", "Absent subscriber", False),
        MessageError(1, "HANDSET_ERRORS", 32, "EC_SM_DELIVERY_FAILURE", "Delivery failure", False),
        EC_INVALID_DESTINATION_ADDRESS,
        MessageError(3, "OPERATOR_ERRORS", 632, "EC_SMS_REJECTED_BY_MOBILE_OPERATOR", "Rejected by operator", True),
        MessageError(3, "OPERATOR_ERRORS", 2048, "EC_TIME_OUT", "Time out", False),
        EC_MESSAGE_CANCELED,
        EC_DUPLICATE_MESSAGE,
    )
}

_ERROR_TEXTS = {
    400: ("E400", "Request cannot be processed.", "Check the syntax, violations and adjust the request."),
    401: (
        "E401",
        "The request lacks valid authentication credentials for the requested resource.",
        "Check the authentication credentials and try again.",
    ),
    429: (
        "E429",
        "Too many requests sent.",
        "Check request rate limit specified in the API endpoint documentation resource.",
    ),
    500: ("E500", "Something went wrong.", "Contact the support."),
    # Infobip documents no 502/503/504 for this API; a gateway in front of it can still answer them.
    # The body is shaped as ApiError so a client parses it as it parses the others (the emulator's choice).
    502: ("E502", "Bad gateway.", "Try again later."),
    503: ("E503", "Service unavailable.", "Try again later."),
    504: ("E504", "Gateway timeout.", "Try again later."),
}
_RESOURCES = {
    401: [{"name": "API Authentication", "url": "https://www.infobip.com/docs/essentials/api-authentication"}],
    429: [
        {
            "name": "Throttling handling errors",
            "url": "https://www.infobip.com/docs/essentials/api-essentials/integration-best-practices",
        }
    ],
}


@dataclass(frozen=True)
class Violation:
    """One broken rule of a request: the property's path and what it must be."""

    property: str
    violation: str


def api_error(status: int, violations: list[Violation] | None = None) -> dict[str, Any]:
    """The v3 ``ApiError`` body for an HTTP ``status``: all five keys, always."""
    code, description, action = _ERROR_TEXTS[status]
    return {
        "errorCode": code,
        "description": description,
        "action": action,
        "violations": [{"property": v.property, "violation": v.violation} for v in violations or []],
        "resources": _RESOURCES.get(status, []),
    }


def infobip_time(moment: datetime) -> str:
    """``2019-11-09T16:00:00.000+0000``: the spec's ``yyyy-MM-dd'T'HH:mm:ss.SSSZ``, in UTC."""
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}+0000"
