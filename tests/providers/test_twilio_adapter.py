"""Unit tests for the Twilio adapter: every HTTP answer and transport failure, through httpx.MockTransport."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from pydantic import ValidationError

from herald.core.message import MessageReference
from herald.core.outcomes import (
    Accepted,
    Candidates,
    Found,
    NotFound,
    ProviderStatus,
    Rejected,
    Retryable,
    Unavailable,
    Unknown,
    Unreachable,
)
from herald.providers.twilio import MAX_LIST_PAGES, TwilioAdapter
from herald.providers.twilio_codes import (
    CONFIG_RETRY_DELAY_SECONDS,
    ERROR_CODES,
    STATUS_LABELS,
    ErrorClass,
    map_status,
)
from herald.settings import InvalidSetting, TwilioSettings

ACCOUNT_SID = "AC0123456789abcdef0123456789abcdef"
AUTH_TOKEN = "tok9f3c1e7a5b2d4086"
SERVICE_SID = "MG0123456789abcdef0123456789abcdef"
FROM_NUMBER = "+15005550006"
MESSAGE_SID = "SMa1b2c3d4a1b2c3d4a1b2c3d4a1b2c3d4"
OTHER_SID = "SMffffeeeeddddccccbbbbaaaa99998888"
RECIPIENT = "+15558675310"
RECIPIENT_DIGITS = "5558675310"
BODY = "Your order 4471 has shipped"
BODY_SHA = hashlib.sha256(BODY.encode("utf-8")).hexdigest()
CALLBACK = "https://herald.example/callbacks/twilio/att_01"
MESSAGES_PATH = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
SINCE = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)


def reference(since: datetime, within: timedelta = timedelta(days=365)) -> MessageReference:
    """The attempt's reference as a lookup names it; by default a bound no message of these tests
    reaches (the bound's own test names a tight one)."""
    return MessageReference(
        recipient=RECIPIENT, content_sha256=BODY_SHA, attempt_ref="att_test_1", since=since, created_by=since + within
    )

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


def make_config(**overrides: Any) -> TwilioSettings:
    values: dict[str, Any] = {"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from_number": FROM_NUMBER}
    values.update(overrides)
    return TwilioSettings(**values)


def make_adapter(handler: Handler, **overrides: Any) -> TwilioAdapter:
    return TwilioAdapter(make_config(**overrides), transport=httpx.MockTransport(handler))


def respond(status: int, json: Any = None, headers: dict[str, str] | None = None, text: str | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if json is not None:
            return httpx.Response(status, json=json, headers=headers)
        return httpx.Response(status, text=text or "", headers=headers)

    return handler


def raise_(error: type[httpx.HTTPError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error("simulated", request=request)

    return handler


def recording(handler: Handler, seen: list[httpx.Request]) -> Handler:
    def record(request: httpx.Request) -> httpx.Response | Awaitable[httpx.Response]:
        seen.append(request)
        return handler(request)

    return record


def twilio_error(code: int, status: int) -> dict[str, Any]:
    # Twilio's own message quotes the number and body; the adapter must never echo it.
    return {
        "code": code,
        "message": f"The 'To' number {RECIPIENT} cannot receive '{BODY}'",
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }


def rfc2822(moment: datetime) -> str:
    return format_datetime(moment)


def message(
    *,
    sid: str = MESSAGE_SID,
    body: str = BODY,
    to: str = RECIPIENT,
    status: str = "queued",
    direction: str = "outbound-api",
    created: datetime = SINCE + timedelta(seconds=1),
    sent: datetime | None | str = "created",
    sender: str | None = FROM_NUMBER,
    error_code: int | None = None,
) -> dict[str, Any]:
    return {
        "sid": sid,
        "account_sid": ACCOUNT_SID,
        "body": body,
        "to": to,
        "from": sender,
        "status": status,
        "direction": direction,
        "date_created": rfc2822(created),
        # Twilio stamps date_sent when a message leaves its queue; None while it is still queued.
        "date_sent": rfc2822(created) if sent == "created" else (rfc2822(sent) if sent is not None else None),
        "date_updated": rfc2822(created + timedelta(seconds=3)),
        "error_code": error_code,
        "error_message": None,
    }


def form_of(request: httpx.Request) -> dict[str, str]:
    return dict(parse_qsl(request.content.decode("utf-8"), keep_blank_values=True))


def assert_no_pii(outcome: Any) -> None:
    dumped = outcome.model_dump_json()
    assert RECIPIENT_DIGITS not in dumped
    assert BODY not in dumped
    assert AUTH_TOKEN not in dumped


async def submit_with(handler: Handler, **overrides: Any) -> Any:
    async with make_adapter(handler, **overrides) as adapter:
        outcome = await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=CALLBACK)
    assert_no_pii(outcome)
    return outcome.result


# --- submit: HTTP answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "expected_type", "expected"),
    [
        pytest.param(
            respond(201, message(status="queued")),
            Accepted,
            {"provider_id": MESSAGE_SID, "status": ProviderStatus.QUEUED, "error_code": None},
            id="201-queued",
        ),
        pytest.param(
            respond(200, message(status="sent")),
            Accepted,
            {"provider_id": MESSAGE_SID, "status": ProviderStatus.SENT},
            id="200-sent",
        ),
        pytest.param(respond(201, {"status": "queued"}), Unknown, {}, id="201-without-sid"),
        pytest.param(respond(201, text="<html>ok</html>"), Unknown, {}, id="201-not-json"),
        pytest.param(
            respond(429, twilio_error(20429, 429), headers={"Retry-After": "7"}),
            Unreachable,
            {"delay_seconds": 7.0, "error_code": 20429, "http_status": 429},
            id="429-retry-after-seconds",
        ),
        pytest.param(
            respond(429, headers={"Retry-After": "2.5"}),
            Unreachable,
            {"delay_seconds": 2.5, "error_code": 20429, "http_status": 429},
            id="429-retry-after-float-no-body",
        ),
        pytest.param(
            respond(429, twilio_error(20429, 429)),
            Unreachable,
            {"delay_seconds": None, "error_code": 20429},
            id="429-without-retry-after",
        ),
        pytest.param(
            respond(429, twilio_error(20429, 429), headers={"Retry-After": "soon"}),
            Unreachable,
            {"delay_seconds": None},
            id="429-unparsable-retry-after",
        ),
        pytest.param(
            respond(401, twilio_error(20003, 401)),
            Retryable,
            {"error_code": 20003, "http_status": 401, "delay_seconds": CONFIG_RETRY_DELAY_SECONDS},
            id="401-auth-20003",
        ),
        pytest.param(respond(401), Retryable, {"http_status": 401, "error_code": None}, id="401-no-code"),
        pytest.param(respond(403), Retryable, {"http_status": 403}, id="403-no-code"),
        pytest.param(respond(404, text="Not Found"), Retryable, {"http_status": 404}, id="404-no-code"),
        pytest.param(
            respond(400, text="bad request"),
            Rejected,
            {"reason": "HTTP 400 without a Twilio error code", "error_code": None, "http_status": 400},
            id="400-no-code",
        ),
        pytest.param(
            respond(422, {"message": "no code here"}),
            Rejected,
            {"reason": "HTTP 422 without a Twilio error code", "http_status": 422},
            id="422-json-without-code",
        ),
        pytest.param(
            respond(400, twilio_error(99999, 400)),
            Rejected,
            {"error_code": 99999, "http_status": 400},
            id="400-code-not-in-table",
        ),
        pytest.param(respond(500, twilio_error(20500, 500)), Unknown, {}, id="500"),
        pytest.param(respond(502, text="Bad Gateway"), Unknown, {}, id="502"),
        pytest.param(respond(503, headers={"Retry-After": "5"}), Unknown, {}, id="503"),
        pytest.param(respond(504), Unknown, {}, id="504"),
        pytest.param(respond(302, headers={"Location": "https://elsewhere.example/"}), Unknown, {}, id="302"),
    ],
)
async def test_submit_classifies_http_answers(handler: Handler, expected_type: type, expected: dict[str, Any]) -> None:
    """Each HTTP answer to a submit becomes the outcome class and fields the design rules prescribe."""
    result = await submit_with(handler)
    assert isinstance(result, expected_type)
    for field, value in expected.items():
        assert getattr(result, field) == value, field


# The product's expected verdict per required code, written out rather than read back from the table.
REQUIRED_CODE_OUTCOMES: dict[int, type] = {
    21211: Rejected,
    21610: Rejected,
    21614: Rejected,
    21408: Retryable,
    30003: Rejected,
    30004: Rejected,
    30005: Rejected,
    30006: Rejected,
    30007: Rejected,
    30001: Retryable,
    30002: Retryable,
    30008: Retryable,
    30032: Retryable,
    30034: Retryable,
    20429: Retryable,
    20003: Retryable,
    14107: Retryable,
}


@pytest.mark.parametrize(("code", "expected_type"), sorted(REQUIRED_CODE_OUTCOMES.items()))
async def test_submit_400_with_required_code(code: int, expected_type: type) -> None:
    """A 400 carrying each product-required Twilio code yields the agreed outcome, naming status and code."""
    result = await submit_with(respond(400, twilio_error(code, 400)))
    assert isinstance(result, expected_type)
    assert result.error_code == code
    assert result.http_status == 400
    assert "HTTP 400" in result.reason and str(code) in result.reason


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
async def test_submit_400_follows_the_code_table(code: int) -> None:
    """Every code in the table, required or extra, produces the outcome its classification says."""
    entry = ERROR_CODES[code]
    result = await submit_with(respond(400, twilio_error(code, 400)))
    if entry.classification is ErrorClass.PERMANENT:
        assert isinstance(result, Rejected)
    else:
        assert isinstance(result, Retryable)
        assert result.delay_seconds == entry.delay_seconds
    assert entry.reason in result.reason


async def test_submit_retry_after_header_beats_table_delay() -> None:
    """A Retry-After header on a retryable 4xx overrides the table's delay hint."""
    result = await submit_with(respond(400, twilio_error(14107, 400), headers={"Retry-After": "12"}))
    assert isinstance(result, Retryable)
    assert result.delay_seconds == 12.0


@pytest.mark.parametrize(("offset", "low", "high"), [(120, 115.0, 121.0), (-60, 0.0, 0.0)], ids=["future", "past"])
async def test_submit_429_retry_after_http_date(offset: int, low: float, high: float) -> None:
    """A Retry-After HTTP-date becomes seconds from now, and a date already past becomes zero."""
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=offset), usegmt=True)
    result = await submit_with(respond(429, twilio_error(20429, 429), headers={"Retry-After": when}))
    assert isinstance(result, Unreachable)
    assert result.delay_seconds is not None and low <= result.delay_seconds <= high
    assert "20429" in result.reason


# --- submit: transport failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected_type"),
    [
        (httpx.ConnectError, Unreachable),
        (httpx.ConnectTimeout, Unreachable),
        (httpx.PoolTimeout, Unreachable),
        (httpx.ReadTimeout, Unknown),
        (httpx.WriteTimeout, Unknown),
        (httpx.ReadError, Unknown),
        (httpx.WriteError, Unknown),
        (httpx.CloseError, Unknown),
        (httpx.RemoteProtocolError, Unknown),
        (httpx.LocalProtocolError, Unknown),
        (httpx.ProxyError, Unknown),
        (httpx.DecodingError, Unknown),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) and issubclass(value, Exception) else None,
)
async def test_submit_classifies_transport_errors(error: type[httpx.HTTPError], expected_type: type) -> None:
    """Errors before the request left are Unreachable (an outage, no verdict on the message), any later one is
    Unknown, named by class and never raised."""
    result = await submit_with(raise_(error))
    assert isinstance(result, expected_type)
    assert error.__name__ in result.reason


@pytest.mark.parametrize(
    "handler",
    [raise_(httpx.ConnectError), raise_(httpx.ReadTimeout), respond(503), respond(429), respond(400)],
    ids=["connect-error", "read-timeout", "503", "429", "400"],
)
async def test_submit_never_retries(handler: Handler) -> None:
    """The adapter makes exactly one request per submit whatever goes wrong: retries belong to Temporal."""
    seen: list[httpx.Request] = []
    await submit_with(recording(handler, seen))
    assert len(seen) == 1


async def test_reasons_never_carry_recipient_or_body() -> None:
    """No outcome of any kind carries the recipient's digits or the body, even when Twilio's error echoes them."""
    handlers = [respond(400, twilio_error(code, 400)) for code in (*ERROR_CODES, 99999)]
    handlers += [respond(status, twilio_error(20500, status)) for status in (401, 403, 404, 429, 500, 503)]
    handlers += [raise_(error) for error in (httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError)]
    for handler in handlers:
        result = await submit_with(handler)  # submit_with asserts the absence on the whole outcome
        assert RECIPIENT_DIGITS not in result.reason and BODY not in result.reason
    async with make_adapter(respond(500, twilio_error(20500, 500))) as adapter:
        lookup = await adapter.find_by_reference(reference(SINCE))
        assert_no_pii(lookup)
        assert_no_pii(await adapter.fetch(MESSAGE_SID))
        assert_no_pii(await adapter.cancel(MESSAGE_SID))


# --- submit: what goes on the wire ----------------------------------------------------------------


async def test_submit_sends_from_number_form() -> None:
    """With a from_number the adapter POSTs To, From, Body and StatusCallback form-encoded to Messages.json."""
    seen: list[httpx.Request] = []
    await submit_with(recording(respond(201, message()), seen))
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == f"https://api.twilio.com{MESSAGES_PATH}"
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert form_of(request) == {"To": RECIPIENT, "From": FROM_NUMBER, "Body": BODY, "StatusCallback": CALLBACK}


async def test_submit_sends_validity_period_as_whole_seconds() -> None:
    """A queue bound goes out as Twilio's ValidityPeriod, in whole seconds."""
    seen: list[httpx.Request] = []
    async with make_adapter(recording(respond(201, message()), seen)) as adapter:
        await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=CALLBACK, validity_seconds=600)
    assert form_of(seen[0])["ValidityPeriod"] == "600"


@pytest.mark.parametrize("seconds", [0, -5, 36_001])
async def test_submit_refuses_a_validity_period_twilio_would_not_take(seconds: int) -> None:
    """A ValidityPeriod outside 1..36,000 s is a caller bug: ValueError, and nothing is sent."""
    seen: list[httpx.Request] = []
    async with make_adapter(recording(respond(201, message()), seen)) as adapter:
        with pytest.raises(ValueError, match="validity_seconds"):
            await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None, validity_seconds=seconds)
    assert seen == []


async def test_submit_sends_messaging_service_and_omits_absent_callback() -> None:
    """With a messaging service the form sends MessagingServiceSid instead of From, and no StatusCallback if None."""
    seen: list[httpx.Request] = []
    handler = recording(respond(201, message()), seen)
    async with make_adapter(handler, from_number=None, messaging_service_sid=SERVICE_SID) as adapter:
        await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None)
    assert form_of(seen[0]) == {"To": RECIPIENT, "MessagingServiceSid": SERVICE_SID, "Body": BODY}


async def test_requests_carry_basic_auth() -> None:
    """Every request carries HTTP Basic auth with the account SID and auth token."""
    seen: list[httpx.Request] = []
    await submit_with(recording(respond(201, message()), seen))
    expected = base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
    assert seen[0].headers["Authorization"] == f"Basic {expected}"


async def test_requests_carry_explicit_timeouts() -> None:
    """The configured connect and read timeouts reach every request, with write and pool set explicitly."""
    seen: list[httpx.Request] = []
    await submit_with(recording(respond(201, message()), seen), connect_timeout=1.5, read_timeout=4.0)
    assert seen[0].extensions["timeout"] == {"connect": 1.5, "read": 4.0, "write": 4.0, "pool": 1.5}


async def test_requests_in_flight_are_capped() -> None:
    """No more than max_in_flight requests are in flight at once on one adapter, and the cap is reached."""
    in_flight = 0
    peak = 0

    async def slow(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return httpx.Response(201, json=message())

    async with make_adapter(slow, max_in_flight=2) as adapter:
        outcomes = await asyncio.gather(
            *(adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=None) for _ in range(6))
        )
    assert all(isinstance(outcome.result, Accepted) for outcome in outcomes)
    assert peak == 2


# --- config and secrets ---------------------------------------------------------------------------


async def test_auth_token_never_shown() -> None:
    """The auth token appears in no repr, str or dump of the config or the adapter, nor in a config error."""
    config = make_config()
    adapter = TwilioAdapter(config, transport=httpx.MockTransport(respond(201, message())))
    try:
        shown = (repr(config), str(config), config.model_dump_json(), str(config.model_dump()), repr(adapter))
        for text in (*shown, str(adapter)):
            assert AUTH_TOKEN not in text
        with pytest.raises(ValidationError) as caught:
            make_config(messaging_service_sid=SERVICE_SID)  # both senders: rejected
        assert AUTH_TOKEN not in str(caught.value)
        assert AUTH_TOKEN not in repr(caught.value)
    finally:
        await adapter.aclose()


@pytest.mark.parametrize(
    "overrides",
    [
        {"messaging_service_sid": SERVICE_SID},
        {"account_sid": "AC123"},
        {"from_number": None, "messaging_service_sid": "MG-not-a-sid"},
        {"api_base": "ftp://api.twilio.com"},
        {"max_in_flight": 0},
    ],
    ids=["two-senders", "bad-account-sid", "bad-service-sid", "bad-api-base", "zero-in-flight"],
)
def test_config_rejects_invalid_settings(overrides: dict[str, Any]) -> None:
    """A config with two senders, or with a malformed SID, URL or limit, is refused at construction."""
    with pytest.raises(ValidationError):
        make_config(**overrides)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"from_number": None},
         "HERALD_TWILIO_FROM: required for SMS unless HERALD_TWILIO_MESSAGING_SERVICE_SID is set (one sender)"),
        ({"account_sid": ""}, "HERALD_TWILIO_ACCOUNT_SID: required for SMS (Twilio's Account SID, AC...)"),
    ],
    ids=["no-sender", "no-account"],
)  # fmt: skip
def test_the_adapter_refuses_a_section_without_an_account_or_a_sender(overrides: dict[str, Any], message: str) -> None:
    """Unset, the account and the sender are refused by the adapter, in one line naming the variable."""
    config = TwilioSettings.model_construct(**{**make_config().model_dump(), **overrides})
    with pytest.raises(InvalidSetting) as refused:
        TwilioAdapter(config)
    assert str(refused.value) == message


def test_capabilities() -> None:
    """Twilio's declared capabilities are exactly what the workflow is told to expect."""
    capabilities = TwilioAdapter.capabilities
    assert capabilities.status_lookup is True
    assert capabilities.lookup_by_reference is True
    assert capabilities.bounded_queue is True
    assert capabilities.cancel_accepted is False


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("accepted", ProviderStatus.QUEUED),
        ("scheduled", ProviderStatus.QUEUED),
        ("queued", ProviderStatus.QUEUED),
        ("sending", ProviderStatus.QUEUED),
        ("sent", ProviderStatus.SENT),
        ("delivered", ProviderStatus.DELIVERED),
        ("read", ProviderStatus.DELIVERED),
        ("undelivered", ProviderStatus.UNDELIVERED),
        ("failed", ProviderStatus.FAILED),
        ("canceled", ProviderStatus.CANCELED),
        ("some_future_label", ProviderStatus.QUEUED),
        (None, ProviderStatus.QUEUED),
    ],
)
def test_status_labels_map(label: str | None, expected: ProviderStatus) -> None:
    """Each Twilio status label maps to its ProviderStatus, and unknown labels to the non-final floor QUEUED."""
    assert map_status(label) is expected


def test_unknown_label_is_the_lowest_non_final_rank() -> None:
    """Unknown-label fallback QUEUED is the lowest rank, so it can never move a known status backwards."""
    assert map_status("???").rank == min(status.rank for status in STATUS_LABELS.values())
    assert not map_status("???").is_final


# --- fetch ----------------------------------------------------------------------------------------

UPDATED = datetime(2025, 3, 14, 9, 30, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("handler", "expected_type", "expected"),
    [
        pytest.param(
            respond(200, message(status="undelivered", error_code=30003, created=UPDATED - timedelta(seconds=3))),
            Found,
            {
                "provider_id": MESSAGE_SID,
                "status": ProviderStatus.UNDELIVERED,
                "error_code": 30003,
                "provider_updated_at": UPDATED,
            },
            id="200",
        ),
        pytest.param(
            respond(200, {**message(), "date_updated": "yesterday"}),
            Found,
            {"provider_updated_at": None},
            id="200-bad-date",
        ),
        pytest.param(respond(200, text="not json"), Unavailable, {}, id="200-not-json"),
        pytest.param(respond(404, twilio_error(20404, 404)), NotFound, {"searched_since": None}, id="404"),
        pytest.param(respond(500), Unavailable, {"reason": "lookup answered HTTP 500"}, id="500"),
        pytest.param(respond(429, twilio_error(20429, 429)), Unavailable, {}, id="429"),
        pytest.param(raise_(httpx.ReadTimeout), Unavailable, {}, id="read-timeout"),
        pytest.param(raise_(httpx.ConnectError), Unavailable, {}, id="connect-error"),
    ],
)
async def test_fetch(handler: Handler, expected_type: type, expected: dict[str, Any]) -> None:
    """Fetch turns 200 into Found with the parsed update time, 404 into NotFound and anything else into Unavailable."""
    seen: list[httpx.Request] = []
    async with make_adapter(recording(handler, seen)) as adapter:
        outcome = await adapter.fetch(MESSAGE_SID)
    assert_no_pii(outcome)
    assert isinstance(outcome.result, expected_type)
    for field, value in expected.items():
        assert getattr(outcome.result, field) == value, field
    assert seen[0].method == "GET"
    assert seen[0].url.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{MESSAGE_SID}.json"


async def test_fetch_refuses_a_non_sid_without_asking() -> None:
    """An id that is not a Twilio message SID is never put into a URL and yields Unavailable."""
    seen: list[httpx.Request] = []
    async with make_adapter(recording(respond(200, message()), seen)) as adapter:
        outcome = await adapter.fetch("../../Calls")
    assert isinstance(outcome.result, Unavailable)
    assert seen == []


# --- find_by_reference ----------------------------------------------------------------------------


def next_page_uri(page: int) -> str:
    # The shape Twilio uses (see the spec's readFullPage1 example).
    return f"{MESSAGES_PATH}?To=%2B15558675310&From=%2B15005550006&PageSize=100&Page={page}&PageToken=PAtoken{page}"


def newer(index: int) -> dict[str, Any]:
    """Another message to the same recipient, sent after the attempt began (so listed before the stop)."""
    return message(sid=f"SM{index:032x}", body=f"other news {index}", created=SINCE + timedelta(seconds=5 + index))


def older(index: int, **overrides: Any) -> dict[str, Any]:
    """A message sent before the attempt began: the search stops at the first one listed."""
    return message(sid=f"SM{index + 1000:032x}", created=SINCE - timedelta(hours=1, seconds=index), **overrides)


def pages(*contents: list[dict[str, Any]]) -> Handler:
    """Serve the given pages in order, each linking to the next through next_page_uri."""

    def handler(request: httpx.Request) -> httpx.Response:
        index = int(request.url.params.get("Page", "0"))
        more = index + 1 < len(contents)
        return httpx.Response(
            200,
            json={
                "messages": contents[index],
                "next_page_uri": next_page_uri(index + 1) if more else None,
                "page": index,
                "page_size": 100,
            },
        )

    return handler


def one_candidate(result: Any) -> Found:
    """The one message a search found, as the ledger's claim rule would be handed it."""
    assert isinstance(result, Candidates), result
    assert len(result.messages) == 1
    return result.messages[0].found


async def find_with(handler: Handler, seen: list[httpx.Request] | None = None, since: datetime = SINCE) -> Any:
    requests = seen if seen is not None else []
    async with make_adapter(recording(handler, requests)) as adapter:
        outcome = await adapter.find_by_reference(reference(since))
    assert_no_pii(outcome)
    return outcome.result


async def test_find_single_match() -> None:
    """Exactly one outbound message with the body's hash, created after since, is Found with its status."""
    result = await find_with(pages([message(status="delivered"), message(sid=OTHER_SID, body="Something else")]))
    result = one_candidate(result)
    assert result.provider_id == MESSAGE_SID
    assert result.status is ProviderStatus.DELIVERED


async def test_find_no_match() -> None:
    """When the list was read to its end without a match: NotFound with the searched bound, when
    the search began, and that Twilio's queue is bounded (so the workflow may weigh it as proof)."""
    before = datetime.now(UTC)
    result = await find_with(pages([]))
    assert isinstance(result, NotFound)
    assert result.searched_since == SINCE
    assert result.searched_at is not None and before <= result.searched_at <= datetime.now(UTC)
    assert result.queue_bounded is True


@pytest.mark.parametrize("label", ["queued", "accepted", "scheduled", "sending"])
async def test_find_sees_a_message_twilio_has_not_sent(label: str) -> None:
    """A message still in Twilio's queue (no date_sent) is found, live: it is ours, and it may still go out."""
    result = await find_with(pages([message(status=label, sent=None)]))
    result = one_candidate(result)
    assert result.status is ProviderStatus.QUEUED


async def test_find_pages_down_to_the_attempts_start() -> None:
    """Busy recipient: 250 messages sent since the attempt began fill three pages; the search reads
    them all, finds the attempt's message on the third page, and stops at the first older message."""
    seen: list[httpx.Request] = []
    fresh = [newer(i) for i in range(250, 0, -1)]
    contents = [fresh[:100], fresh[100:200], [*fresh[200:], message(), older(1)], [older(2)], [older(3)]]
    result = await find_with(pages(*contents), seen)
    result = one_candidate(result)
    assert result.provider_id == MESSAGE_SID
    assert len(seen) == 3
    assert [request.url.params.get("Page", "0") for request in seen] == ["0", "1", "2"]


async def test_find_stops_at_the_first_message_sent_before_the_attempt() -> None:
    """Six hundred earlier messages after the first older one are never read: the bound is in time, not pages."""
    seen: list[httpx.Request] = []
    contents = [[older(0)], *[[older(i) for i in range(page * 100, page * 100 + 100)] for page in range(6)]]
    result = await find_with(pages(*contents), seen)
    assert isinstance(result, NotFound)
    assert len(seen) == 1


async def test_unsent_messages_never_end_the_search() -> None:
    """A message without date_sent, however old its creation, does not stop the search (its place in the list is not documented)."""
    seen: list[httpx.Request] = []
    stale_queued = message(sid=OTHER_SID, body="stuck", created=SINCE - timedelta(days=1), sent=None)
    result = await find_with(pages([stale_queued], [message(), older(1)], [older(2)]), seen)
    result = one_candidate(result)
    assert len(seen) == 2


async def test_a_queued_message_listed_last_is_not_seen_until_it_leaves_the_queue() -> None:
    """Where Twilio lists unsent messages is undocumented: listed after older ones, a queued message
    is missed (NotFound, which alone proves nothing); once sent, it is listed above them and found."""
    queued_last = pages([older(1), older(2)], [message(status="queued", sent=None)])
    assert isinstance(await find_with(queued_last), NotFound)
    sent_now = pages([message(status="sent", sent=SINCE + timedelta(seconds=30)), older(1), older(2)])
    one_candidate(await find_with(sent_now))


async def test_find_ignores_the_same_body_from_another_sender() -> None:
    """The same text sent from another number is not our attempt."""
    result = await find_with(pages([message(sender="+15005550009")]))
    assert isinstance(result, NotFound)


async def test_find_two_matches_are_both_candidates() -> None:
    """Two fitting messages both come back as Candidates: which one, if any, is the attempt's is the ledger's call."""
    result = await find_with(pages([message(), message(sid=OTHER_SID)]))
    assert isinstance(result, Candidates)
    assert [each.found.provider_id for each in result.messages] == [MESSAGE_SID, OTHER_SID]


async def test_find_two_matches_across_pages_are_both_candidates() -> None:
    """Matches on different pages are gathered into one set of candidates."""
    second = message(sid=OTHER_SID, sent=SINCE + timedelta(seconds=2))
    result = await find_with(pages([message(sent=SINCE + timedelta(seconds=3))], [second]))
    assert isinstance(result, Candidates)
    assert {each.found.provider_id for each in result.messages} == {MESSAGE_SID, OTHER_SID}


async def test_a_candidate_carries_its_creation_time_and_the_searchs_bounds() -> None:
    """Each candidate carries Twilio's date_created, and the set carries what a NotFound would (bound, time, queue)."""
    created = SINCE + timedelta(seconds=7)
    result = await find_with(pages([message(created=created)]))
    assert isinstance(result, Candidates)
    assert result.messages[0].created_at == created
    assert result.searched_since == SINCE and result.queue_bounded is True and result.searched_at is not None
    assert result.none_left() == NotFound(searched_since=SINCE, searched_at=result.searched_at, queue_bounded=True)


async def test_a_message_created_past_the_in_flight_bound_is_not_a_candidate() -> None:
    """A same-body message created after the attempt's request could still create one (plus skew) is another's."""
    late = message(created=SINCE + timedelta(seconds=75))
    async with make_adapter(pages([late])) as adapter:
        bounded = reference(SINCE, within=timedelta(seconds=60))
        assert isinstance((await adapter.find_by_reference(bounded)).result, NotFound)
        within = bounded.model_copy(update={"created_by": SINCE + timedelta(seconds=74)})
        assert isinstance((await adapter.find_by_reference(within)).result, Candidates)


async def test_find_match_on_page_two() -> None:
    """The adapter follows next_page_uri on the same API base and finds a match on the second page."""
    seen: list[httpx.Request] = []
    result = await find_with(pages([message(sid=OTHER_SID, body="older news")], [message()]), seen)
    result = one_candidate(result)
    assert result.provider_id == MESSAGE_SID
    assert len(seen) == 2
    assert seen[1].url.host == "api.twilio.com"
    assert seen[1].url.params["PageToken"] == "PAtoken1"


@pytest.mark.parametrize(
    "candidate",
    [
        pytest.param(message(body="Your order 4472 has shipped"), id="body-mismatch"),
        pytest.param(message(created=SINCE - timedelta(seconds=10)), id="older-than-since"),
        pytest.param(message(direction="inbound"), id="inbound"),
        pytest.param(message(to="+15550000000"), id="other-recipient"),
    ],
)
async def test_find_ignores_non_matching(candidate: dict[str, Any]) -> None:
    """A message with another body, an earlier creation, inbound direction or another recipient is not a match."""
    result = await find_with(pages([candidate]))
    assert isinstance(result, NotFound)


async def test_find_allows_clock_skew() -> None:
    """A message created within 2 s before since still matches, to absorb clock skew."""
    result = await find_with(pages([message(created=SINCE - timedelta(seconds=1))]))
    result = one_candidate(result)


async def test_find_candidate_without_date_is_unavailable() -> None:
    """A same-body message whose date_created cannot be read makes the search Unavailable rather than a guess."""
    result = await find_with(pages([{**message(), "date_created": None}]))
    assert isinstance(result, Unavailable)


async def test_find_lists_by_recipient_and_sender_without_a_date_filter() -> None:
    """The first request lists To and From, newest first, with no DateSent filter (it would hide queued messages)."""
    seen: list[httpx.Request] = []
    await find_with(pages([]), seen)
    params = seen[0].url.params
    assert seen[0].method == "GET"
    assert seen[0].url.path == MESSAGES_PATH
    assert params["To"] == RECIPIENT
    assert params["From"] == FROM_NUMBER
    assert not [name for name in params if name.startswith("DateSent")]


async def test_find_through_a_messaging_service_matches_its_sid() -> None:
    """With a messaging service, the list is by recipient only and a message of another service is not ours."""
    seen: list[httpx.Request] = []
    ours = {**message(sender=None), "messaging_service_sid": SERVICE_SID}
    theirs = {**message(sid=OTHER_SID, sender=None), "messaging_service_sid": "MG" + "f" * 32}
    handler = recording(pages([theirs, ours]), seen)
    async with make_adapter(handler, from_number=None, messaging_service_sid=SERVICE_SID) as adapter:
        outcome = await adapter.find_by_reference(reference(SINCE))
    assert one_candidate(outcome.result).provider_id == MESSAGE_SID
    assert "From" not in seen[0].url.params


async def test_find_stops_after_page_limit() -> None:
    """A list that never reaches the attempt's start is read MAX_LIST_PAGES pages deep, then Unavailable, never NotFound."""
    seen: list[httpx.Request] = []
    result = await find_with(pages(*([[]] * (MAX_LIST_PAGES + 3))), seen)
    assert isinstance(result, Unavailable)
    assert len(seen) == MAX_LIST_PAGES


@pytest.mark.parametrize(
    "uri",
    [
        pytest.param("https://evil.example/steal", id="another-host"),
        pytest.param("//evil.example/2010-04-01/Accounts/x/Messages.json", id="scheme-relative"),
        pytest.param("/2010-04-01/Accounts/AC" + "f" * 32 + "/Messages.json?Page=1", id="another-account"),
        pytest.param(f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls.json?Page=1", id="another-resource"),
        pytest.param(f"{MESSAGES_PATH}/../../Calls.json?Page=1", id="dot-segments"),
        pytest.param(f"https://api.twilio.com@evil.example{MESSAGES_PATH}?Page=1", id="userinfo-trick"),
        pytest.param(f"http://api.twilio.com{MESSAGES_PATH}?Page=1", id="plain-http"),
    ],
)
async def test_find_follows_next_pages_only_within_this_accounts_messages(uri: str) -> None:
    """A next_page_uri anywhere but this account's Messages list is not followed (it would receive our credentials)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"messages": [newer(1)], "next_page_uri": uri})

    result = await find_with(handler, seen)
    assert isinstance(result, Unavailable)
    assert "outside this account's Messages list" in result.reason
    assert len(seen) == 1


async def test_find_follows_an_absolute_next_page_of_the_same_list() -> None:
    """An absolute next_page_uri on the same API base and list is followed like a relative one."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if "Page" not in request.url.params:
            return httpx.Response(
                200, json={"messages": [newer(1)], "next_page_uri": f"https://api.twilio.com{MESSAGES_PATH}?Page=1"}
            )
        return httpx.Response(200, json={"messages": [message()], "next_page_uri": None})

    result = await find_with(handler, seen)
    result = one_candidate(result)
    assert len(seen) == 2


@pytest.mark.parametrize(
    "handler",
    [respond(500), respond(401, twilio_error(20003, 401)), respond(200, {"no": "messages"}), raise_(httpx.ReadTimeout)],
    ids=["500", "401", "200-without-list", "read-timeout"],
)
async def test_find_failures_are_unavailable(handler: Handler) -> None:
    """A list page that fails or cannot be read makes the search Unavailable, never NotFound."""
    result = await find_with(handler)
    assert isinstance(result, Unavailable)


async def test_find_requires_aware_since() -> None:
    """A since without a time zone is a caller bug and raises ValueError before any request."""
    async with make_adapter(pages([])) as adapter:
        with pytest.raises(ValueError):
            naive = datetime(2025, 3, 14)  # no time zone: what the adapter must refuse
            await adapter.find_by_reference(reference(naive))


# --- cancel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "canceled", "phrase"),
    [
        pytest.param(respond(200, message(status="canceled")), True, "canceled", id="200-canceled"),
        pytest.param(respond(200, message(status="sent")), False, "sent", id="200-still-sent"),
        pytest.param(respond(400, twilio_error(21220, 400)), False, "refused", id="400-refused"),
        pytest.param(respond(404, twilio_error(20404, 404)), False, "refused", id="404-refused"),
        pytest.param(respond(500), False, "unknown", id="500"),
        pytest.param(raise_(httpx.ReadTimeout), False, "unknown", id="read-timeout"),
        pytest.param(raise_(httpx.ConnectError), False, "never left", id="connect-error"),
    ],
)
async def test_cancel(handler: Handler, canceled: bool, phrase: str) -> None:
    """Cancel is True only when Twilio answers status canceled; a refusal or failure is False with its reason."""
    seen: list[httpx.Request] = []
    async with make_adapter(recording(handler, seen)) as adapter:
        outcome = await adapter.cancel(MESSAGE_SID)
    assert_no_pii(outcome)
    assert outcome.canceled is canceled
    assert phrase in outcome.reason
    assert len(seen) == 1
    assert seen[0].method == "POST"
    assert seen[0].url.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{MESSAGE_SID}.json"
    assert form_of(seen[0]) == {"Status": "canceled"}


@pytest.mark.parametrize(("code", "retryable"), [(30008, True), (30003, False), (None, False), (99999, False)])
async def test_answers_carry_the_failure_class_so_the_workflow_reads_no_code_table(code: int | None, retryable: bool) -> None:
    """Accepted and Found say whether a failure with their error code may be retried, from Twilio's table, at the edge."""
    failed = message(status="failed", error_code=code)
    async with make_adapter(respond(201, failed)) as adapter:
        accepted = (await adapter.send_sms(to=RECIPIENT, body=BODY, status_callback=CALLBACK)).result
    async with make_adapter(respond(200, failed)) as adapter:
        found = (await adapter.fetch(MESSAGE_SID)).result
    assert isinstance(accepted, Accepted) and isinstance(found, Found)
    assert accepted.failure_retryable is retryable and found.failure_retryable is retryable
