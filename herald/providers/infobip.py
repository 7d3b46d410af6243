"""Infobip SMS adapter (SMS API v3) over httpx.

Herald names each message itself: the one destination of each submit carries ``messageId`` = the
attempt reference, so every later lookup and every report is by Herald's own id, exactly, never a
match by number and body. One HTTP request per call, never retried here (retries belong to
Temporal), never an exception for anything the network or Infobip does:

    submit: POST /sms/3/messages  (one message, one destination, Authorization: App <key>)
      ├── a response arrived
      │     ├── 2xx, our message listed with a status
      │     │     ├── REJECTED group, a passing condition (credit, route, system error) ... Retryable
      │     │     ├── REJECTED group, any other refusal ................................ Rejected
      │     │     ├── REJECTED_DUPLICATE_MESSAGE_ID (this id exists already) ........... Accepted (queued)
      │     │     └── any other group (PENDING, ACCEPTED, ...) ......................... Accepted
      │     ├── 2xx without a readable message id or status ............................ Unknown
      │     ├── 400 ........................................ Rejected, naming the violated properties
      │     ├── 401, 403, 404 ...................................... Retryable (config: key, scopes, base URL)
      │     ├── 429 .................................................. Unreachable (delay from Retry-After)
      │     ├── any other 4xx .............................................................. Rejected
      │     └── 5xx, 3xx, 1xx ....................................... Unknown (it may have been accepted)
      └── httpx.HTTPError, no response
            ├── ConnectError, ConnectTimeout, PoolTimeout ..................... Unreachable (never left)
            └── anything else (read/write timeout, reset, protocol error) ................... Unknown

    fetch(id) and find_by_reference(ref): GET /sms/3/logs?messageId=<id>  (paced: 120 requests/min)
      ├── local pace: no slot within MAX_SLOT_WAIT ............................................ Unavailable
      ├── 200, one message with our id ............................................................ Found
      ├── 200, only REJECTED_DUPLICATE_MESSAGE_ID entries (a message with the id exists) ... Found (queued)
      ├── 200, none .......................................... NotFound (by reference: searched_at, bounded)
      ├── 200, two or more messages with our id (idempotency off, the id reused) ....... Unavailable
      ├── 429 (the logs' documented limit) ............................. Unavailable; paced until it passes
      └── 401, 403 (no sms:logs:read scope), any other answer, a network error, a bad body ... Unavailable

    cancel: Infobip cancels only scheduled messages, and Herald schedules none: canceled=False, no call.

Lookups read the logs, never ``GET /sms/3/reports``: "The API returns each report only once", so a
lookup through it would consume the report, and the next lookup of the same message (a retried
activity, a second poll) would find nothing and could read that as absence. The logs are an
idempotent read (48 h of them, at most 1,000 per call, 120 requests a minute).

When "not found" proves absence: each submit bounds Infobip's queue with ``validityPeriod`` (in
seconds; "Once expired, the message won't be sent"), so past the in-flight bound plus the validity an
accepted message is either sent or dropped, and the logs list it either way, by the id Herald gave it,
in any state (the logs' own status filter takes PENDING and ACCEPTED, so queued messages are listed
too): the same proof window as Twilio's (``herald.core.delivery_policy.absence_proven``). Infobip
documents no delay between accepting a message and logging it (UNCONFIRMED): Herald assumes it is
shorter than the validity. And the logs keep 48 hours: a search that begins more than
``LOGS_SEARCHABLE_FOR`` after the attempt began proves nothing, and is Unavailable, not NotFound.
A fetch's NotFound carries no search time, so it never proves absence on its own (as Twilio's 404).

With idempotent sending on for the account (``HERALD_INFOBIP_IDEMPOTENCY_GRACE_SECONDS``, the grace
Infobip Support configured), the adapter declares ``resubmit_dedupe_seconds``: "Retries with the same
messageId within the configured grace period are rejected during processing", so the machine sends
an attempt whose answer was lost again under the same id (``herald.core.resubmission``), and the
repeat's REJECTED_DUPLICATE_MESSAGE_ID (a report, or the logs) proves a message with the id exists.

Reasons carry the HTTP status, Infobip's error code and the names of violated properties, never the
number, the text or Infobip's ``violation`` and ``description`` sentences (they can quote either).
"""

from __future__ import annotations

import logging
import math
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx

from herald.core.capabilities import Capabilities
from herald.core.message import MessageReference
from herald.core.outcomes import (
    Accepted,
    Found,
    LookupOutcome,
    NotFound,
    ProviderStatus,
    ReferenceSearch,
    Rejected,
    Retryable,
    SubmitOutcome,
    Unavailable,
    Unknown,
    Unreachable,
)
from herald.providers.infobip_codes import DUPLICATE_MESSAGE_ID, Retry, error_code_of, is_retryable, map_status
from herald.providers.infobip_codes import status_of as known_status
from herald.providers.infobip_signature import CallbackKeys
from herald.providers.pacing import Pacer
from herald.providers.http_adapter import HttpAdapter, iso_time, json_object
from herald.providers.port import CancelOutcome, OutboundMessage
from herald.settings import InfobipSettings, InvalidSetting

logger = logging.getLogger(__name__)

SEND_PATH = "/sms/3/messages"
LOGS_PATH = "/sms/3/logs"
REPORTS_ROUTE = "/infobip/reports"
# Our ids: the attempt reference (att_<24 hex>_<n>). No comma: the logs' messageId filter splits on it.
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,200}$"
_MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)
# validityPeriod in SECONDS: Infobip clamps anything above 48 h to 48 h; below 1 s nothing is sendable.
VALIDITY_PERIOD_RANGE = (1, 48 * 3600)
# "The available logs are limited to those generated in the last 48 hours"; an hour less, so a
# message logged at the attempt's start is surely still there when the search reads.
LOGS_SEARCHABLE_FOR = timedelta(hours=47)
# One id names one message; a few more are read only to notice that the id was reused.
LOGS_LIMIT = 10
# A lookup waits this long at most for its slot under the logs' pace; beyond it, "not now".
MAX_SLOT_WAIT = 5.0
# After a 429 without Retry-After: the logs' limit is per minute.
LOGS_HOLD_SECONDS = 60.0
# How long a config fix plausibly takes; only a hint, the workflow's retry policy caps it.
CONFIG_RETRY_DELAY_SECONDS = 300.0
# A property path as Infobip names it (messages[0].destinations[0].to); anything else is not echoed.
_PROPERTY = re.compile(r"^[A-Za-z0-9_.\[\]-]{1,100}$")
_CODE_OR_NAME = re.compile(r"^[A-Z0-9_]{1,40}$")
MAX_NAMED_VIOLATIONS = 5

# Errors raised before any byte of the request could have left this process.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class InfobipAdapter(HttpAdapter):
    """One Infobip account's SMS API v3, as typed outcomes.

    Args:
        config: Base URL, API key, sender, limits and webhook keys: the settings' Infobip section.
            Refused (InvalidSetting) without a base URL, an API key or a webhook key.
        transport: Replaces the network, for tests (``httpx.MockTransport``); None builds a real
            transport with retries off.
    """

    # How the ledger names this provider (attempts.provider, receipt_inbox.provider).
    name: ClassVar[str] = "infobip"
    # What every Infobip account can do; an instance adds the dedupe its account's setting declares.
    capabilities: Capabilities = Capabilities(
        status_lookup=True,  # GET /sms/3/logs?messageId=
        lookup_by_reference=True,  # exact: the reference's attempt_ref is the messageId
        bounded_queue=True,  # validityPeriod: at most 48 h in Infobip's queue, then EXPIRED
        cancel_accepted=False,  # Infobip cancels scheduled messages only
        delivery_reports=True,  # pushed to /infobip/reports, callbackData-authenticated
    )

    def __init__(self, config: InfobipSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if config.base_url is None:
            raise InvalidSetting(
                "HERALD_INFOBIP_BASE_URL",
                "required for Infobip SMS (the account's base URL, https://xxxxx.api.infobip.com)",
            )
        if not config.api_key.get_secret_value():
            raise InvalidSetting("HERALD_INFOBIP_API_KEY", "required for Infobip SMS (an API key of the account)")
        keys = CallbackKeys.from_settings(config.webhook)
        if keys is None:
            raise InvalidSetting(
                "HERALD_INFOBIP_WEBHOOK_KEYS",
                "required for Infobip SMS: the key that signs each message's callbackData, by which the "
                "receipt server tells Infobip's reports from forgeries",
            )
        self._config = config
        self._keys = keys
        if config.idempotency_grace_seconds is not None:
            # Idempotent sending is on for the account: a repeated messageId within the grace is
            # "rejected during processing" and sends no copy, so an unknown submit may be resubmitted.
            grace = config.idempotency_grace_seconds
            self.capabilities = type(self).capabilities.model_copy(update={"resubmit_dedupe_seconds": grace})
        super().__init__(
            connect_timeout=config.connect_timeout, read_timeout=config.read_timeout,
            max_in_flight=config.max_in_flight, transport=transport, base_url=config.base_url,
            headers={"Authorization": f"App {config.api_key.get_secret_value()}", "Accept": "application/json"},
        )  # fmt: skip
        self._logs_pace = Pacer(config.logs_requests_per_minute / 60.0)

    def __repr__(self) -> str:
        return f"InfobipAdapter(base_url={self._config.base_url!r})"

    @property
    def route(self) -> str:
        """The account and sender attempts go through (no secrets)."""
        return f"{self._config.base_url} from {self._config.sender or 'the account default sender'}"

    @staticmethod
    def reports_url(receipts_url: str) -> str:
        """Where Infobip posts this account's delivery reports: the receipt server's Infobip route."""
        return f"{receipts_url.rstrip('/')}{REPORTS_ROUTE}"

    def request_body(self, outbound: OutboundMessage) -> dict[str, Any]:
        """The JSON body of the submit: one message, one destination named by the attempt reference.

        Raises:
            ValueError: the attempt reference is not a message id Infobip and the logs' filter take,
                or ``validity_seconds`` is outside 1 s to 48 h (a caller bug, never a network outcome).
        """
        message_id = outbound.attempt_ref
        if not _MESSAGE_ID.match(message_id):
            raise ValueError("attempt_ref: must be 1 to 200 letters, digits, '.', '_' or '-' (it is the messageId)")
        # Infobip's documented form is international digits without '+' (41793026727).
        destination = {"to": outbound.message.recipient.removeprefix("+"), "messageId": message_id}
        message: dict[str, Any] = {"destinations": [destination], "content": {"text": outbound.message.body}}
        if self._config.sender is not None:
            message["sender"] = self._config.sender
        if outbound.validity_seconds is not None:
            low, high = VALIDITY_PERIOD_RANGE
            if not low <= outbound.validity_seconds <= high:
                raise ValueError(f"validity_seconds: must be from {low} to {high} (Infobip keeps a message 48 h)")
            message["options"] = {"validityPeriod": {"amount": outbound.validity_seconds, "timeUnit": "SECONDS"}}
        if outbound.receipts_url:
            message["webhooks"] = {
                "delivery": {"url": self.reports_url(outbound.receipts_url)},
                "contentType": "application/json",
                "callbackData": self._keys.sign(message_id),
            }
        return {"messages": [message]}

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        """Hand one attempt to Infobip once; see the module docstring for what each answer means."""
        body = self.request_body(outbound)
        try:
            response = await self._request("POST", SEND_PATH, json=body)
        except _NEVER_SENT as error:
            return SubmitOutcome(
                result=Unreachable(reason=f"{type(error).__name__}: the request never left; not accepted")
            )
        except httpx.HTTPError as error:
            reason = f"{type(error).__name__} after the request may have been sent; acceptance unknown"
            return SubmitOutcome(result=Unknown(reason=reason))
        return SubmitOutcome(result=_classify_submit(response, outbound.attempt_ref))

    async def fetch(self, provider_id: str) -> LookupOutcome:
        """The message's current status by its id (Herald's own). NotFound here proves nothing alone."""
        result = await self._logged(provider_id)
        if isinstance(result, (Found, Unavailable)):
            return LookupOutcome(result=result)
        return LookupOutcome(result=NotFound())

    async def find_by_reference(self, reference: MessageReference) -> ReferenceSearch:
        """The attempt's message, by the id it was sent under (its attempt reference): Found or
        NotFound, never Candidates; Unavailable once the logs may have dropped it (48 h).

        Raises:
            ValueError: ``since`` has no time zone.
        """
        since = reference.since
        if since.tzinfo is None:
            raise ValueError("since must carry a time zone")
        searched_at = datetime.now(UTC)
        if searched_at - since >= LOGS_SEARCHABLE_FOR:
            return ReferenceSearch(
                result=Unavailable(reason="Infobip keeps logs for 48 h: a search this late cannot prove absence")
            )
        result = await self._logged(reference.attempt_ref)
        if result is None:
            bounded = self.capabilities.bounded_queue
            not_found = NotFound(searched_since=since, searched_at=searched_at, queue_bounded=bounded)
            return ReferenceSearch(result=not_found)
        return ReferenceSearch(result=result)

    async def cancel(self, provider_id: str) -> CancelOutcome:
        """Infobip cannot cancel a message it has accepted for sending now; nothing is asked."""
        return CancelOutcome(
            canceled=False,
            reason="Infobip cancels only scheduled messages and Herald schedules none; the message goes out "
            "or expires within its validity period",
        )

    async def _logged(self, message_id: str) -> Found | Unavailable | None:
        """The logs' entry for `message_id`: Found, None when it is not listed, or Unavailable."""
        if not _MESSAGE_ID.match(message_id):
            return Unavailable(reason="not a message id Herald sends; nothing was looked up")
        if await self._logs_pace.wait_at_most(MAX_SLOT_WAIT) is None:
            return Unavailable(
                reason=f"logs: the local pace ({self._config.logs_requests_per_minute}/min) has no slot now"
            )
        try:
            response = await self._request("GET", LOGS_PATH, params={"messageId": message_id, "limit": LOGS_LIMIT})
        except httpx.HTTPError as error:
            return Unavailable(reason=f"{type(error).__name__}: logs lookup failed")
        if response.status_code == 429:
            self._logs_pace.hold_for(_retry_after(response.headers.get("Retry-After")) or LOGS_HOLD_SECONDS)
            return Unavailable(reason="logs answered HTTP 429 (120 requests a minute); looked up again later")
        if response.status_code != 200:
            return Unavailable(reason=f"logs answered {_describe_error(response)}")
        payload = json_object(response)
        results = payload.get("results") if payload is not None else None
        if not isinstance(results, list):
            return Unavailable(reason="logs: HTTP 200 without a readable results list")
        # Only entries naming our id: a filter the server ignored must not lend us another's message.
        ours = [entry for entry in results if isinstance(entry, dict) and entry.get("messageId") == message_id]
        messages = [entry for entry in ours if _status_name(entry) != DUPLICATE_MESSAGE_ID]
        repeats = len(ours) - len(messages)
        if len(messages) > 1:
            return Unavailable(reason=f"logs: {len(messages)} messages carry this id (the id was reused)")
        if messages:
            return _found(messages[0], message_id)
        if repeats:
            # A request under this id was refused as a repeat: a message with the id exists.
            return Found(provider_id=message_id, status=ProviderStatus.QUEUED)
        return None


def _classify_submit(
    response: httpx.Response, message_id: str
) -> Accepted | Unreachable | Retryable | Rejected | Unknown:
    status = response.status_code
    if 200 <= status < 300:
        return _classify_accepted(response, message_id)
    if status == 429:
        # Infobip turned the account's traffic away for now: this message was not judged.
        return Unreachable(
            reason=f"{_describe_error(response)}: too many requests",
            delay_seconds=_retry_after(response.headers.get("Retry-After")),
            http_status=status,
        )
    if status in (401, 403, 404):
        # The key, its scopes (sms:message:send) or the base URL: a config fix lets the message go out.
        return Retryable(
            reason=f"{_describe_error(response)}: API key, its scopes or the base URL look misconfigured",
            delay_seconds=CONFIG_RETRY_DELAY_SECONDS,
            http_status=status,
        )
    if status == 400:
        named = _violated_properties(response)
        where = f"; violated: {', '.join(named)}" if named else ""
        return Rejected(reason=f"{_describe_error(response)}: Infobip refused the request{where}", http_status=status)
    if 400 <= status < 500:
        return Rejected(reason=f"{_describe_error(response)}: Infobip refused the request", http_status=status)
    # 5xx reached Infobip, and 1xx/3xx are not answers Infobip gives to a send: either way it may exist.
    return Unknown(reason=f"{_describe_error(response)}: the request reached Infobip; acceptance cannot be ruled out")


def _classify_accepted(response: httpx.Response, message_id: str) -> Accepted | Retryable | Rejected | Unknown:
    payload = json_object(response)
    messages = payload.get("messages") if payload is not None else None
    entries = [entry for entry in messages if isinstance(entry, dict)] if isinstance(messages, list) else []
    entry = next((e for e in entries if e.get("messageId") == message_id), entries[0] if len(entries) == 1 else None)
    provider_id = entry.get("messageId") if entry is not None else None
    label = _status_name(entry) if entry is not None else None
    if not isinstance(provider_id, str) or not provider_id or label is None:
        status = response.status_code
        return Unknown(reason=f"HTTP {status} without a readable message id and status; acceptance unknown")
    if provider_id != message_id:
        logger.warning("Infobip answered with a message id other than the one Herald set; tracking its own")
    mapped = map_status(label)
    if label != DUPLICATE_MESSAGE_ID and mapped is ProviderStatus.FAILED:
        # Refused before it could be sent: nothing went out under this id.
        reason = f"HTTP {response.status_code}, Infobip {label}: refused before sending"
        entry_class = known_status(label)
        if entry_class is not None and entry_class.retry is Retry.LATER:
            return Retryable(reason=reason, delay_seconds=CONFIG_RETRY_DELAY_SECONDS, http_status=response.status_code)
        return Rejected(reason=reason, http_status=response.status_code)
    # REJECTED_DUPLICATE_MESSAGE_ID maps to QUEUED: the id exists, so the attempt was accepted earlier.
    return Accepted(provider_id=provider_id, status=mapped, failure_retryable=is_retryable(label, None))


def _found(entry: dict[str, Any], message_id: str) -> Found | Unavailable:
    label = _status_name(entry)
    if label is None:
        return Unavailable(reason="logs: a listed message without a readable status")
    error = entry.get("error")
    error_id = _int_or_none(error.get("id")) if isinstance(error, dict) else None
    code = error_code_of(error_id)
    return Found(
        provider_id=message_id,
        status=map_status(label),
        error_code=code,
        failure_retryable=is_retryable(label, code),
        provider_updated_at=iso_time(entry.get("doneAt")),
    )


def _status_name(entry: dict[str, Any]) -> str | None:
    """The status's name, or its group's name when Infobip sent no name; None when neither is readable."""
    status = entry.get("status")
    if not isinstance(status, dict):
        return None
    for key in ("name", "groupName"):
        value = status.get(key)
        if isinstance(value, str) and _CODE_OR_NAME.match(value):
            return value
    return None


def _violated_properties(response: httpx.Response) -> list[str]:
    """The property paths a 400 names (v3 ``violations``, or the legacy ``validationErrors`` keys);
    only names of a property's shape, never the violation sentence (it can quote the value)."""
    payload = json_object(response) or {}
    names: list[Any] = []
    violations = payload.get("violations")
    if isinstance(violations, list):
        names = [v.get("property") for v in violations if isinstance(v, dict)]
    legacy = payload.get("requestError")
    if isinstance(legacy, dict) and isinstance(legacy.get("serviceException"), dict):
        errors = legacy["serviceException"].get("validationErrors")
        if isinstance(errors, dict):
            names += list(errors)
    return [name for name in names if isinstance(name, str) and _PROPERTY.match(name)][:MAX_NAMED_VIOLATIONS]


def _describe_error(response: httpx.Response) -> str:
    """``HTTP 400, Infobip E400`` (v3 errorCode, or the legacy serviceException messageId): never the text."""
    payload = json_object(response) or {}
    code = payload.get("errorCode")
    legacy = payload.get("requestError")
    if code is None and isinstance(legacy, dict) and isinstance(legacy.get("serviceException"), dict):
        code = legacy["serviceException"].get("messageId")
    shown = f", Infobip {code}" if isinstance(code, str) and _CODE_OR_NAME.match(code) else ""
    return f"HTTP {response.status_code}{shown}"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP-date); None when absent or unreadable.
    Infobip documents no Retry-After (UNCONFIRMED); a proxy in front of it may send one."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
