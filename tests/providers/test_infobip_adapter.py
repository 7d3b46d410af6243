"""The Infobip adapter: every answer class through httpx.MockTransport, and real refused connections and
read timeouts against sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretBytes

from herald.core.message import Channel, Message, MessageReference
from herald.core.outcomes import (
    Accepted,
    Found,
    NotFound,
    ProviderStatus,
    Rejected,
    Retryable,
    Unavailable,
    Unknown,
    Unreachable,
)
from herald.providers.infobip import CONFIG_RETRY_DELAY_SECONDS, LOGS_SEARCHABLE_FOR, InfobipAdapter
from herald.providers.infobip_signature import CallbackKeys
from herald.providers.port import OutboundMessage
from herald.settings import InfobipSettings, InfobipWebhookSettings, InvalidSetting

BASE_URL = "https://abcde.api.infobip.com"
API_KEY = "ib-key-0f3c1e7a5b2d4086"
WEBHOOK = InfobipWebhookSettings(keys={"k1": SecretBytes(bytes(range(32)))})
REF = "att_0123456789abcdef01234567_1"
RECIPIENT = "+15558675310"
BODY = "Your order 4471 has shipped"
RECEIPTS = "https://hooks.example.com"

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


def make_config(**overrides: Any) -> InfobipSettings:
    values: dict[str, Any] = {"base_url": BASE_URL, "api_key": API_KEY, "sender": "HeraldShop", "webhook": WEBHOOK}
    values.update(overrides)
    return InfobipSettings(**values)


def make_adapter(handler: Handler, **overrides: Any) -> InfobipAdapter:
    return InfobipAdapter(make_config(**overrides), transport=httpx.MockTransport(handler))


def outbound(ref: str = REF, *, validity: int | None = 600, receipts: str | None = RECEIPTS) -> OutboundMessage:
    return OutboundMessage(
        message=Message(channel=Channel.SMS, recipient=RECIPIENT, body=BODY),
        attempt_ref=ref, receipts_url=receipts, validity_seconds=validity,
    )  # fmt: skip


def respond(status: int, body: Any = None, headers: dict[str, str] | None = None, text: str = "") -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if body is not None:
            return httpx.Response(status, json=body, headers=headers)
        return httpx.Response(status, text=text, headers=headers)

    return handler


def raise_(error: type[httpx.HTTPError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error("simulated", request=request)

    return handler


def status(group_id: int, group: str, status_id: int, name: str) -> dict[str, Any]:
    return {"groupId": group_id, "groupName": group, "id": status_id, "name": name, "description": f"{RECIPIENT} {BODY}"}


PENDING = status(1, "PENDING", 26, "PENDING_ACCEPTED")


def sent(state: dict[str, Any] = PENDING, message_id: str = REF) -> dict[str, Any]:
    """Infobip's 200 to a send (SmsResponseEnvelope)."""
    return {"bulkId": "bulk-1", "messages": [{"messageId": message_id, "status": state, "destination": RECIPIENT[1:]}]}


def api_error(code: str, *violations: str) -> dict[str, Any]:
    """A v3 ApiError whose sentences quote the number and text, as the adapter must never repeat."""
    return {
        "errorCode": code, "description": f"bad {RECIPIENT}", "action": f"fix '{BODY}'",
        "violations": [{"property": p, "violation": f"{RECIPIENT} is not valid"} for p in violations], "resources": [],
    }  # fmt: skip


def assert_no_pii(outcome: Any) -> None:
    text = json.dumps(outcome.model_dump(mode="json"))
    assert RECIPIENT[1:] not in text and BODY not in text and API_KEY not in text


async def submit_with(handler: Handler) -> Any:
    async with make_adapter(handler) as adapter:
        outcome = await adapter.submit(outbound())
    assert_no_pii(outcome)
    return outcome.result


# ---- submit: every answer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "expected_type", "expected"),
    [
        pytest.param(respond(200, sent()), Accepted, {"provider_id": REF, "status": ProviderStatus.QUEUED}, id="200-pending"),
        pytest.param(
            respond(200, sent(status(0, "ACCEPTED", 0, "ACCEPTED"))), Accepted, {"status": ProviderStatus.QUEUED}, id="200-accepted"
        ),
        pytest.param(
            respond(200, sent(status(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID"))),
            Accepted, {"provider_id": REF, "status": ProviderStatus.QUEUED, "failure_retryable": False},
            id="200-duplicate-id-is-this-attempts-message",
        ),  # fmt: skip
        pytest.param(
            respond(200, sent(status(5, "REJECTED", 10, "REJECTED_DND"))), Rejected, {"http_status": 200}, id="200-rejected"
        ),
        pytest.param(
            respond(200, sent(status(5, "REJECTED", 12, "REJECTED_NOT_ENOUGH_CREDITS"))),
            Retryable, {"delay_seconds": CONFIG_RETRY_DELAY_SECONDS}, id="200-rejected-no-credit",
        ),  # fmt: skip
        pytest.param(respond(200, {"messages": []}), Unknown, {}, id="200-no-message"),
        pytest.param(respond(200, text="<html>ok</html>"), Unknown, {}, id="200-not-json"),
        pytest.param(respond(200, {"messages": [{"messageId": REF}]}), Unknown, {}, id="200-no-status"),
        pytest.param(
            respond(400, api_error("E400", "messages[0].destinations[0].to")),
            Rejected, {"http_status": 400, "reason": "HTTP 400, Infobip E400: Infobip refused the request; "
                       "violated: messages[0].destinations[0].to"},
            id="400-names-the-property",
        ),  # fmt: skip
        pytest.param(
            respond(400, {"requestError": {"serviceException": {"messageId": "BAD_REQUEST", "text": RECIPIENT,
                                                                "validationErrors": {"messages[0].content.text": [BODY]}}}}),
            Rejected, {"reason": "HTTP 400, Infobip BAD_REQUEST: Infobip refused the request; violated: messages[0].content.text"},
            id="400-legacy-shape",
        ),  # fmt: skip
        pytest.param(
            respond(401, api_error("E401")), Retryable,
            {"http_status": 401, "delay_seconds": CONFIG_RETRY_DELAY_SECONDS}, id="401-config",
        ),  # fmt: skip
        pytest.param(respond(403, api_error("E403")), Retryable, {"http_status": 403}, id="403-config"),
        pytest.param(respond(404, text="no such path"), Retryable, {"http_status": 404}, id="404-base-url"),
        pytest.param(
            respond(429, api_error("E429"), headers={"Retry-After": "7"}),
            Unreachable, {"http_status": 429, "delay_seconds": 7.0}, id="429-retry-after",
        ),  # fmt: skip
        pytest.param(respond(429, api_error("E429")), Unreachable, {"delay_seconds": None}, id="429-no-retry-after"),
        pytest.param(respond(422, text="?"), Rejected, {"http_status": 422}, id="422"),
        pytest.param(respond(500, api_error("E500")), Unknown, {}, id="500"),
        pytest.param(respond(502, text="Bad Gateway"), Unknown, {}, id="502"),
        pytest.param(respond(503), Unknown, {}, id="503"),
        pytest.param(respond(302, headers={"Location": "https://elsewhere.example/"}), Unknown, {}, id="302"),
    ],
)
async def test_submit_classifies_http_answers(handler: Handler, expected_type: type, expected: dict[str, Any]) -> None:
    """Each HTTP answer to a send becomes the outcome class the design prescribes, without PII in it."""
    result = await submit_with(handler)
    assert isinstance(result, expected_type)
    for field, value in expected.items():
        assert getattr(result, field) == value


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
        (httpx.RemoteProtocolError, Unknown),
        (httpx.DecodingError, Unknown),
    ],
)
async def test_submit_classifies_transport_errors(error: type[httpx.HTTPError], expected_type: type) -> None:
    """Only errors before the request left are Unreachable; every later one leaves acceptance unknown."""
    assert isinstance(await submit_with(raise_(error)), expected_type)


# ---- submit: real sockets ------------------------------------------------------------------------


async def test_a_refused_connection_is_unreachable() -> None:
    """Nothing listens on the port (a real refused connection on 127.0.0.1): the request never left."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with InfobipAdapter(make_config(base_url=f"http://127.0.0.1:{port}", connect_timeout=1.0)) as adapter:
        result = (await adapter.submit(outbound())).result
    assert isinstance(result, Unreachable)


@pytest.fixture
async def silent_server() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A real server on 127.0.0.1 that reads each request and never answers (accept and hang)."""
    received: list[bytes] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        await asyncio.sleep(30)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.close()


async def test_a_read_timeout_after_the_request_was_sent_is_unknown(silent_server: tuple[str, list[bytes]]) -> None:
    """The server received the whole request and never answered: acceptance is unknown, never a failure."""
    url, received = silent_server
    async with InfobipAdapter(make_config(base_url=url, read_timeout=0.3)) as adapter:
        result = (await adapter.submit(outbound())).result
    assert isinstance(result, Unknown)
    assert received and received[0].startswith(b"POST /sms/3/messages")


# ---- submit: the request ---------------------------------------------------------------------------


async def test_the_request_names_the_message_by_the_attempt_and_signs_its_callback_data() -> None:
    """One message, one destination whose messageId is the attempt reference; validity in seconds; reports
    to the receipt server's route with callbackData that verifies for that id and no other; App auth."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=sent())

    async with make_adapter(record) as adapter:
        await adapter.submit(outbound(validity=900))
    (request,) = seen
    assert request.method == "POST" and str(request.url) == f"{BASE_URL}/sms/3/messages"
    assert request.headers["Authorization"] == f"App {API_KEY}"
    (message,) = json.loads(request.content)["messages"]
    assert message["destinations"] == [{"to": RECIPIENT[1:], "messageId": REF}]
    assert message["content"] == {"text": BODY} and message["sender"] == "HeraldShop"
    assert message["options"] == {"validityPeriod": {"amount": 900, "timeUnit": "SECONDS"}}
    webhooks = message["webhooks"]
    assert webhooks["delivery"] == {"url": f"{RECEIPTS}/infobip/reports"}
    assert webhooks["contentType"] == "application/json"
    keys = CallbackKeys.from_settings(WEBHOOK)
    assert keys is not None and keys.verify(REF, webhooks["callbackData"])
    assert not keys.verify("att_0123456789abcdef01234567_2", webhooks["callbackData"])


async def test_without_a_receipt_server_or_validity_nothing_of_them_is_sent() -> None:
    """No receipts URL: no webhooks; no validity: no options; no sender set: Infobip's default."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=sent())

    async with make_adapter(record, sender=None) as adapter:
        await adapter.submit(outbound(validity=None, receipts=None))
    (message,) = json.loads(seen[0].content)["messages"]
    assert set(message) == {"destinations", "content"}


@pytest.mark.parametrize("seconds", [0, 48 * 3600 + 1])
async def test_a_validity_infobip_would_not_keep_is_refused_before_any_request(seconds: int) -> None:
    """validityPeriod outside 1 s to 48 h is a caller bug: ValueError, no request."""
    async with make_adapter(respond(200, sent())) as adapter:
        with pytest.raises(ValueError, match="validity_seconds"):
            await adapter.submit(outbound(validity=seconds))


async def test_a_reference_the_logs_filter_cannot_take_is_refused() -> None:
    """An attempt reference with a comma (the logs' list separator) is never sent as a messageId."""
    async with make_adapter(respond(200, sent())) as adapter:
        with pytest.raises(ValueError, match="attempt_ref"):
            await adapter.submit(outbound("att_a,b_1"))


# ---- lookups -----------------------------------------------------------------------------------------


def logs(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"results": list(entries)}


def log_entry(state: dict[str, Any], message_id: str = REF, error_id: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "messageId": message_id, "destination": RECIPIENT[1:], "status": state, "doneAt": "2026-12-06T09:00:00.000+0000",
        "content": {"text": BODY},
    }  # fmt: skip
    if error_id is not None:
        entry["error"] = {"groupId": 1, "groupName": "HANDSET_ERRORS", "id": error_id, "name": "X", "permanent": False}
    return entry


DELIVERED = status(3, "DELIVERED", 5, "DELIVERED_TO_HANDSET")
UNDELIVERED = status(2, "UNDELIVERABLE", 9, "UNDELIVERABLE_NOT_DELIVERED")


@pytest.mark.parametrize(
    ("handler", "expected_type", "expected"),
    [
        pytest.param(
            respond(200, logs(log_entry(DELIVERED))), Found,
            {"provider_id": REF, "status": ProviderStatus.DELIVERED, "error_code": None,
             "provider_updated_at": datetime(2026, 12, 6, 9, tzinfo=UTC)},
            id="delivered",
        ),  # fmt: skip
        pytest.param(
            respond(200, logs(log_entry(UNDELIVERED, error_id=27))), Found,
            {"status": ProviderStatus.UNDELIVERED, "error_code": 27, "failure_retryable": True}, id="undelivered-absent",
        ),  # fmt: skip
        pytest.param(
            respond(200, logs(log_entry(UNDELIVERED, error_id=1))), Found,
            {"error_code": 1, "failure_retryable": False}, id="undelivered-unknown-subscriber",
        ),  # fmt: skip
        pytest.param(
            respond(200, logs(log_entry(status(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID")))), Found,
            {"status": ProviderStatus.QUEUED}, id="only-a-refused-repeat-means-the-id-exists",
        ),  # fmt: skip
        pytest.param(
            respond(200, logs(log_entry(status(5, "REJECTED", 23, "REJECTED_DUPLICATE_MESSAGE_ID")), log_entry(DELIVERED))),
            Found, {"status": ProviderStatus.DELIVERED}, id="the-message-beside-its-refused-repeat",
        ),  # fmt: skip
        pytest.param(respond(200, logs(log_entry(DELIVERED), log_entry(PENDING))), Unavailable, {}, id="id-reused"),
        pytest.param(respond(200, logs(log_entry(DELIVERED, message_id="att_other_1"))), NotFound, {}, id="another-id"),
        pytest.param(respond(200, logs({"messageId": REF})), Unavailable, {}, id="no-status"),
        pytest.param(respond(200, {"nothing": 1}), Unavailable, {}, id="no-results"),
        pytest.param(respond(401, api_error("E401")), Unavailable, {}, id="401"),
        pytest.param(respond(403, api_error("E403")), Unavailable, {}, id="403-no-logs-scope"),
        pytest.param(respond(429, api_error("E429")), Unavailable, {}, id="429-not-notfound"),
        pytest.param(respond(500, api_error("E500")), Unavailable, {}, id="500"),
        pytest.param(raise_(httpx.ConnectError), Unavailable, {}, id="connect-error"),
        pytest.param(raise_(httpx.ReadTimeout), Unavailable, {}, id="read-timeout"),
    ],
)
async def test_fetch(handler: Handler, expected_type: type, expected: dict[str, Any]) -> None:
    """Each answer of the logs to a lookup by id becomes Found, NotFound or Unavailable, without PII."""
    async with make_adapter(handler) as adapter:
        outcome = await adapter.fetch(REF)
    assert_no_pii(outcome)
    assert isinstance(outcome.result, expected_type)
    for field, value in expected.items():
        assert getattr(outcome.result, field) == value


def reference(since: datetime) -> MessageReference:
    return MessageReference(
        recipient=RECIPIENT, content_sha256="0" * 64, attempt_ref=REF, since=since, created_by=since + timedelta(seconds=30)
    )


async def test_find_by_reference_asks_the_logs_by_our_id_only_and_proves_within_the_queue_bound() -> None:
    """The search is GET /sms/3/logs?messageId=<attempt ref> (no date filter that could hide a queued
    message); nothing listed is NotFound with its time and the queue bound, never Candidates."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=logs())

    since = datetime.now(UTC) - timedelta(minutes=20)
    async with make_adapter(record) as adapter:
        result = (await adapter.find_by_reference(reference(since))).result
    assert isinstance(result, NotFound)
    assert result.queue_bounded and result.searched_since == since and result.searched_at is not None
    (request,) = seen
    assert request.url.path == "/sms/3/logs" and dict(request.url.params) == {"messageId": REF, "limit": "10"}


async def test_find_by_reference_past_the_logs_retention_proves_nothing() -> None:
    """Infobip keeps 48 h of logs: a search that late is Unavailable, and asks nothing."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=logs())

    async with make_adapter(record) as adapter:
        result = (await adapter.find_by_reference(reference(datetime.now(UTC) - LOGS_SEARCHABLE_FOR))).result
    assert isinstance(result, Unavailable) and not seen


async def test_a_429_from_the_logs_holds_the_next_lookups_locally() -> None:
    """After the logs' 429 the adapter asks no more until the minute passes: the next lookup is
    Unavailable at once, without a request (120 requests/min is the documented limit)."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(429, json=api_error("E429"))

    async with make_adapter(record) as adapter:
        first, second = await adapter.fetch(REF), await adapter.fetch(REF)
    assert isinstance(first.result, Unavailable) and isinstance(second.result, Unavailable)
    assert len(seen) == 1 and "pace" in second.result.reason


async def test_cancel_answers_not_canceled_without_a_request() -> None:
    """Infobip cannot cancel an accepted message: canceled=False with the reason, nothing asked."""
    seen: list[httpx.Request] = []
    async with make_adapter(lambda request: seen.append(request) or httpx.Response(200)) as adapter:
        outcome = await adapter.cancel(REF)
    assert not outcome.canceled and "scheduled" in outcome.reason and not seen


# ---- construction ---------------------------------------------------------------------------------------


def test_capabilities_are_honest() -> None:
    """Lookup by id and by reference (exact), a bounded queue, reports; no cancel of an accepted message."""
    capabilities = InfobipAdapter.capabilities
    assert capabilities.status_lookup and capabilities.lookup_by_reference and capabilities.bounded_queue
    assert capabilities.delivery_reports and not capabilities.cancel_accepted
    assert InfobipAdapter.name == "infobip"


def test_dedupe_is_declared_only_when_the_account_setting_says_idempotent_sending_is_on() -> None:
    """HERALD_INFOBIP_IDEMPOTENCY_GRACE_SECONDS unset: no dedupe declared (an unknown submit is only
    looked up); set: the adapter declares that grace and nothing else changes."""
    off = InfobipAdapter(make_config())
    on = InfobipAdapter(make_config(idempotency_grace_seconds=600))
    assert off.capabilities.resubmit_dedupe_seconds is None
    assert InfobipAdapter.capabilities.resubmit_dedupe_seconds is None
    assert on.capabilities == off.capabilities.model_copy(update={"resubmit_dedupe_seconds": 600})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"base_url": None}, "HERALD_INFOBIP_BASE_URL: required for Infobip SMS"),
        ({"api_key": ""}, "HERALD_INFOBIP_API_KEY: required for Infobip SMS"),
        ({"webhook": InfobipWebhookSettings()}, "HERALD_INFOBIP_WEBHOOK_KEYS: required for Infobip SMS"),
    ],
)
def test_the_adapter_refuses_a_section_without_url_key_or_webhook_key(overrides: dict[str, Any], message: str) -> None:
    """Unset, each required setting is refused in one line naming its variable and never a secret."""
    with pytest.raises(InvalidSetting) as refused:
        InfobipAdapter(make_config(**overrides))
    assert str(refused.value).startswith(message) and API_KEY not in str(refused.value)


def test_the_api_key_is_never_shown() -> None:
    """Neither the adapter's repr nor its route carries the API key."""
    adapter = make_adapter(respond(200, sent()))
    assert API_KEY not in repr(adapter) and API_KEY not in adapter.route
