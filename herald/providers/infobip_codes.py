"""Infobip's vocabulary, translated once: message status groups and ids, error groups and ids.

Sources (/work/wt/infobip_spec.md sections 6 and 8): the OpenAPI spec 3.210.0's enums
``MessageGeneralStatus`` and ``MessageErrorGroup``, and Infobip's "Response status and error codes"
table (harvested; ids 3, 7 and 26 confirmed on infobip.com, 16 and 28 only in a reseller's copy).

A status is ``{groupId, groupName, id, name, description}``; Herald stores and reads its ``name``
(``PENDING_ACCEPTED``, ``DELIVERED_TO_HANDSET``), which names its group too: every name but
``MISSING_TO`` and ``SIGNALS_BLOCKED`` (both in the table) starts with its group's name, so a name
Infobip adds later still maps by its group (``map_status``). What each group means to Herald:

    PENDING, ACCEPTED .... QUEUED or SENT       Infobip has it; not final
    DELIVERED ............ SENT (to operator), DELIVERED (to handset)
    UNDELIVERABLE ........ UNDELIVERED          the operator could not deliver
    EXPIRED .............. UNDELIVERED          validity passed before delivery was confirmed
    REJECTED ............. FAILED               "rejected by Infobip or the operator before it could be sent"
      except REJECTED_DUPLICATE_MESSAGE_ID .... QUEUED: not a failure of this message (below)

Retryability (``is_retryable``): whether a failed message may be sent again unchanged. Each status
has a class (``Retry``). NEVER: not a failure, a refusal of this message or this number (REJECTED_DND,
REJECTED_DESTINATION, ...), and ``EXPIRED_DLR_UNKNOWN`` (the operator may have delivered it; a second
copy could be the person's second message). LATER: a passing condition of the account or platform
(credit, a route, a system error, the flooding filter). BY_ERROR: the operator's or the validity's
verdict, decided by the error. For LATER and BY_ERROR a known error decides, by Infobip's own flag:
``permanent`` "shows whether sending the same message again, unchanged, fails the same way"
(``ERROR_CODES``); without one (absent, 0, or not in the table) LATER is retryable, BY_ERROR is not.

REJECTED_DUPLICATE_MESSAGE_ID (5/23): Infobip refused a request because a message with this
``messageId`` already exists (idempotent sending, opt-in per account: "Retries with the same
messageId within the configured grace period are rejected during processing"). Herald's messageId is
the attempt reference, so the message that exists is this attempt's own, from an earlier request of
the same attempt. It says nothing about that message's fate, so it is neither a failure nor final:
it maps to QUEUED (the non-final floor, which cannot move a known status backwards) and is named by
``DUPLICATE_MESSAGE_ID``. How the machine should treat it (the lead wires it): as proof that the
attempt was accepted, exactly as an Accepted submit (the adapter answers a submit so); look the id up
(GET /sms/3/logs) for the message's status; never fail over and never submit again on it.
"""

from __future__ import annotations

from enum import Enum

from herald.core.outcomes import Frozen, ProviderStatus

# The status a repeated messageId is refused with; see the module docstring.
DUPLICATE_MESSAGE_ID = "REJECTED_DUPLICATE_MESSAGE_ID"


class Retry(str, Enum):
    """What a status says of sending the message again when no known error says it."""

    NEVER = "never"  # not a failure, or a failure after which a second copy may be a duplicate
    BY_ERROR = "by_error"  # only a known, non-permanent error makes it retryable
    LATER = "later"  # a passing condition of the account or platform: retryable unless the error is permanent


class InfobipStatus(Frozen):
    """One Infobip status id, as Herald reads it."""

    group_id: int
    status_id: int
    status: ProviderStatus
    retry: Retry


class InfobipError(Frozen):
    """One Infobip error id: its group and Infobip's own ``permanent`` flag."""

    group: str
    permanent: bool


# Group names (the v3 enum MessageGeneralStatus) onto Herald's status, for a name not in STATUSES.
GROUPS: dict[str, ProviderStatus] = {
    "ACCEPTED": ProviderStatus.QUEUED,
    "PENDING": ProviderStatus.QUEUED,
    # An unknown DELIVERED id: the operator has it at least; not final until a known id says so.
    "DELIVERED": ProviderStatus.SENT,
    "UNDELIVERABLE": ProviderStatus.UNDELIVERED,
    "EXPIRED": ProviderStatus.UNDELIVERED,
    "REJECTED": ProviderStatus.FAILED,
}
# The retry class of a group's unknown ids (a failure group's unknown id is judged by its error).
_GROUP_RETRY = {"UNDELIVERABLE": Retry.BY_ERROR, "EXPIRED": Retry.BY_ERROR, "REJECTED": Retry.BY_ERROR}


def _status(group_id: int, status_id: int, status: ProviderStatus, retry: Retry = Retry.NEVER) -> InfobipStatus:
    return InfobipStatus(group_id=group_id, status_id=status_id, status=status, retry=retry)


_Q, _S, _D = ProviderStatus.QUEUED, ProviderStatus.SENT, ProviderStatus.DELIVERED
_U, _F = ProviderStatus.UNDELIVERED, ProviderStatus.FAILED

STATUSES: dict[str, InfobipStatus] = {
    # 1 PENDING: Infobip has it. 26 is the typical answer to a submit ("Message sent to next instance"
    # in the spec's example, still Infobip's own queue); 3 and 7 say the operator has it.
    "PENDING_ACCEPTED": _status(1, 26, _Q),
    "PENDING_WAITING_DELIVERY": _status(1, 3, _S),
    "PENDING_ENROUTE": _status(1, 7, _S),
    # 2 UNDELIVERABLE
    "UNDELIVERABLE_REJECTED_OPERATOR": _status(2, 4, _U, Retry.BY_ERROR),
    "UNDELIVERABLE_NOT_DELIVERED": _status(2, 9, _U, Retry.BY_ERROR),
    "UNDELIVERABLE_NOT_SENT": _status(2, 31, _U, Retry.BY_ERROR),
    # 3 DELIVERED: 2 is an intermediate report (the operator has it), 5 the final one.
    "DELIVERED_TO_OPERATOR": _status(3, 2, _S),
    "DELIVERED_TO_HANDSET": _status(3, 5, _D),
    # 4 EXPIRED
    "EXPIRED_EXPIRED": _status(4, 15, _U, Retry.BY_ERROR),
    # Expired with its delivery unknown: it may have reached the handset, so never sent again on this.
    "EXPIRED_DLR_UNKNOWN": _status(4, 29, _U),
    # 87 is listed in groups 4 and 5; by name alone it is a final refusal either way.
    "SIGNALS_BLOCKED": _status(5, 87, _F),
    # 5 REJECTED: the message was never sent.
    "REJECTED_NETWORK": _status(5, 6, _F),
    "REJECTED_PREFIX_MISSING": _status(5, 8, _F),
    "REJECTED_DND": _status(5, 10, _F),
    "REJECTED_SOURCE": _status(5, 11, _F),
    "REJECTED_NOT_ENOUGH_CREDITS": _status(5, 12, _F, Retry.LATER),  # the account is topped up
    "REJECTED_SENDER": _status(5, 13, _F),
    "REJECTED_DESTINATION_BLOCKLISTED": _status(5, 14, _F),
    "REJECTED_DESTINATION": _status(5, 52, _F),  # also id 14's older name
    "REJECTED_NOT_REACHABLE": _status(5, 16, _F, Retry.BY_ERROR),
    "REJECTED_PREPAID_PACKAGE_EXPIRED": _status(5, 17, _F, Retry.LATER),  # the package is renewed
    "REJECTED_DESTINATION_NOT_REGISTERED": _status(5, 18, _F),
    "REJECTED_ROUTE_NOT_AVAILABLE": _status(5, 19, _F, Retry.LATER),
    # "by default ... 20 varied and 6 identical messages per hour" per number: passes within the hour.
    "REJECTED_FLOODING_FILTER": _status(5, 20, _F, Retry.LATER),
    "REJECTED_SYSTEM_ERROR": _status(5, 21, _F, Retry.LATER),
    DUPLICATE_MESSAGE_ID: _status(5, 23, _Q),  # not a failure: see the module docstring
    "REJECTED_INVALID_UDH": _status(5, 24, _F),
    "REJECTED_MESSAGE_TOO_LONG": _status(5, 25, _F),
    "REJECTED_NOT_SENT": _status(5, 28, _F, Retry.BY_ERROR),
    "MISSING_TO": _status(5, 51, _F),
    "UNDELIVERABLE_REJECTED_PLATFORM": _status(5, 100, _F),
}

_HANDSET, _USER, _OPERATOR = "HANDSET_ERRORS", "USER_ERRORS", "OPERATOR_ERRORS"


def _error(group: str, permanent: bool) -> InfobipError:
    return InfobipError(group=group, permanent=permanent)


# Infobip's error ids with its own `permanent` flag (the spec file's selection of the general table).
ERROR_CODES: dict[int, InfobipError] = {
    1: _error(_HANDSET, True),  # EC_UNKNOWN_SUBSCRIBER
    5: _error(_HANDSET, False),  # EC_UNIDENTIFIED_SUBSCRIBER
    6: _error(_HANDSET, False),  # EC_ABSENT_SUBSCRIBER_SM
    9: _error(_HANDSET, True),  # EC_ILLEGAL_SUBSCRIBER
    11: _error(_HANDSET, True),  # EC_TELESERVICE_NOT_PROVISIONED
    13: _error(_HANDSET, False),  # EC_CALL_BARRED
    27: _error(_HANDSET, False),  # EC_ABSENT_SUBSCRIBER
    31: _error(_HANDSET, False),  # EC_SUBSCRIBER_BUSY_FOR_MT_SMS
    32: _error(_HANDSET, False),  # EC_SM_DELIVERY_FAILURE
    34: _error(_HANDSET, False),  # EC_SYSTEM_FAILURE
    255: _error(_HANDSET, False),  # EC_UNKNOWN_ERROR
    351: _error(_USER, False),  # EC_INVALID_DESTINATION_ADDRESS
    355: _error(_USER, True),  # EC_MSG_TEXT_TOO_LONG
    368: _error(_USER, True),  # EC_INVALID_SOURCE_ADDRESS
    541: _error(_USER, False),  # EC_LIMIT_REACHED
    603: _error(_USER, True),  # EC_CONTENT_BLOCKED
    4100: _error(_USER, True),  # EC_MESSAGE_CANCELED (not sent on within its validity)
    4101: _error(_USER, True),  # EC_VALIDITY_EXPIRED
    4103: _error(_USER, True),  # EC_DESTINATION_FLOODING
    566: _error(_OPERATOR, True),  # EC_DESTINATION_BLOCKED_BY_OPERATOR
    632: _error(_OPERATOR, True),  # EC_SMS_REJECTED_BY_MOBILE_OPERATOR
    811: _error(_OPERATOR, True),  # EC_MESSAGE_EXPIRED
    2048: _error(_OPERATOR, False),  # EC_TIME_OUT
    4098: _error(_OPERATOR, False),  # EC_VP_EXPIRED
    5492: _error(_OPERATOR, True),  # EC_DUPLICATE_MESSAGE
}
# Error id 0 (group OK, NO_ERROR) is no error: stored and signalled as none.
NO_ERROR = 0


def status_of(label: str | None) -> InfobipStatus | None:
    """The table's entry for a status name; None for a name it does not hold."""
    return STATUSES.get(label) if label is not None else None


def _group_of(label: str) -> str | None:
    """The group a name Infobip added later belongs to, by its prefix (``EXPIRED_SOMETHING``)."""
    return next((group for group in GROUPS if label == group or label.startswith(group + "_")), None)


def map_status(label: str | None) -> ProviderStatus:
    """Map an Infobip status name (or, without one, its group name) onto ``ProviderStatus``.

    An unknown name maps by its group's prefix; anything else to QUEUED, the lowest non-final rank,
    so a label Herald does not understand can neither end an attempt nor move a status backwards.
    """
    if label is None:
        return ProviderStatus.QUEUED
    known = STATUSES.get(label)
    if known is not None:
        return known.status
    group = _group_of(label)
    return GROUPS[group] if group is not None else ProviderStatus.QUEUED


def is_retryable(label: str | None, error_code: int | None) -> bool:
    """Whether a failed message with this status name and error id may be sent again (module docstring)."""
    if map_status(label) not in (ProviderStatus.UNDELIVERED, ProviderStatus.FAILED):
        return False
    known = status_of(label)
    group = _group_of(label or "")
    retry = known.retry if known is not None else _GROUP_RETRY.get(group or "", Retry.NEVER)
    if retry is Retry.NEVER:
        return False
    error = ERROR_CODES.get(error_code) if error_code is not None else None
    if error is not None:
        return not error.permanent
    return retry is Retry.LATER


def error_code_of(error_id: int | None) -> int | None:
    """The error id as Herald records it: None for no error (absent or 0, NO_ERROR)."""
    return None if error_id is None or error_id == NO_ERROR else error_id
