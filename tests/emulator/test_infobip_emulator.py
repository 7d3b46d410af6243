"""The Infobip emulator's SMS API, reports, pull APIs and idempotency, over real HTTP on 127.0.0.1.

Answers and reports are checked against the official Python client's models (infobip-api-python-client
6.0.0): they must parse, and carry no key the model does not declare. Report posts arrive at a real
receiver (tests/infobip_emulator.py). Faults are tested in test_infobip_emulator_faults.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from infobip_api_client.models import ApiError, SmsDeliveryReport, SmsDeliveryResult
from infobip_api_client.models import SmsResponse, SmsResponseDetails

from tests.depth import examples
from tests.emulator.conftest import TIME_FACTOR, WEBHOOK_PASSWORD, WEBHOOK_USER
from tests.infobip_emulator import (
    API_KEY,
    AUTH,
    InfobipThread,
    ReportReceiver,
    declared,
    final_status,
    fresh_number,
    logs,
    oracle,
    reported,
    reports_at,
    send,
    sms,
    wait_until,
)


# ---- the send --------------------------------------------------------------------------------------


def test_send_answer_is_the_official_client_s_sms_response(infobip: InfobipThread) -> None:
    """A send is answered 200 with bulkId and, per destination, the caller's or a generated messageId,
    PENDING_ACCEPTED (26) and the destination, parsed by the client's SmsResponse with no undeclared key."""
    to, other = fresh_number(), fresh_number()
    body = {
        "messages": [{"destinations": [{"to": to, "messageId": "ours-1"}, {"to": other}], "content": {"text": "hi"}}],
        "options": {"schedule": {"bulkId": "bulk-1"}, "includeSmsCountInResponse": True},
    }
    response = send(infobip, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    parsed = SmsResponse.from_dict(answer)
    assert set(answer) <= declared(SmsResponse)
    assert all(set(entry) <= declared(SmsResponseDetails) for entry in answer["messages"])
    assert parsed.bulk_id == "bulk-1"
    first, second = parsed.messages
    assert (first.message_id, first.destination, second.destination) == ("ours-1", to, other)
    uuid.UUID(second.message_id)  # generated
    assert first.status.to_dict() == {
        "groupId": 1, "groupName": "PENDING", "id": 26, "name": "PENDING_ACCEPTED",
        "description": "Message sent to next instance",
    }  # fmt: skip
    assert first.details.message_count == 1
    # Without includeSmsCountInResponse no details; without a bulkId one is generated.
    plain = send(infobip, sms(fresh_number())).json()
    assert "details" not in plain["messages"][0] and plain["bulkId"]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "App wrong-key"}, {"Authorization": f"Bearer {API_KEY}"}, {"Authorization": API_KEY}],
    ids=["none", "wrong-key", "bearer", "no-scheme"],
)
def test_unauthenticated_send_is_401_with_the_api_error_body(infobip: InfobipThread, headers: dict[str, str]) -> None:
    """Without `App <key>` (or accepted Basic) the send is refused 401 with the v3 ApiError body E401."""
    to = fresh_number()
    response = send(infobip, sms(to), headers=headers)
    assert response.status_code == 401
    error = ApiError.from_dict(response.json())
    assert error.error_code == "E401" and error.resources[0].name == "API Authentication"
    assert oracle(infobip, to) == []


def test_basic_authentication_is_accepted_when_the_account_has_it(start_infobip: Callable[..., InfobipThread]) -> None:
    """HTTP Basic with the account's username and password is accepted, as Infobip documents; a wrong one is 401."""
    emulator = start_infobip(basic_username="acct", basic_password="secret")

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    assert send(emulator, sms(fresh_number()), basic("acct", "secret")).status_code == 200
    assert send(emulator, sms(fresh_number()), basic("acct", "wrong")).status_code == 401
    assert send(emulator, sms(fresh_number()), AUTH).status_code == 200


def _with(path: str, value: Any) -> dict[str, Any]:
    """A valid body with the property at dotted `path` set to `value` (None removes it)."""
    body: dict[str, Any] = {
        "messages": [
            {
                "destinations": [{"to": "41793026727", "messageId": "m"}],
                "content": {"text": "hi"},
                "options": {"validityPeriod": {"amount": 5, "timeUnit": "MINUTES"}},
                "webhooks": {"delivery": {"url": "http://127.0.0.1:9/dlr"}, "contentType": "application/json"},
            }
        ],
        "options": {"schedule": {"bulkId": "b"}},
    }
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    node: Any = body
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "property_", "rule"),
    [
        ("messages", None, "messages", "must not be null"),
        ("messages", [], "messages", "must not be empty"),
        ("messages.0.destinations", [], "messages[0].destinations", "must not be empty"),
        ("messages.0.destinations.0.to", None, "messages[0].destinations[0].to", "must not be null"),
        ("messages.0.destinations.0.to", "4" * 65, "messages[0].destinations[0].to", "size must be between 0 and 64"),
        ("messages.0.destinations.0.to", 41793026727, "messages[0].destinations[0].to", "must be a string"),
        (
            "messages.0.destinations.0.messageId",
            "m" * 201,
            "messages[0].destinations[0].messageId",
            "size must be between 0 and 200",
        ),
        ("messages.0.content", None, "messages[0].content", "must not be null"),
        ("messages.0.content", {}, "messages[0].content.text", "must not be null"),
        (
            "messages.0.content",
            {"text": "a", "hex": "00"},
            "messages[0].content",
            "must be either text or binary content, not both",
        ),
        (
            "messages.0.options.validityPeriod",
            {"timeUnit": "HOURS"},
            "messages[0].options.validityPeriod.amount",
            "must not be null",
        ),
        (
            "messages.0.options.validityPeriod.timeUnit",
            "DAYS",
            "messages[0].options.validityPeriod.timeUnit",
            "must be one of 'SECONDS', 'MINUTES' or 'HOURS'",
        ),
        (
            "messages.0.options.validityPeriod.amount",
            "5",
            "messages[0].options.validityPeriod.amount",
            "must be an integer",
        ),
        (
            "messages.0.options.validityPeriod.amount",
            0,
            "messages[0].options.validityPeriod.amount",
            "must be greater than or equal to 1",
        ),
        ("messages.0.webhooks.delivery.url", "not a url", "messages[0].webhooks.delivery.url", "must be a valid URL"),
        (
            "messages.0.webhooks.callbackData",
            "c" * 4001,
            "messages[0].webhooks.callbackData",
            "size must be between 0 and 4000",
        ),
        (
            "messages.0.webhooks.contentType",
            "text/plain",
            "messages[0].webhooks.contentType",
            "must be application/json or application/xml",
        ),
        ("messages.0.webhooks.delivery.notify", "no", "messages[0].webhooks.delivery.notify", "must be a boolean"),
        ("options.schedule.bulkId", "b" * 101, "options.schedule.bulkId", "size must be between 0 and 100"),
        # What the emulator does not emulate is refused by name, never silently ignored.
        (
            "options.schedule.sendAt",
            "2030-01-01T00:00:00.000+0000",
            "options.schedule.sendAt",
            "scheduled sending is not emulated",
        ),
        (
            "messages.0.webhooks.contentType",
            "application/xml",
            "messages[0].webhooks.contentType",
            "application/xml is not emulated",
        ),
    ],
)
def test_a_broken_rule_is_400_naming_the_property(
    infobip: InfobipThread, path: str, value: Any, property_: str, rule: str
) -> None:
    """Each schema rule broken answers 400 E400 whose violations name the property path and the rule,
    and nothing of the request is accepted."""
    before = len(oracle(infobip, "41793026727"))
    response = send(infobip, _with(path, value))
    assert response.status_code == 400, response.text
    error = ApiError.from_dict(response.json())
    assert error.error_code == "E400"
    assert {(v.var_property, v.violation) for v in error.violations} == {(property_, rule)}
    assert len(oracle(infobip, "41793026727")) == before


def test_limits_at_their_bound_are_accepted(infobip: InfobipThread) -> None:
    """`to` of 64, messageId of 200, callbackData of 4000 characters are within the schema and accepted."""
    body = sms("4" * 64, messageId="m" * 200, webhooks={"callbackData": "c" * 4000})
    assert send(infobip, body).status_code == 200


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
_NEAR_VALID = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "destinations": st.lists(
                        st.fixed_dictionaries(
                            {"to": st.text(max_size=70) | _JSON}, optional={"messageId": st.text(max_size=210) | _JSON}
                        ),
                        max_size=2,
                    ),
                    "content": st.fixed_dictionaries({}, optional={"text": st.text(max_size=50) | _JSON, "hex": _JSON}),
                },
                optional={
                    "options": st.fixed_dictionaries(
                        {},
                        optional={
                            "validityPeriod": st.fixed_dictionaries(
                                {},
                                optional={
                                    "amount": _JSON | st.integers(),
                                    "timeUnit": st.sampled_from(["SECONDS", "MINUTES", "HOURS", "DAYS"]) | _JSON,
                                },
                            )
                        },
                    ),
                    "webhooks": st.fixed_dictionaries(
                        {}, optional={"delivery": _JSON, "callbackData": _JSON, "contentType": _JSON}
                    ),
                },
            ),
            max_size=2,
        )
    },
    optional={"options": _JSON},
)


@settings(
    max_examples=examples(400),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(body=_JSON | _NEAR_VALID)
def test_any_json_body_is_answered_200_or_400_never_500(infobip: InfobipThread, body: Any) -> None:
    """Whatever JSON a client sends, the answer is 200 or a 400 ApiError whose violations each name a
    property: never a 500, never a body the official client cannot read."""
    response = send(infobip, body)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        error = ApiError.from_dict(response.json())
        assert error.violations and all(v.var_property for v in error.violations)
    else:
        SmsResponse.from_dict(response.json())


def test_a_body_that_is_not_json_is_400(infobip: InfobipThread) -> None:
    """A body that is not JSON (or not UTF-8) is a 400 ApiError, not a 500."""
    for raw in (b"{", b"\xff\xfe", b"[1,2]", b'{"messages": NaN}', b"Infinity"):
        response = httpx.post(f"{infobip.url}/sms/3/messages", content=raw, headers=AUTH)
        assert response.status_code == 400 and ApiError.from_dict(response.json()).violations


# ---- lifecycle and report pushes -------------------------------------------------------------------------


def test_a_delivered_report_is_pushed_with_the_documented_fields(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """A message goes PENDING_ACCEPTED -> PENDING_WAITING_DELIVERY -> DELIVERED_TO_HANDSET and its report
    is POSTed as {"results": [...]} to its webhooks.delivery.url with Basic auth, readable by the client's
    SmsDeliveryResult with every documented field and no undeclared one."""
    to, name = fresh_number(), f"delivered-{uuid.uuid4().hex[:8]}"
    body = sms(to, "Hello", messageId="ref-1", sender="Herald", **reported(report_receiver.url(name), "cb-1"))
    body["messages"][0]["options"] = {
        "platform": {"entityId": "e1", "applicationId": "a1"},
        "campaignReferenceId": "c1",
    }
    accepted = send(infobip, body).json()
    (post,) = report_receiver.wait_for(name, 1)
    assert post.authorization == "Basic " + base64.b64encode(f"{WEBHOOK_USER}:{WEBHOOK_PASSWORD}".encode()).decode()
    assert post.content_type.startswith("application/json")
    (report,) = SmsDeliveryResult.from_dict(post.body).results
    assert set(post.results[0]) <= declared(SmsDeliveryReport)
    assert (report.message_id, report.to, report.bulk_id, report.sender) == ("ref-1", to, accepted["bulkId"], "Herald")
    assert (report.status.group_name, report.status.id, report.status.name) == ("DELIVERED", 5, "DELIVERED_TO_HANDSET")
    assert (report.error.group_name, report.error.id, report.error.permanent) == ("OK", 0, False)
    assert report.callback_data == "cb-1" and report.message_count == 1
    assert report.price.currency == "EUR" and report.price.price_per_message > 0
    assert (report.platform.entity_id, report.platform.application_id, report.campaign_reference_id) == (
        "e1",
        "a1",
        "c1",
    )
    assert report.sent_at <= report.done_at
    (message,) = oracle(infobip, to)
    assert [h["status"] for h in message["history"]] == [
        "PENDING_ACCEPTED",
        "PENDING_WAITING_DELIVERY",
        "DELIVERED_TO_HANDSET",
    ]
    assert message["sent"] is True and message["reports"][0]["delivered"] is True


def test_intermediate_reports_only_when_asked(infobip: InfobipThread, report_receiver: ReportReceiver) -> None:
    """With intermediateReport true the PENDING report comes before the final one (one batch or two);
    without it, only the final."""
    name, to = f"intermediate-{uuid.uuid4().hex[:8]}", fresh_number()
    body = sms(to, webhooks={"delivery": {"url": report_receiver.url(name), "intermediateReport": True}})
    send(infobip, body)
    results = reports_at(report_receiver, name, 2)
    assert [r["status"]["name"] for r in results] == ["PENDING_WAITING_DELIVERY", "DELIVERED_TO_HANDSET"]
    assert "doneAt" not in results[0] and "doneAt" in results[1]
    assert [r["status"] for r in oracle(infobip, to)[0]["reports"]] == [
        "PENDING_WAITING_DELIVERY",
        "DELIVERED_TO_HANDSET",
    ]


def test_reports_due_together_travel_in_one_post(
    start_infobip: Callable[..., InfobipThread], report_receiver: ReportReceiver
) -> None:
    """Reports due for one URL within the batch window go in one POST, at most max_bucket_size each."""
    emulator = start_infobip(batch_window_ms=200, max_bucket_size=3)
    name = f"batched-{uuid.uuid4().hex[:8]}"
    numbers = [fresh_number() for _ in range(5)]
    body = {
        "messages": [
            {
                "destinations": [{"to": n} for n in numbers],
                "content": {"text": "hi"},
                **reported(report_receiver.url(name)),
            }
        ]
    }
    assert send(emulator, body).status_code == 200
    posts = report_receiver.wait_for(name, 2)
    time.sleep(0.3)
    assert sorted(len(p.results) for p in report_receiver.posts(name)) == [2, 3]
    assert sorted(r["to"] for p in posts for r in p.results) == sorted(numbers)


def test_a_failed_report_post_is_retried_on_infobip_s_schedule(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """A report the receiver answers 500 is posted again after 1 min, then 2 min, ... (1 + n^2 minutes,
    scaled by the time factor), until it is answered 200; the oracle shows every attempt."""
    to, name = fresh_number(), f"retried-{uuid.uuid4().hex[:8]}"
    report_receiver.fail_next(name, 2, status=503)
    send(infobip, sms(to, **reported(report_receiver.url(name))))
    posts = report_receiver.wait_for(name, 3)
    assert [p.answered for p in posts] == [503, 503, 200]
    assert posts[0].results == posts[2].results
    gaps = [later.at - earlier.at for earlier, later in zip(posts, posts[1:])]
    for gap, minutes in zip(gaps, (1, 2)):
        assert minutes * 60 * TIME_FACTOR * 0.9 <= gap < minutes * 60 * TIME_FACTOR + 0.5, gaps
    (message,) = oracle(infobip, to)
    assert [a["http_status"] for a in message["reports"][0]["attempts"]] == [503, 503, 200]


def test_a_refused_report_post_is_retried_until_the_receiver_listens(infobip: InfobipThread) -> None:
    """A report whose receiver refuses connections is retried on the schedule and arrives once it listens."""
    to, receiver = fresh_number(), ReportReceiver()  # bound, not listening: connections are refused
    try:
        send(infobip, sms(to, **reported(receiver.url("late"))))
        wait_until(
            lambda: oracle(infobip, to)[0]["reports"] and oracle(infobip, to)[0]["reports"][0]["attempts"],
            "a refused attempt",
        )
        receiver.start()
        (post,) = receiver.wait_for("late", 1)
        assert post.results[0]["to"] == to
        attempts = oracle(infobip, to)[0]["reports"][0]["attempts"]
        assert (
            attempts[0]["http_status"] is None
            and "Connect" in attempts[0]["error"]
            and attempts[-1]["http_status"] == 200
        )
    finally:
        receiver.stop()


def test_report_posts_give_up_after_the_last_retry(
    start_infobip: Callable[..., InfobipThread], report_receiver: ReportReceiver
) -> None:
    """After report_max_retries retries a failing report is abandoned, counted in the stats."""
    emulator = start_infobip(report_max_retries=2)
    to, name = fresh_number(), f"abandoned-{uuid.uuid4().hex[:8]}"
    report_receiver.fail_next(name, 10)
    send(emulator, sms(to, **reported(report_receiver.url(name))))
    report_receiver.wait_for(name, 3)
    wait_until(lambda: oracle(emulator, to)[0]["reports"][0]["abandoned"], "the report abandoned")
    time.sleep(0.3)
    assert len(report_receiver.posts(name)) == 3
    assert httpx.get(f"{emulator.url}/_emulator/stats").json()["reports_abandoned"] == 1


@pytest.mark.parametrize(
    ("to", "text", "status", "error"),
    [
        ("", "hi", "MISSING_TO", "EC_INVALID_DESTINATION_ADDRESS"),
        ("not-a-number", "hi", "REJECTED_DESTINATION", "EC_INVALID_DESTINATION_ADDRESS"),
        (None, "x" * (153 * 25 + 1), "REJECTED_MESSAGE_TOO_LONG", "EC_MSG_TEXT_TOO_LONG"),
    ],
)
def test_what_the_schema_allows_but_infobip_cannot_send_is_rejected_during_processing(
    infobip: InfobipThread, to: str | None, text: str, status: str, error: str
) -> None:
    """An empty `to` (the schema's minLength is 0), a `to` that is no number, a text over 25 parts: accepted
    200, then REJECTED one step later, never sent."""
    to = fresh_number() if to is None else to
    seen = {m["seq"] for m in oracle(infobip, to)}
    assert send(infobip, sms(to, text)).status_code == 200

    def rejected() -> dict[str, Any] | None:
        fresh = [m for m in oracle(infobip, to) if m["seq"] not in seen and m["status"]["groupName"] != "PENDING"]
        return fresh[0] if fresh else None

    message = wait_until(rejected, f"{to!r} rejected")
    assert (message["status"]["groupName"], message["status"]["name"], message["error"]["name"]) == (
        "REJECTED", status, error,
    )  # fmt: skip
    assert message["sent"] is False


def test_validity_over_48_hours_is_cut_to_48_hours(infobip: InfobipThread) -> None:
    """A validityPeriod above 48 h (the spec's own example sends 720 HOURS) is accepted and set to 48 h;
    none given is 48 h too; SECONDS and the MINUTES default are read as such."""
    cases = [
        ({"amount": 720, "timeUnit": "HOURS"}, 172_800),
        (None, 172_800),
        ({"amount": 30, "timeUnit": "SECONDS"}, 30),
        ({"amount": 3}, 180),
    ]
    for validity, seconds in cases:
        to = fresh_number()
        options = {"options": {"validityPeriod": validity}} if validity else {}
        assert send(infobip, sms(to, **options)).status_code == 200
        assert oracle(infobip, to)[0]["validity_seconds"] == seconds


# ---- idempotency ---------------------------------------------------------------------------------------


def test_without_idempotency_a_reused_message_id_is_a_second_message(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """Infobip's default: a messageId sent twice is two messages, both sent and both delivered."""
    to, name = fresh_number(), f"twice-{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        assert send(infobip, sms(to, messageId=f"same-{to}", **reported(report_receiver.url(name)))).status_code == 200
    messages = final_status(infobip, to, 2)
    assert [m["sent"] for m in messages] == [True, True]
    assert [m["status"]["name"] for m in messages] == ["DELIVERED_TO_HANDSET"] * 2


def test_with_idempotency_a_repeat_within_the_grace_is_rejected_during_processing(
    start_infobip: Callable[..., InfobipThread], report_receiver: ReportReceiver
) -> None:
    """With idempotency on, the repeat is answered 200 PENDING_ACCEPTED, then REJECTED (23
    REJECTED_DUPLICATE_MESSAGE_ID) in its report and log, never sent; the original is delivered, untouched.
    After the grace the same messageId is a new message again."""
    emulator = start_infobip(idempotency_grace_seconds=1.0)
    to, name = fresh_number(), f"idem-{uuid.uuid4().hex[:8]}"
    message_id = f"idem-{to}"
    body = sms(to, messageId=message_id, **reported(report_receiver.url(name)))
    assert send(emulator, body).status_code == 200
    repeat = send(emulator, body)
    assert repeat.status_code == 200 and repeat.json()["messages"][0]["status"]["name"] == "PENDING_ACCEPTED"
    original, duplicate = final_status(emulator, to, 2)
    assert (original["sent"], original["status"]["name"]) == (True, "DELIVERED_TO_HANDSET")
    assert (duplicate["sent"], duplicate["duplicate_of"]) == (False, original["seq"])
    assert (duplicate["status"]["groupName"], duplicate["status"]["id"]) == ("REJECTED", 23)
    reports = [SmsDeliveryReport.from_dict(result) for result in reports_at(report_receiver, name, 2)]
    assert sorted(r.status.name for r in reports) == ["DELIVERED_TO_HANDSET", "REJECTED_DUPLICATE_MESSAGE_ID"]
    assert {r.message_id for r in reports} == {message_id}
    logged = logs(emulator, messageId=message_id).json()["results"]
    assert sorted(entry["status"]["name"] for entry in logged) == [
        "DELIVERED_TO_HANDSET",
        "REJECTED_DUPLICATE_MESSAGE_ID",
    ]
    time.sleep(1.0)
    send(emulator, body)
    assert [m["sent"] for m in final_status(emulator, to, 3)] == [True, False, True]
    assert httpx.get(f"{emulator.url}/_emulator/stats").json()["duplicates_rejected"] == 1


# ---- the server ------------------------------------------------------------------------------------------


def test_a_stopped_emulator_refuses_connections_and_restarts_at_the_same_url(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """Stopped, the emulator refuses connections; started again it answers at the same URL with its
    messages kept, and a report due during the stop still went out."""
    to, name, url = fresh_number(), f"restart-{uuid.uuid4().hex[:8]}", infobip.url
    send(infobip, sms(to, **reported(report_receiver.url(name))))
    infobip.stop_listening()
    try:
        with pytest.raises(httpx.ConnectError):
            send(infobip, sms(fresh_number()))
        report_receiver.wait_for(name, 1)
    finally:
        infobip.listen()
    assert infobip.url == url
    assert len(oracle(infobip, to)) == 1 and send(infobip, sms(to)).status_code == 200


def test_python_m_emulator_infobip_serves_and_stops_on_sigterm(tmp_path: Any) -> None:
    """`python -m emulator.infobip` prints its URL, answers a send with the key from the environment, arms
    faults from a file, and exits 0 on SIGTERM."""
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps([{"to": "+41790000001", "fault": "error_500", "count": 1}]))
    argv = [sys.executable, "-m", "emulator.infobip", "--port", "0", "--faults-file", str(faults)]
    process = subprocess.Popen(
        [*argv, "--log-level", "warning"], stdout=subprocess.PIPE, text=True, env={"INFOBIP_EMULATOR_API_KEY": API_KEY}
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[-1].rstrip("/")
        answer = httpx.post(f"{url}/sms/3/messages", json=sms("41790000001"), headers=AUTH)
        assert answer.status_code == 500 and answer.json()["errorCode"] == "E500"
        assert httpx.post(f"{url}/sms/3/messages", json=sms("41790000001"), headers=AUTH).status_code == 200
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
