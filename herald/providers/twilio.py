"""Twilio Programmable Messaging adapter (REST API 2010-04-01) over httpx.

The adapter makes exactly one HTTP request per call and reports what it saw as
a typed outcome; it never retries (retries belong to Temporal) and never raises
for anything the network or Twilio does. How each thing that can happen to a
request becomes an outcome:

    submit: POST /2010-04-01/Accounts/{AccountSid}/Messages.json
      ├── a response arrived
      │     ├── 2xx with a sid ............................. Accepted
      │     ├── 2xx without a readable sid ................. Unknown
      │     ├── 429 ........................................ Unreachable (delay from Retry-After)
      │     ├── 4xx, code in twilio_codes.ERROR_CODES
      │     │     ├── permanent ............................ Rejected
      │     │     └── retryable, config .................... Retryable
      │     ├── 4xx, code unknown or absent
      │     │     ├── 401, 403, 404 ........................ Retryable (config)
      │     │     └── any other 4xx ........................ Rejected
      │     └── 5xx, 3xx, 1xx .............................. Unknown (it reached Twilio)
      └── httpx.HTTPError, no response
            ├── TransportError
            │     ├── TimeoutException
            │     │     ├── ConnectTimeout ................. Unreachable (never left)
            │     │     ├── PoolTimeout .................... Unreachable (never left)
            │     │     ├── ReadTimeout .................... Unknown
            │     │     └── WriteTimeout ................... Unknown
            │     ├── NetworkError
            │     │     ├── ConnectError ................... Unreachable (never left)
            │     │     ├── ReadError ...................... Unknown
            │     │     ├── WriteError ..................... Unknown
            │     │     └── CloseError ..................... Unknown
            │     ├── ProtocolError (Remote, Local) ........ Unknown
            │     └── ProxyError, UnsupportedProtocol ...... Unknown
            └── DecodingError, TooManyRedirects ............ Unknown

    fetch: GET .../Messages/{Sid}.json
      ├── 200 with a sid ............................... Found
      ├── 404 .......................................... NotFound
      └── anything else, any httpx.HTTPError ........... Unavailable

    find_by_reference: GET .../Messages.json?To=..&From=.. (newest first, no date filter)
      ├── one or more matching messages, in any state ... Candidates (queued, accepted, scheduled,
      │                                                   sending count too); which one, if any, is
      │                                                   the attempt's is the ledger's call: the
      │                                                   same body to the same number from another
      │                                                   intent fits as well (herald.core.claims)
      ├── none, read down to a message sent before
      │   the attempt (or to the end of the list) ...... NotFound(searched_at, queue_bounded)
      └── a page failed, a next page outside this
          account's Messages list, too many pages,
          a fitting message without a readable sid or
          creation date ................................ Unavailable

    cancel: POST .../Messages/{Sid}.json  Status=canceled
      ├── 200 with status canceled ..................... canceled
      └── anything else ................................ not canceled, with the reason

Everything not in the "never left" branch is Unknown on purpose: once the bytes
may have reached Twilio, only a lookup can tell whether the message exists.
"Never left" and 429 are Unreachable: provably nothing reached Twilio's queue, so
the workflow retries them until the intent's deadline without spending the retry
budget that bounds Twilio's refusals of the message itself (a 2-minute outage is a
2-minute delay, never a permanent failure).

No reason string ever carries the recipient's number or the body: reasons name
the HTTP status, the Twilio code and the exception class, and never echo
Twilio's own error ``message`` (it can quote the number).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Literal

import httpx

from herald.core.capabilities import Capabilities
from herald.core.message import MessageReference
from herald.core.outcomes import (
    Accepted,
    Candidate,
    Candidates,
    Found,
    LookupOutcome,
    NotFound,
    ReferenceSearch,
    Rejected,
    Retryable,
    SubmitOutcome,
    Unavailable,
    Unknown,
    Unreachable,
)
from herald.providers.http_adapter import HttpAdapter, json_object
from herald.providers.port import CancelOutcome, OutboundMessage
from herald.providers.twilio_codes import (
    CONFIG_RETRY_DELAY_SECONDS,
    ErrorClass,
    classify_error,
    is_retryable,
    map_status,
)
from herald.settings import InvalidSetting, TwilioSettings

logger = logging.getLogger(__name__)

API_VERSION = "2010-04-01"
# SID shapes as the spec declares them; checking them keeps anything but a SID out of the URL path
# (the account's and the Messaging Service's are checked with the settings, herald/settings/rules.py).
MESSAGE_SID_PATTERN = r"^(SM|MM)[0-9a-fA-F]{32}$"
_MESSAGE_SID = re.compile(MESSAGE_SID_PATTERN)

# Clock skew allowed between our `since` and Twilio's `date_created`.
MATCH_SKEW = timedelta(seconds=2)
LIST_PAGE_SIZE = 100
# The search ends at the first message sent before the attempt, a bound in time; this bound in
# pages only stops a runaway list (a next_page_uri that never ends). Reaching it is Unavailable,
# never NotFound: 20,000 messages to one recipient since one attempt began is not a search we finished.
MAX_LIST_PAGES = 200
# ValidityPeriod as Twilio's API accepts it: whole seconds from 1 to 36,000 (10 h, its default).
VALIDITY_PERIOD_RANGE = (1, 36_000)

# Errors raised before any byte of the request could have left this process.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class TwilioAdapter(HttpAdapter):
    """One Twilio account's Messages API, as typed outcomes.

    Args:
        config: Account, sender and limits: the settings' Twilio section. Refused (InvalidSetting)
            without an Account SID or a sender.
        transport: Replaces the network, for tests (``httpx.MockTransport``);
            None builds a real transport with retries off.
    """

    # How the ledger names this provider (attempts.provider, receipt_inbox.provider).
    name: ClassVar[str] = "twilio"
    capabilities: ClassVar[Capabilities] = Capabilities(
        status_lookup=True,
        lookup_by_reference=True,  # by recipient, sender, body hash and creation time; see find_by_reference
        bounded_queue=True,  # ValidityPeriod: at most 36,000 s in Twilio's queue, then failed (30036)
        cancel_accepted=False,  # Twilio cancels only scheduled messages
    )

    def __init__(self, config: TwilioSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not config.account_sid:
            raise InvalidSetting("HERALD_TWILIO_ACCOUNT_SID", "required for SMS (Twilio's Account SID, AC...)")
        if config.from_number is None and config.messaging_service_sid is None:
            raise InvalidSetting(
                "HERALD_TWILIO_FROM", "required for SMS unless HERALD_TWILIO_MESSAGING_SERVICE_SID is set (one sender)"
            )
        self._config = config
        self._account_url = f"{config.api_base}/{API_VERSION}/Accounts/{config.account_sid}"
        self._messages_url = f"{self._account_url}/Messages.json"
        super().__init__(
            connect_timeout=config.connect_timeout, read_timeout=config.read_timeout,
            max_in_flight=config.max_in_flight, transport=transport,
            auth=httpx.BasicAuth(config.account_sid, config.auth_token.get_secret_value()),
            headers={"Accept": "application/json"},
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"TwilioAdapter(api_base={self._config.api_base!r}, account_sid={self._config.account_sid!r})"

    @property
    def route(self) -> str:
        """The account and sender attempts go through (no secrets)."""
        sender = self._config.messaging_service_sid or self._config.from_number or "no sender"
        return f"{self._config.api_base}/Accounts/{self._config.account_sid} from {sender}"

    def status_callback_url(self, receipts_url: str, attempt_ref: str) -> str:
        """The exact URL Twilio calls (and signs) for this attempt's reports: our reference rides in it."""
        return f"{receipts_url.rstrip('/')}/twilio/status?attempt={attempt_ref}"

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        """The port's submit: one SMS, its reports sent to the receipt server's Twilio route."""
        url = outbound.receipts_url
        callback = self.status_callback_url(url, outbound.attempt_ref) if url else None
        message = outbound.message
        return await self.send_sms(
            to=message.recipient, body=message.body, status_callback=callback, validity_seconds=outbound.validity_seconds
        )

    async def send_sms(
        self, *, to: str, body: str, status_callback: str | None, validity_seconds: int | None = None
    ) -> SubmitOutcome:
        """Ask Twilio to send one message; one request, never retried.

        Args:
            to: The recipient, E.164.
            body: The exact text to send.
            status_callback: The URL Twilio posts status changes to (it carries
                our attempt reference); None sends no StatusCallback.
            validity_seconds: ``ValidityPeriod``: the longest the message may wait in
                Twilio's outgoing queue before Twilio drops it (``failed``, 30036).
                It bounds how long an accepted message can stay unsent, which is what
                lets a later "not found" prove absence. None sends none (Twilio: 10 h).

        Returns:
            Accepted, Retryable, Rejected or Unknown; see the module docstring.

        Raises:
            ValueError: ``validity_seconds`` is outside the 1 to 36,000 s Twilio accepts
                (raised before any request: a caller bug, never a network outcome).
        """
        form = {"To": to, "Body": body}
        if validity_seconds is not None:
            low, high = VALIDITY_PERIOD_RANGE
            if not low <= validity_seconds <= high:
                raise ValueError(f"validity_seconds must be from {low} to {high}")
            form["ValidityPeriod"] = str(validity_seconds)
        if self._config.messaging_service_sid is not None:
            form["MessagingServiceSid"] = self._config.messaging_service_sid
        else:
            form["From"] = self._config.from_number or ""
        if status_callback is not None:
            form["StatusCallback"] = status_callback
        try:
            response = await self._request("POST", self._messages_url, data=form)
        except _NEVER_SENT as error:
            return SubmitOutcome(
                result=Unreachable(reason=f"{type(error).__name__}: the request never left; not accepted")
            )
        except httpx.HTTPError as error:
            reason = f"{type(error).__name__} after the request may have been sent; acceptance unknown"
            return SubmitOutcome(result=Unknown(reason=reason))
        return SubmitOutcome(result=_classify_submit(response))

    async def fetch(self, provider_id: str) -> LookupOutcome:
        """Read one message's current status by its Twilio SID.

        Args:
            provider_id: The message SID Twilio returned (``SM…`` or ``MM…``).

        Returns:
            Found with the mapped status; NotFound on 404; Unavailable for any
            other answer or failure, which says nothing about the message.
        """
        if not _MESSAGE_SID.match(provider_id):
            return LookupOutcome(result=Unavailable(reason="not a Twilio message SID; nothing was looked up"))
        try:
            response = await self._request("GET", f"{self._account_url}/Messages/{provider_id}.json")
        except httpx.HTTPError as error:
            return LookupOutcome(result=Unavailable(reason=f"{type(error).__name__}: lookup failed"))
        if response.status_code == 404:
            return LookupOutcome(result=NotFound())
        if response.status_code != 200:
            return LookupOutcome(result=Unavailable(reason=f"lookup answered {_describe_error(response)}"))
        message = json_object(response)
        found = _found(message) if message is not None else None
        if found is None:
            return LookupOutcome(result=Unavailable(reason="HTTP 200 without a readable message"))
        return LookupOutcome(result=found)

    async def find_by_reference(self, reference: MessageReference) -> ReferenceSearch:
        """Every message that fits an attempt whose provider id never came back.

        Twilio takes no reference of ours, so this lists the messages to ``to`` from our sender and
        keeps the outbound ones whose body hashes to ``content_sha256`` and whose ``date_created``
        lies from ``since`` to ``created_by`` (2 s of skew either side). A fit is not proof: the same
        text to the same number from another intent fits too, so the ledger decides which, if any,
        the attempt may claim (``herald.core.claims``).

        No ``DateSent`` filter (it would hide every message still in Twilio's queue). Pages are read
        until a listed message was *sent* before ``since`` less the skew (all after it are older,
        whether the list is ordered by ``date_sent`` or ``date_created``); an unsent message never
        ends the search. NotFound proves absence only once the queue bound has passed for anything
        the attempt could have created (``herald.core.delivery_policy.absence_proven``).

        Returns:
            Candidates for one or more fits; NotFound when the list was read down to the attempt's
            start (or its end) without one; Unavailable when a page could not be read, a next page
            points outside this account's Messages list, a fit has no readable sid or creation
            date, or ``MAX_LIST_PAGES`` pages did not reach the attempt's start.

        Raises:
            ValueError: ``since`` has no time zone.
        """
        to, content_sha256, since = reference.recipient, reference.content_sha256, reference.since
        if since.tzinfo is None:
            raise ValueError("since must carry a time zone")
        searched_at = datetime.now(UTC)
        earliest = since - MATCH_SKEW
        latest = reference.created_by + MATCH_SKEW
        url = self._messages_url
        params: dict[str, str | int] | None = {"To": to, "PageSize": LIST_PAGE_SIZE}
        if self._config.from_number is not None:
            params["From"] = self._config.from_number
        matches: list[Candidate] = []
        for _ in range(MAX_LIST_PAGES):
            try:
                response = await self._request("GET", url, params=params)
            except httpx.HTTPError as error:
                return _search_unavailable(f"{type(error).__name__}: listing messages failed")
            if response.status_code != 200:
                return _search_unavailable(f"listing messages answered {_describe_error(response)}")
            page = json_object(response)
            messages = page.get("messages") if page is not None else None
            if page is None or not isinstance(messages, list):
                return _search_unavailable("HTTP 200 without a readable message list")
            reached_older = False
            for message in messages:
                created = self._matches(message, to=to, content_sha256=content_sha256)
                if created is None:
                    # Same recipient and body, but no readable creation time: cannot be ruled in or out.
                    return _search_unavailable("a candidate message has no readable date_created")
                if created is not False and earliest <= created <= latest:
                    found = _found(message)
                    if found is None:
                        return _search_unavailable("a matching message has no readable sid")
                    matches.append(Candidate(found=found, created_at=created))
                reached_older = reached_older or _sent_before(message, earliest)
            next_page_uri = page.get("next_page_uri")
            if reached_older or next_page_uri is None or next_page_uri == "":
                break
            next_url = self._next_page_url(next_page_uri) if isinstance(next_page_uri, str) else None
            if next_url is None:
                return _search_unavailable("next_page_uri points outside this account's Messages list")
            url, params = next_url, None  # the next-page URI carries every filter itself
        else:
            return _search_unavailable(f"search incomplete: {MAX_LIST_PAGES} pages did not reach the attempt's start")
        bounded = self.capabilities.bounded_queue
        if not matches:
            return ReferenceSearch(result=NotFound(searched_since=since, searched_at=searched_at, queue_bounded=bounded))
        return ReferenceSearch(
            result=Candidates(messages=matches, searched_since=since, searched_at=searched_at, queue_bounded=bounded)
        )

    def _matches(self, message: Any, *, to: str, content_sha256: str) -> datetime | Literal[False] | None:
        """Its creation time when it is ours but for the time; False when it is not; None when it is
        ours but for an unreadable creation date."""
        if not isinstance(message, dict):
            return False
        body = message.get("body")
        if not isinstance(body, str) or hashlib.sha256(body.encode("utf-8")).hexdigest() != content_sha256:
            return False
        if message.get("to") not in (None, to):
            return False
        direction = message.get("direction")
        if not isinstance(direction, str) or not direction.startswith("outbound"):
            return False
        # Only our sender's messages: the same body from another number or service is not our attempt.
        if self._config.from_number is not None:
            # A sender number is fixed at creation; `from` is null only while a service still picks one.
            if message.get("from") not in (None, self._config.from_number):
                return False
        elif message.get("messaging_service_sid") not in (None, self._config.messaging_service_sid):
            return False
        return _rfc2822(message.get("date_created"))

    async def cancel(self, provider_id: str) -> CancelOutcome:
        """Ask Twilio to cancel a message it has not sent yet.

        Twilio cancels only scheduled messages; for anything else it answers
        4xx and the message goes (or went) out regardless.

        Args:
            provider_id: The message SID Twilio returned.

        Returns:
            canceled=True only when Twilio answered that the message is now
            canceled; otherwise False with the reason.
        """
        if not _MESSAGE_SID.match(provider_id):
            return CancelOutcome(canceled=False, reason="not a Twilio message SID; nothing was asked")
        try:
            response = await self._request(
                "POST", f"{self._account_url}/Messages/{provider_id}.json", data={"Status": "canceled"}
            )
        except _NEVER_SENT as error:
            return CancelOutcome(canceled=False, reason=f"{type(error).__name__}: the request never left; not canceled")
        except httpx.HTTPError as error:
            return CancelOutcome(canceled=False, reason=f"{type(error).__name__}: whether Twilio canceled is unknown")
        status = response.status_code
        if status == 200:
            message = json_object(response)
            label = message.get("status") if message is not None else None
            if label == "canceled":
                return CancelOutcome(canceled=True, reason="Twilio canceled the message")
            return CancelOutcome(canceled=False, reason=f"HTTP 200 but the message is {map_status(label).value}")
        if 400 <= status < 500:
            return CancelOutcome(
                canceled=False,
                reason=(
                    f"Twilio refused to cancel ({_describe_error(response)}); "
                    "only scheduled messages can be canceled"
                ),
            )
        return CancelOutcome(canceled=False, reason=f"{_describe_error(response)}: whether Twilio canceled is unknown")

    def _next_page_url(self, next_page_uri: str) -> str | None:
        """The absolute URL of a next page, or None unless it is this account's Messages list.

        Our credentials go with every request, so a next page may only point back at the very
        list we asked for: the same API base, this account, the Messages list; not another host,
        not another account's path, not another resource.
        """
        if next_page_uri.startswith("/") and not next_page_uri.startswith("//"):
            candidate = f"{self._config.api_base}{next_page_uri}"
        else:
            candidate = next_page_uri
        path, query = candidate.partition("?")[::2]
        if path != self._messages_url or "#" in query:
            return None
        return candidate


def _classify_submit(response: httpx.Response) -> Accepted | Unreachable | Retryable | Rejected | Unknown:
    status = response.status_code
    payload = json_object(response)
    if 200 <= status < 300:
        sid = payload.get("sid") if payload is not None else None
        if isinstance(sid, str) and sid:
            code = _int_or_none(payload.get("error_code"))
            return Accepted(
                provider_id=sid, status=map_status(_label(payload)), error_code=code, failure_retryable=is_retryable(code)
            )
        return Unknown(reason=f"HTTP {status} without a message sid; acceptance unknown")
    code = _int_or_none(payload.get("code")) if payload is not None else None
    if status == 429:
        code = code or 20429
        # Twilio turns the account's traffic away for now: this message was not judged, so the
        # wait spends no retry budget.
        return Unreachable(
            reason=f"HTTP 429, Twilio {code}: too many requests",
            delay_seconds=_retry_after(response.headers.get("Retry-After"), datetime.now(UTC)),
            error_code=code,
            http_status=status,
        )
    if 400 <= status < 500:
        return _classify_client_error(response, status, code)
    # 5xx reached Twilio, and 1xx/3xx are not answers Twilio gives to a create: either way it may exist.
    return Unknown(reason=f"{_describe_error(response)}: the request reached Twilio; acceptance cannot be ruled out")


def _classify_client_error(response: httpx.Response, status: int, code: int | None) -> Retryable | Rejected:
    entry = classify_error(code)
    retry_after = _retry_after(response.headers.get("Retry-After"), datetime.now(UTC))
    if entry is not None:
        reason = f"HTTP {status}, Twilio {code}: {entry.reason}"
        if entry.classification is ErrorClass.PERMANENT:
            return Rejected(reason=reason, error_code=code, http_status=status)
        delay = retry_after if retry_after is not None else entry.delay_seconds
        return Retryable(reason=reason, delay_seconds=delay, error_code=code, http_status=status)
    if status in (401, 403, 404):
        # Credentials, permissions or the account path: a config fix lets the message go out.
        return Retryable(
            reason=f"{_describe_error(response)}: account, credentials or API base look misconfigured",
            delay_seconds=retry_after if retry_after is not None else CONFIG_RETRY_DELAY_SECONDS,
            error_code=code,
            http_status=status,
        )
    if code is not None:
        # The API refused this request outright; a human should add the code to the table.
        logger.warning("Twilio error code %s (HTTP %s) is not in the code table; reported as rejected", code, status)
        return Rejected(
            reason=f"HTTP {status}, Twilio {code}: not in Herald's code table; the API refused the request",
            error_code=code,
            http_status=status,
        )
    return Rejected(reason=f"HTTP {status} without a Twilio error code", http_status=status)


def _search_unavailable(reason: str) -> ReferenceSearch:
    return ReferenceSearch(result=Unavailable(reason=reason))


def _sent_before(message: Any, earliest: datetime) -> bool:
    """Whether a listed message left the queue before `earliest` (so it, and all after it, are older)."""
    if not isinstance(message, dict):
        return False
    sent = _rfc2822(message.get("date_sent"))
    return sent is not None and sent < earliest


def _found(message: dict[str, Any]) -> Found | None:
    sid = message.get("sid")
    if not isinstance(sid, str) or not sid:
        return None
    code = _int_or_none(message.get("error_code"))
    return Found(
        provider_id=sid,
        status=map_status(_label(message)),
        error_code=code,
        failure_retryable=is_retryable(code),
        provider_updated_at=_rfc2822(message.get("date_updated")),
    )


def _describe_error(response: httpx.Response) -> str:
    """``HTTP 503`` or ``HTTP 400, Twilio 21211``: status and code only, never Twilio's message text."""
    payload = json_object(response)
    code = _int_or_none(payload.get("code")) if payload is not None else None
    return f"HTTP {response.status_code}" + (f", Twilio {code}" if code is not None else "")


def _label(message: dict[str, Any]) -> str | None:
    label = message.get("status")
    return label if isinstance(label, str) else None


def _int_or_none(value: Any) -> int | None:
    # Twilio sends codes as integers; some proxies and old endpoints send digit strings.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _rfc2822(value: Any) -> datetime | None:
    """Twilio's ``date_*`` fields: ``Thu, 24 Aug 2023 05:01:45 +0000``; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    # RFC 2822's "-0000" means "zone unknown" and parses naive; Twilio means UTC by it.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date; None if unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        when = _rfc2822(value)
        if when is None:
            return None
        seconds = (when - now).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
