"""SendGrid's Email Activity Feed API (a paid add-on) as the e-mail channel's lookup by reference.

SMTP has no "what happened to message X". Where the account has the Email Activity add-on and an API
key with activity access, an e-mail whose submit outcome is unknown (the connection dropped after
DATA) is looked up like an SMS: by our attempt reference, which every message carries as the
``herald_attempt`` unique argument. One request per lookup, never retried here:

    find(attempt_ref)
      ├── local pace: the next free slot is more than MAX_SLOT_WAIT away ....... Unavailable
      └── GET /v3/messages?query=unique_args['herald_attempt']="<ref>"&limit=10
            ├── 200, no message ................................................ NotFound(searched_at,
            │                                                                     listed_within = lag)
            ├── 200, one message: delivered .................................... Found delivered
            │                     processed .................................... Found queued
            │                     not_delivered: GET /v3/messages/{msg_id}, its
            │                       events: bounced -> undelivered, dropped ->
            │                       failed, otherwise (deferred) queued ......... Found
            ├── 200, two or more ............................................... Unavailable (ambiguous)
            ├── 429 (SendGrid: 6 requests a minute) ............................ Unavailable; no call
            │                                                                     until X-RateLimit-Reset
            └── 401, 403 (no add-on, no activity access), 5xx, a network error,
                an unreadable body .............................................. Unavailable

Unavailable says nothing about the message: the workflow waits and looks again, never guesses.
NotFound proves absence only once the feed's lag has passed since the attempt could last have been
accepted (``herald.core.delivery_policy.absence_proven`` with ``listed_within_seconds``). SendGrid
documents no bound for how soon a message appears in the feed; users report about a minute. Herald
assumes ten minutes (``lag_seconds``), ten times that, and equal to the event evidence window.

Requests are exactly what SendGrid's OpenAPI description declares (``twilio/sendgrid-oai``,
``tsg_email_activity_v3.json``): ``query`` (required) and ``limit`` (1..1000) on the list, the
message id in the detail's path, a Bearer key. Reasons name statuses and codes, never an address.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from herald.core.outcomes import Found, NotFound, ProviderStatus, ReferenceSearch, Unavailable
from herald.providers.http_adapter import iso_time
from herald.providers.pacing import Pacer
from herald.providers.sendgrid_events import REFERENCE_ARG
from herald.settings import InvalidSetting, SendGridActivitySettings

# The unique argument's value as the SMTP adapter writes it; anything else is never put in a query.
_ATTEMPT_REF = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# SendGrid's message ids are opaque; this keeps anything but an id out of the URL path.
_MSG_ID = re.compile(r"^[A-Za-z0-9_.=-]{1,200}$")
# A reference names one attempt, so one message; a few more are read only to notice ambiguity.
LIST_LIMIT = 10
# A lookup waits this long at most for its slot under the local pace; beyond it, "not now".
MAX_SLOT_WAIT = 5.0
_FINAL_EVENTS = {"bounced": ProviderStatus.UNDELIVERED, "dropped": ProviderStatus.FAILED}


class SendGridActivity:
    """One account's Email Activity Feed, as typed lookup outcomes.

    Args:
        config: where and with which key.
        transport: replaces the network, for tests (``httpx.MockTransport``).
    """

    def __init__(
        self, config: SendGridActivitySettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if config.api_key is None:
            raise InvalidSetting("HERALD_SENDGRID_API_KEY", "required for SendGrid's Email Activity API")
        self._config = config
        self._client = httpx.AsyncClient(
            base_url=config.api_base,
            # Retries belong to the workflow: httpx's default is none, and it stays none.
            transport=transport or httpx.AsyncHTTPTransport(retries=0),
            headers={"Authorization": f"Bearer {config.api_key.get_secret_value()}", "Accept": "application/json"},
            timeout=config.timeout,
            follow_redirects=False,
        )
        self._pace = Pacer(config.requests_per_minute / 60.0)

    @property
    def lag_seconds(self) -> float:
        return self._config.lag_seconds

    async def aclose(self) -> None:
        await self._client.aclose()

    async def find(self, *, attempt_ref: str, message_id: str) -> ReferenceSearch:
        """The message carrying `attempt_ref`; Found names it by `message_id` (our Message-ID, as the
        ESP's events do), so reports and this lookup speak of the same provider id."""
        if not _ATTEMPT_REF.match(attempt_ref):
            return _unavailable("not an attempt reference; nothing was looked up")
        if await self._pace.wait_at_most(MAX_SLOT_WAIT) is None:
            return _unavailable(
                f"activity API: the local pace ({self._config.requests_per_minute:g}/min) has no slot now"
            )
        searched_at = datetime.now(UTC)
        query = f"unique_args['{REFERENCE_ARG}']=\"{attempt_ref}\""
        answer = await self._get("/v3/messages", params={"query": query, "limit": str(LIST_LIMIT)})
        if isinstance(answer, Unavailable):
            return ReferenceSearch(result=answer)
        messages = answer.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _unavailable("activity API: HTTP 200 without a readable message list")
        if not messages:
            return ReferenceSearch(
                result=NotFound(searched_at=searched_at, listed_within_seconds=self._config.lag_seconds)
            )
        if len(messages) > 1:
            return _unavailable(f"activity API: ambiguous: {len(messages)} messages carry this attempt's reference")
        return ReferenceSearch(result=await self._found(messages[0], message_id))

    async def _found(self, listed: dict[str, Any], message_id: str) -> Found | Unavailable:
        status = listed.get("status")
        updated = iso_time(listed.get("last_event_time"))
        if status == "delivered":
            return Found(provider_id=message_id, status=ProviderStatus.DELIVERED, provider_updated_at=updated)
        if status in ("processed", "processing"):
            return Found(provider_id=message_id, status=ProviderStatus.QUEUED, provider_updated_at=updated)
        if status != "not_delivered":
            return Unavailable(reason="activity API: a listed message without a known status")
        # Not delivered: bounced and dropped are final, a deferral is not; only the events tell.
        msg_id = listed.get("msg_id")
        if not isinstance(msg_id, str) or not _MSG_ID.match(msg_id):
            return Unavailable(reason="activity API: a listed message without a usable msg_id")
        if await self._pace.wait_at_most(MAX_SLOT_WAIT) is None:
            return Unavailable(reason="activity API: found, not delivered; no slot now to read its events")
        detail = await self._get(f"/v3/messages/{msg_id}", params=None)
        if isinstance(detail, Unavailable):
            return detail
        events = detail.get("events")
        names = [e.get("event_name") for e in events if isinstance(e, dict)] if isinstance(events, list) else []
        final = next((_FINAL_EVENTS[name] for name in reversed(names) if name in _FINAL_EVENTS), None)
        return Found(
            provider_id=message_id,
            status=final or ProviderStatus.QUEUED,
            provider_updated_at=updated,
            # A copy the receiving server refused is not sent again on this evidence alone.
            failure_retryable=False,
        )

    async def _get(self, path: str, *, params: dict[str, str] | None) -> dict[str, Any] | Unavailable:
        try:
            response = await self._client.get(path, params=params)
        except httpx.HTTPError as error:
            return Unavailable(reason=f"activity API: {type(error).__name__}")
        if response.status_code == 429:
            self._pace.hold_for(_reset_in(response))
            return Unavailable(reason="activity API answered 429 (too many requests); looked up again later")
        if response.status_code in (401, 403):
            return Unavailable(
                reason=f"activity API answered {response.status_code}: the key lacks Email Activity access "
                "(or the add-on is not purchased)"
            )
        if response.status_code != 200:
            return Unavailable(reason=f"activity API answered HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            return Unavailable(reason="activity API: HTTP 200 with a body that is not JSON")
        if not isinstance(body, dict):
            return Unavailable(reason="activity API: HTTP 200 with a body that is not an object")
        return body


def _unavailable(reason: str) -> ReferenceSearch:
    return ReferenceSearch(result=Unavailable(reason=reason))


def _reset_in(response: httpx.Response) -> float:
    """Seconds until the rate window resets: X-RateLimit-Reset (unix seconds), else Retry-After, else a minute."""
    now = datetime.now(UTC).timestamp()
    reset = response.headers.get("X-RateLimit-Reset", "")
    if reset.isascii() and reset.isdigit() and len(reset) <= 12:
        return min(max(int(reset) - now, 0.0), 3600.0)
    retry_after = response.headers.get("Retry-After", "")
    if retry_after.isascii() and retry_after.isdigit() and len(retry_after) <= 6:
        return min(float(retry_after), 3600.0)
    try:
        return min(max(parsedate_to_datetime(retry_after).timestamp() - now, 0.0), 3600.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return 60.0
