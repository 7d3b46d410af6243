"""The Email Activity lookup: every answer of SendGrid's feed as a typed outcome, the requests as SendGrid's
OpenAPI description declares them, and the whole path over TCP against the ESP emulator."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.esp.config import EspConfig
from emulator.esp.server import EspServer
from herald.core.delivery_policy import DeliveryPolicy, absence_proven
from herald.core.message import MessageReference
from herald.core.outcomes import Found, NotFound, ProviderStatus, Unavailable
from herald.providers.sendgrid_activity import LIST_LIMIT, SendGridActivity
from herald.providers.smtp import EmailSubmission, SmtpAdapter
from herald.settings import EmailSettings, SendGridActivitySettings
from tests.depth import examples
from tests.keys import SESSION_KEYRING

KEY = "SG.activity-test-key"
REF = "att_0123456789abcdef01234567_1"
MESSAGE_ID = "<att_0123456789abcdef01234567_1@mail.herald.example>"
Handler = Callable[[httpx.Request], httpx.Response]

# What SendGrid's OpenAPI description (twilio/sendgrid-oai, spec/json/tsg_email_activity_v3.json, read at
# commit dbe0e0d, MIT) declares for the two operations the adapter uses: the servers' base, each path, its
# query parameters (required and bounds), and Bearer auth. Transcribed, not copied: the check below holds
# every request the adapter makes against it.
SPEC = {
    "server": "https://api.sendgrid.com",
    "operations": {
        r"/v3/messages": {"query": {"required": True}, "limit": {"required": False, "minimum": 1, "maximum": 1000}},
        r"/v3/messages/[^/]+": {},
    },
    "security": "Bearer",
}


def conforms(request: httpx.Request) -> None:
    """Raises AssertionError unless `request` is an operation the description declares, with its parameters."""
    url = urlsplit(str(request.url))
    assert request.method == "GET"
    assert f"{url.scheme}://{url.netloc}" == SPEC["server"]
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    declared = next((params for path, params in SPEC["operations"].items() if re.fullmatch(path, url.path)), None)
    assert declared is not None, f"undeclared path {url.path}"
    params = dict(parse_qsl(url.query, keep_blank_values=True))
    assert set(params) <= set(declared), f"undeclared parameters {set(params) - set(declared)}"
    for name, rules in declared.items():
        if rules.get("required"):
            assert params.get(name), f"{name} is required"
        if name in params and "minimum" in rules:
            assert rules["minimum"] <= int(params[name]) <= rules["maximum"]


def respond(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        conforms(request)
        return httpx.Response(status, json=body, headers=headers)

    return handle


def listed(status: str, msg_id: str = "filter0001.abc.0") -> dict[str, Any]:
    return {
        "from_email": "receipts@herald.example", "msg_id": msg_id, "subject": "s", "to_email": "x@example.com",
        "status": status, "opens_count": 0, "clicks_count": 0, "last_event_time": "2026-12-02T10:00:00Z",
    }  # fmt: skip


def feed(*handlers: Handler, per_minute: float = 6000.0) -> tuple[SendGridActivity, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(handlers)

    def route(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return queue.pop(0)(request)

    config = SendGridActivitySettings(api_key=KEY, requests_per_minute=per_minute, lag_seconds=120)
    return SendGridActivity(config, transport=httpx.MockTransport(route)), seen


# ---- every answer, as an outcome -------------------------------------------------------------------


async def test_no_listed_message_is_not_found_with_the_feeds_lag() -> None:
    """An empty list is NotFound, stamped with when the search began and how long the feed may lag."""
    activity, seen = feed(respond(200, {"messages": []}))
    before = datetime.now(UTC)
    result = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(result, NotFound) and result.listed_within_seconds == 120
    assert result.searched_at is not None and before <= result.searched_at <= datetime.now(UTC)
    assert not result.queue_bounded
    [request] = seen
    assert dict(parse_qsl(urlsplit(str(request.url)).query)) == {
        "query": "unique_args['herald_attempt']=\"att_0123456789abcdef01234567_1\"", "limit": str(LIST_LIMIT)
    }  # fmt: skip


@pytest.mark.parametrize(
    ("status", "expected"), [("delivered", ProviderStatus.DELIVERED), ("processed", ProviderStatus.QUEUED)]
)
async def test_one_listed_message_is_found_under_our_message_id(status: str, expected: ProviderStatus) -> None:
    """One message carries the reference: Found, named by our Message-ID (as the ESP's events name it)."""
    activity, _ = feed(respond(200, {"messages": [listed(status)]}))
    result = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(result, Found) and result.status is expected and result.provider_id == MESSAGE_ID
    assert result.provider_updated_at == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (["processed", "deferred", "bounced"], ProviderStatus.UNDELIVERED),
        (["dropped"], ProviderStatus.FAILED),
        (["processed", "deferred"], ProviderStatus.QUEUED),
    ],
)
async def test_not_delivered_reads_the_message_events(events: list[str], expected: ProviderStatus) -> None:
    """ "not_delivered" covers a bounce, a drop and a deferral: the detail's events tell which; a final one is
    never called retryable on this evidence."""
    detail = {
        "msg_id": "filter0001.abc.0",
        "status": "not_delivered",
        "events": [{"event_name": name} for name in events],
    }
    activity, seen = feed(respond(200, {"messages": [listed("not_delivered")]}), respond(200, detail))
    result = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(result, Found) and result.status is expected
    assert result.failure_retryable is False
    assert urlsplit(str(seen[1].url)).path == "/v3/messages/filter0001.abc.0"


@pytest.mark.parametrize(
    "handler",
    [
        respond(200, {"messages": [listed("delivered", "a"), listed("delivered", "b")]}),
        respond(200, {"messages": "none"}),
        respond(200, ["not", "an", "object"]),
        respond(200, {"messages": [listed("bouncing")]}),
        respond(401, {"errors": [{"message": "authorization required"}]}),
        respond(403, {"errors": [{"message": "access forbidden"}]}),
        respond(500, {"errors": [{"message": "internal error"}]}),
        respond(503),
        lambda request: httpx.Response(200, content=b"<html>"),
        lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused")),
        lambda request: (_ for _ in ()).throw(httpx.ReadTimeout("slow")),
    ],
    ids=[
        "ambiguous",
        "messages-not-a-list",
        "body-not-an-object",
        "unknown-status",
        "401",
        "403",
        "500",
        "503",
        "not-json",
        "connect-error",
        "read-timeout",
    ],  # fmt: skip
)
async def test_anything_else_is_unavailable_never_a_verdict(handler: Handler) -> None:
    """Two matches, an unreadable answer, a refused key, a 5xx or a network error say nothing about the message."""
    activity, _ = feed(handler)
    result = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(result, Unavailable) and result.reason.startswith("activity API")


async def test_a_429_holds_every_lookup_until_the_window_resets() -> None:
    """429: Unavailable, and no request goes out until X-RateLimit-Reset; the next lookup says so at once."""
    reset = int(datetime.now(UTC).timestamp()) + 50
    activity, seen = feed(
        respond(429, {"errors": [{"message": "too many requests"}]}, {"X-RateLimit-Reset": str(reset)})
    )
    first = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(first, Unavailable) and "429" in first.reason
    second = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(second, Unavailable) and "no slot" in second.reason
    assert len(seen) == 1


async def test_the_local_pace_keeps_to_sendgrids_six_a_minute() -> None:
    """At SendGrid's documented 6 requests a minute, a second lookup within ten seconds is refused locally."""
    activity, seen = feed(respond(200, {"messages": []}), per_minute=6)
    assert isinstance((await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result, NotFound)
    assert isinstance((await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result, Unavailable)
    assert len(seen) == 1


@pytest.mark.parametrize("ref", ['att_x" OR to_email="a@b.c', "", "a" * 65, "att_ü_1"])
async def test_a_value_that_is_not_a_reference_is_never_put_in_a_query(ref: str) -> None:
    """Only our reference's alphabet reaches the query language: nothing is looked up otherwise."""
    activity, seen = feed()
    assert isinstance((await activity.find(attempt_ref=ref, message_id=MESSAGE_ID)).result, Unavailable)
    assert seen == []


def test_absence_is_proven_only_past_the_in_flight_bound_and_the_feeds_lag() -> None:
    """NotFound from the feed proves "not accepted" only from a search that began after the attempt could last
    have been accepted plus the feed's lag; earlier it is "not found yet"."""
    policy = DeliveryPolicy()
    started = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    bound = started + policy.submit_in_flight_bound + timedelta(seconds=120)
    early = NotFound(searched_at=bound - timedelta(seconds=1), listed_within_seconds=120)
    late = NotFound(searched_at=bound, listed_within_seconds=120)
    assert not absence_proven(policy, started, early) and absence_proven(policy, started, late)
    assert not absence_proven(policy, started, NotFound(searched_at=bound + timedelta(days=1)))


# ---- over TCP, against the ESP emulator ----------------------------------------------------------


@pytest.fixture(scope="module")
async def esp() -> AsyncIterator[EspServer]:
    config = EspConfig(
        smtp_port=0, admin_port=0, webhook_url=None, step_ms=20, activity_api_key=KEY, activity_lag_ms=300,
        activity_requests_per_minute=None,
    )  # fmt: skip
    server = EspServer(config)
    await server.start()
    yield server
    await server.stop()


def relay(esp: EspServer) -> SmtpAdapter:
    config = EmailSettings(host="127.0.0.1", port=esp.smtp_port, security="none", from_address="receipts@herald.example",
                        message_id_domain="mail.herald.example", read_timeout=2.0, connect_timeout=2.0)  # fmt: skip
    activity = SendGridActivity(
        SendGridActivitySettings(
            api_base=f"http://127.0.0.1:{esp.admin_port}", api_key=KEY, requests_per_minute=600, lag_seconds=1
        )
    )
    return SmtpAdapter(config, activity, keyring=SESSION_KEYRING)


async def test_the_relay_declares_the_lookup_and_finds_its_message_once_the_feed_lists_it(esp: EspServer) -> None:
    """With a feed, the adapter declares lookup by reference; a message it handed over is not found while the
    feed lags, then found under our Message-ID."""
    adapter = relay(esp)
    assert adapter.capabilities.lookup_by_reference and not adapter.capabilities.bounded_queue
    ref = f"att_{secrets.token_hex(12)}_1"
    to = f"member.{secrets.token_hex(5)}@example.com"
    sent = await adapter.send_email(EmailSubmission(attempt_ref=ref, to=to, subject="s", text="t"))
    assert sent.result.kind == "accepted"
    since = datetime.now(UTC)
    early = (
        await adapter.find_by_reference(_reference(to, since, ref))
    ).result
    assert isinstance(early, NotFound)
    found = None
    for _ in range(40):
        found = (
            await adapter.find_by_reference(
                _reference(to, since, ref)
            )
        ).result
        if isinstance(found, Found):
            break
        await asyncio.sleep(0.1)
    assert isinstance(found, Found) and found.provider_id == adapter.message_id(ref)
    await adapter.aclose()


def _reference(to: str, since: datetime, ref: str) -> MessageReference:
    """The attempt's reference as a lookup names it (the activity feed searches by ``ref``)."""
    bound = DeliveryPolicy().submit_in_flight_bound
    return MessageReference(recipient=to, content_sha256="0" * 64, attempt_ref=ref, since=since, created_by=since + bound)


async def test_an_armed_429_at_the_emulator_is_unavailable(esp: EspServer) -> None:
    """The emulator's 429 reaches the adapter as Unavailable: looked up again later, never a verdict."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{esp.admin_port}", trust_env=False) as admin:
        assert (await admin.put("/_esp/activity-fault", json={"status": 429, "count": 1})).status_code == 200
    adapter = relay(esp)
    reference = _reference("x@example.com", datetime.now(UTC), REF)
    result = (await adapter.find_by_reference(reference)).result
    assert isinstance(result, Unavailable) and "429" in result.reason
    await adapter.aclose()


def test_without_a_feed_the_relay_declares_no_lookup() -> None:
    """No Email Activity key: no lookup by reference, so an unknown submit waits for events (herald.core.silence)."""
    config = EmailSettings(
        host="relay.example", from_address="receipts@herald.example", message_id_domain="mail.herald.example"
    )
    assert not SmtpAdapter(config, keyring=SESSION_KEYRING).capabilities.lookup_by_reference


def test_the_transcribed_description_matches_the_adapters_constants() -> None:
    """The list limit the adapter sends is inside the description's bounds (a change to either shows here)."""
    bounds = SPEC["operations"][r"/v3/messages"]["limit"]
    assert bounds["minimum"] <= LIST_LIMIT <= bounds["maximum"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(150), deadline=None)
@given(
    body=json_values
    | st.fixed_dictionaries(
        {
            "messages": st.lists(
                st.dictionaries(st.sampled_from(["msg_id", "status", "last_event_time", "to_email"]), json_values),
                max_size=3,
            )
        }
    ),  # fmt: skip
    detail=json_values,
    status=st.sampled_from([200, 200, 200, 404, 429, 500]),
)
async def test_whatever_the_feed_answers_the_lookup_is_an_outcome_never_an_exception(
    body: Any, detail: Any, status: int
) -> None:
    """Arbitrary JSON, wrong types and odd statuses from the feed become Found, NotFound or Unavailable; a
    Found always names our Message-ID."""
    activity, _ = feed(respond(status, body), respond(200, detail), per_minute=6000)
    result = (await activity.find(attempt_ref=REF, message_id=MESSAGE_ID)).result
    assert isinstance(result, (Found, NotFound, Unavailable))
    if isinstance(result, Found):
        assert result.provider_id == MESSAGE_ID
    await activity.aclose()
