"""Twilio Programmable Messaging adapter (REST API 2010-04-01) over httpx.

The adapter makes exactly one HTTP request per call and reports what it saw as
a typed outcome; it never retries (retries belong to Temporal) and never raises
for anything the network or Twilio does. How each thing that can happen to a
request becomes an outcome:

    submit: POST /2010-04-01/Accounts/{AccountSid}/Messages.json
      ├── a response arrived
      │     ├── 2xx with a sid ............................. Accepted
      │     ├── 2xx without a readable sid ................. Unknown
      │     ├── 429 ........................................ Retryable (delay from Retry-After)
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
            │     │     ├── ConnectTimeout ................. Retryable (never left)
            │     │     ├── PoolTimeout .................... Retryable (never left)
            │     │     ├── ReadTimeout .................... Unknown
            │     │     └── WriteTimeout ................... Unknown
            │     ├── NetworkError
            │     │     ├── ConnectError ................... Retryable (never left)
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

    find_by_reference: GET .../Messages.json?To=..&DateSent>=.. (up to 5 pages)
      ├── exactly one matching message ................. Found
      ├── none, every page read ........................ NotFound
      ├── two or more .................................. Unavailable ("ambiguous: N messages match")
      └── a page failed, more pages than allowed ....... Unavailable

    cancel: POST .../Messages/{Sid}.json  Status=canceled
      ├── 200 with status canceled ..................... canceled
      └── anything else ................................ not canceled, with the reason

Everything not in the "never left" branch is Unknown on purpose: once the bytes
may have reached Twilio, only a lookup can tell whether the message exists.

No reason string ever carries the recipient's number or the body: reasons name
the HTTP status, the Twilio code and the exception class, and never echo
Twilio's own error ``message`` (it can quote the number).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, ClassVar

import httpx
from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from herald.outcomes import (
    Accepted,
    Found,
    Frozen,
    LookupOutcome,
    NotFound,
    Rejected,
    Retryable,
    SubmitOutcome,
    Unavailable,
    Unknown,
)
from herald.providers.twilio_codes import (
    CONFIG_RETRY_DELAY_SECONDS,
    ErrorClass,
    classify_error,
    map_status,
)

logger = logging.getLogger(__name__)

API_VERSION = "2010-04-01"
# SID shapes as the spec declares them; checking them keeps anything but a SID out of the URL path.
ACCOUNT_SID_PATTERN = r"^AC[0-9a-fA-F]{32}$"
MESSAGING_SERVICE_SID_PATTERN = r"^MG[0-9a-fA-F]{32}$"
MESSAGE_SID_PATTERN = r"^(SM|MM)[0-9a-fA-F]{32}$"
_MESSAGE_SID = re.compile(MESSAGE_SID_PATTERN)

# Clock skew allowed between our `since` and Twilio's `date_created`.
MATCH_SKEW = timedelta(seconds=2)
# One recipient rarely gets hundreds of messages in two days; past this we say "unavailable", not "absent".
MAX_LIST_PAGES = 5
LIST_PAGE_SIZE = 100

# Errors raised before any byte of the request could have left this process.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class TwilioConfig(Frozen):
    """Where and as whom the adapter talks to Twilio.

    ``auth_token`` is a ``SecretStr``: it shows as ``**********`` in reprs,
    ``str()`` and dumps, and validation errors hide their input so a bad
    config cannot print it either.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    api_base: str = "https://api.twilio.com"
    account_sid: str = Field(pattern=ACCOUNT_SID_PATTERN)
    auth_token: SecretStr
    from_number: str | None = None
    messaging_service_sid: str | None = Field(default=None, pattern=MESSAGING_SERVICE_SID_PATTERN)
    connect_timeout: float = Field(default=3.0, gt=0)
    read_timeout: float = Field(default=10.0, gt=0)
    # httpx slows sharply past ~20 requests in flight on one client.
    max_in_flight: int = Field(default=16, ge=1)

    @field_validator("api_base")
    @classmethod
    def _api_base_is_http(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _exactly_one_sender(self) -> TwilioConfig:
        if (self.from_number is None) == (self.messaging_service_sid is None):
            raise ValueError("set exactly one of from_number and messaging_service_sid")
        return self


class Capabilities(Frozen):
    """What a provider can do, so the workflow picks a strategy without knowing the provider."""

    idempotent_submit: bool  # a repeated submit cannot create a second message
    reference_in_reports: bool  # delivery reports carry our attempt reference
    status_lookup: bool  # a message can be fetched by its provider id
    lookup_by_reference: bool  # a message can be found without its provider id
    cancel_accepted: bool  # an accepted (not just scheduled) message can be canceled


class CancelOutcome(Frozen):
    canceled: bool
    reason: str


class TwilioAdapter:
    """One Twilio account's Messages API, as typed outcomes.

    Args:
        config: Account, sender and limits.
        transport: Replaces the network, for tests (``httpx.MockTransport``);
            None builds a real transport with retries off.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(
        idempotent_submit=False,  # Twilio has no idempotency key on message creation
        reference_in_reports=True,  # our StatusCallback URL carries the attempt reference
        status_lookup=True,
        lookup_by_reference=True,  # by recipient, body hash and time; see find_by_reference
        cancel_accepted=False,  # Twilio cancels only scheduled messages
    )

    def __init__(self, config: TwilioConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._config = config
        self._account_url = f"{config.api_base}/{API_VERSION}/Accounts/{config.account_sid}"
        if transport is None:
            # retries=0 is httpx's default too; spelled out because retries belong to Temporal, not here.
            transport = httpx.AsyncHTTPTransport(
                retries=0,
                limits=httpx.Limits(
                    max_connections=config.max_in_flight, max_keepalive_connections=config.max_in_flight
                ),
            )
        self._client = httpx.AsyncClient(
            transport=transport,
            auth=httpx.BasicAuth(config.account_sid, config.auth_token.get_secret_value()),
            timeout=httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.read_timeout,
                pool=config.connect_timeout,
            ),
            follow_redirects=False,
            headers={"Accept": "application/json"},
        )
        self._slots = asyncio.Semaphore(config.max_in_flight)

    def __repr__(self) -> str:
        return f"TwilioAdapter(api_base={self._config.api_base!r}, account_sid={self._config.account_sid!r})"

    async def __aenter__(self) -> TwilioAdapter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; the adapter is unusable afterwards."""
        await self._client.aclose()

    async def submit(self, *, to: str, body: str, status_callback: str | None) -> SubmitOutcome:
        """Ask Twilio to send one message; one request, never retried.

        Args:
            to: The recipient, E.164.
            body: The exact text to send.
            status_callback: The URL Twilio posts status changes to (it carries
                our attempt reference); None sends no StatusCallback.

        Returns:
            Accepted, Retryable, Rejected or Unknown; see the module docstring.
        """
        form = {"To": to, "Body": body}
        if self._config.messaging_service_sid is not None:
            form["MessagingServiceSid"] = self._config.messaging_service_sid
        else:
            form["From"] = self._config.from_number or ""
        if status_callback is not None:
            form["StatusCallback"] = status_callback
        try:
            response = await self._request("POST", f"{self._account_url}/Messages.json", data=form)
        except _NEVER_SENT as error:
            return SubmitOutcome(
                result=Retryable(reason=f"{type(error).__name__}: the request never left; not accepted")
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
        message = _json_object(response)
        found = _found(message) if message is not None else None
        if found is None:
            return LookupOutcome(result=Unavailable(reason="HTTP 200 without a readable message"))
        return LookupOutcome(result=found)

    async def find_by_reference(self, *, to: str, content_sha256: str, since: datetime) -> LookupOutcome:
        """Find the message an attempt created when no provider id came back.

        Twilio has no client reference we can search on, so this lists the
        messages to ``to`` and matches those whose body hashes to
        ``content_sha256``, whose direction is outbound and whose
        ``date_created`` is at or after ``since`` (less 2 s of clock skew).

        The list is filtered server-side with ``DateSent>`` set to the UTC day
        *before* ``since``: the spec takes GMT dates as ``YYYY-MM-DD``, and a
        whole spare day covers both an inclusive and an exclusive reading of
        the bound and any time zone slip; the exact cut is made client-side.
        Pages are followed through ``next_page_uri``, at most 5.

        A message Twilio has not sent yet (``queued``, ``accepted``,
        ``scheduled``) has a null ``date_sent`` and so does not appear under a
        ``DateSent`` filter: NotFound here does not prove absence for long,
        which is why the workflow keeps polling before it concludes anything.
        Likewise a body Twilio changed or redacted will not match.

        Args:
            to: The recipient, E.164.
            content_sha256: Hex SHA-256 of the UTF-8 body that was submitted.
            since: When the attempt started; must carry a time zone.

        Returns:
            Found for exactly one match; NotFound(searched_since=since) when
            every page was read and nothing matched; Unavailable when more
            than one message matches (we never guess), a page could not be
            read, or there were more pages than we follow.

        Raises:
            ValueError: ``since`` has no time zone.
        """
        if since.tzinfo is None:
            raise ValueError("since must carry a time zone")
        earliest = since - MATCH_SKEW
        day_before = (earliest.astimezone(UTC) - timedelta(days=1)).date()
        url = f"{self._account_url}/Messages.json"
        params: dict[str, str | int] | None = {
            "To": to,
            "DateSent>": day_before.isoformat(),
            "PageSize": LIST_PAGE_SIZE,
        }
        matches: list[dict[str, Any]] = []
        for _ in range(MAX_LIST_PAGES):
            try:
                response = await self._request("GET", url, params=params)
            except httpx.HTTPError as error:
                return LookupOutcome(result=Unavailable(reason=f"{type(error).__name__}: listing messages failed"))
            if response.status_code != 200:
                reason = f"listing messages answered {_describe_error(response)}"
                return LookupOutcome(result=Unavailable(reason=reason))
            page = _json_object(response)
            messages = page.get("messages") if page is not None else None
            if not isinstance(messages, list):
                return LookupOutcome(result=Unavailable(reason="HTTP 200 without a readable message list"))
            for message in messages:
                verdict = _matches(message, to=to, content_sha256=content_sha256, earliest=earliest)
                if verdict is None:
                    # Same recipient and body, but no readable creation time: cannot be ruled in or out.
                    return LookupOutcome(result=Unavailable(reason="a candidate message has no readable date_created"))
                if verdict:
                    matches.append(message)
            if len(matches) > 1:
                return LookupOutcome(result=Unavailable(reason=f"ambiguous: {len(matches)} messages match"))
            next_page_uri = page.get("next_page_uri") if page is not None else None
            if next_page_uri is None or next_page_uri == "":
                break
            next_url = self._next_page_url(next_page_uri) if isinstance(next_page_uri, str) else None
            if next_url is None:
                return LookupOutcome(result=Unavailable(reason="next_page_uri points outside the Twilio API base"))
            url, params = next_url, None  # the next-page URI carries every filter itself
        else:
            return LookupOutcome(
                result=Unavailable(reason=f"search incomplete: more than {MAX_LIST_PAGES} pages of messages")
            )
        if not matches:
            return LookupOutcome(result=NotFound(searched_since=since))
        found = _found(matches[0])
        if found is None:
            return LookupOutcome(result=Unavailable(reason="the matching message has no readable sid"))
        return LookupOutcome(result=found)

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
            message = _json_object(response)
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

    async def _request(
        self,
        method: str,
        url: str,
        *,
        data: dict[str, str] | None = None,
        params: dict[str, str | int] | None = None,
    ) -> httpx.Response:
        # The whole exchange, body included, happens inside the slot, so the cap is on real requests in flight.
        async with self._slots:
            return await self._client.request(method, url, data=data, params=params)

    def _next_page_url(self, next_page_uri: str) -> str | None:
        # Our credentials go with every request, so a next page may only point back at the same API.
        if next_page_uri.startswith("/") and not next_page_uri.startswith("//"):
            return f"{self._config.api_base}{next_page_uri}"
        if next_page_uri.startswith(f"{self._config.api_base}/"):
            return next_page_uri
        return None


def _classify_submit(response: httpx.Response) -> Accepted | Retryable | Rejected | Unknown:
    status = response.status_code
    payload = _json_object(response)
    if 200 <= status < 300:
        sid = payload.get("sid") if payload is not None else None
        if isinstance(sid, str) and sid:
            return Accepted(
                provider_id=sid, status=map_status(_label(payload)), error_code=_int_or_none(payload.get("error_code"))
            )
        return Unknown(reason=f"HTTP {status} without a message sid; acceptance unknown")
    code = _int_or_none(payload.get("code")) if payload is not None else None
    if status == 429:
        code = code or 20429
        return Retryable(
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


def _matches(message: Any, *, to: str, content_sha256: str, earliest: datetime) -> bool | None:
    """True/False for a clear verdict; None when recipient and body match but the date is unreadable."""
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
    created = _rfc2822(message.get("date_created"))
    if created is None:
        return None
    return created >= earliest


def _found(message: dict[str, Any]) -> Found | None:
    sid = message.get("sid")
    if not isinstance(sid, str) or not sid:
        return None
    return Found(
        provider_id=sid,
        status=map_status(_label(message)),
        error_code=_int_or_none(message.get("error_code")),
        provider_updated_at=_rfc2822(message.get("date_updated")),
    )


def _describe_error(response: httpx.Response) -> str:
    """``HTTP 503`` or ``HTTP 400, Twilio 21211``: status and code only, never Twilio's message text."""
    payload = _json_object(response)
    code = _int_or_none(payload.get("code")) if payload is not None else None
    return f"HTTP {response.status_code}" + (f", Twilio {code}" if code is not None else "")


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        payload = response.json()
    except ValueError:  # covers JSONDecodeError and UnicodeDecodeError
        return None
    return payload if isinstance(payload, dict) else None


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
