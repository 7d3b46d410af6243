"""The Infobip emulator's faults, armed per number through its admin API, over real HTTP on 127.0.0.1.

The vocabulary is the Twilio emulator's (accept_then_hang, hang_without_accept, error_500/503,
rate_limit, report_before_response, duplicate/out-of-order/no/delayed reports, silent, validity
expiry in the queue), plus what Infobip adds: 5xx after acceptance, UNDELIVERABLE and REJECTED outcomes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from infobip_api_client.models import ApiError, SmsDeliveryReport

from tests.infobip_emulator import (
    AUTH,
    InfobipThread,
    ReportReceiver,
    final_status,
    fresh_number,
    oracle,
    reported,
    reports_at,
    send,
    sms,
    wait_until,
)


def arm(emulator: InfobipThread, to: str, fault: str, **params: Any) -> None:
    response = httpx.put(f"{emulator.url}/_emulator/faults/{to}", json={"fault": fault, **params})
    assert response.status_code == 200, response.text


def stats(emulator: InfobipThread) -> dict[str, Any]:
    return httpx.get(f"{emulator.url}/_emulator/stats").json()


def hook(receiver: ReportReceiver) -> tuple[str, str]:
    name = f"f-{uuid.uuid4().hex[:10]}"
    return name, receiver.url(name)


# ---- answer faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("fault", "status", "code"), [("error_500", 500, "E500"), ("error_503", 503, "E503")])
def test_a_5xx_before_acceptance_accepts_nothing(infobip: InfobipThread, fault: str, status: int, code: str) -> None:
    """error_500 / error_503 answer with an ApiError body and nothing is accepted; with count 1 the next
    send to the number is normal again."""
    to = fresh_number()
    arm(infobip, to, fault, count=1)
    response = send(infobip, sms(to))
    assert response.status_code == status and ApiError.from_dict(response.json()).error_code == code
    assert oracle(infobip, to) == []
    assert send(infobip, sms(to)).status_code == 200 and len(oracle(infobip, to)) == 1


def test_a_5xx_after_acceptance_sends_the_message_anyway(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """accept_then_error answers 500 although the message was accepted, sent and reported."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "accept_then_error", status=502)
    response = send(infobip, sms(to, messageId=f"amb-{to}", **reported(url)))
    assert response.status_code == 502 and response.json()["errorCode"] == "E502"
    (message,) = final_status(infobip, to)
    assert (message["sent"], message["status"]["name"]) == (True, "DELIVERED_TO_HANDSET")
    assert reports_at(report_receiver, name, 1)[0]["messageId"] == f"amb-{to}"


def test_rate_limit_is_429_with_the_documented_body_and_no_retry_after(infobip: InfobipThread) -> None:
    """rate_limit answers 429 ApiError429 (E429) without Retry-After, which Infobip does not document,
    unless the fault asks for one; nothing is accepted."""
    to = fresh_number()
    arm(infobip, to, "rate_limit", count=2)
    plain = send(infobip, sms(to))
    assert plain.status_code == 429 and "Retry-After" not in plain.headers
    assert ApiError.from_dict(plain.json()).description == "Too many requests sent."
    arm(infobip, to, "rate_limit", retry_after=3, count=1)
    assert send(infobip, sms(to)).headers["Retry-After"] == "3"
    assert oracle(infobip, to) == []


def test_accept_then_hang_times_the_client_out_but_sends_and_reports(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """accept_then_hang holds the answer past the client's timeout; the message was accepted, sent and reported."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "accept_then_hang", hang_seconds=2)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{infobip.url}/sms/3/messages",
            json=sms(to, messageId=f"h-{to}", **reported(url)),
            headers=AUTH,
            timeout=0.3,
        )
    assert reports_at(report_receiver, name, 1)[0]["status"]["name"] == "DELIVERED_TO_HANDSET"
    assert oracle(infobip, to)[0]["sent"] is True


def test_accept_then_hang_without_reports_leaves_only_the_logs(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """accept_then_hang with reports false sends the message but posts nothing; the logs find it by messageId."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "accept_then_hang", hang_seconds=1, reports=False)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{infobip.url}/sms/3/messages",
            json=sms(to, messageId=f"q-{to}", **reported(url)),
            headers=AUTH,
            timeout=0.2,
        )
    final_status(infobip, to)
    time.sleep(0.2)
    assert report_receiver.posts(name) == []
    found = httpx.get(f"{infobip.url}/sms/3/logs", params={"messageId": f"q-{to}"}, headers=AUTH).json()["results"]
    assert [entry["status"]["name"] for entry in found] == ["DELIVERED_TO_HANDSET"]


def test_hang_without_accept_answers_500_late_and_accepts_nothing(infobip: InfobipThread) -> None:
    """hang_without_accept holds the answer, then answers 500; the message never exists."""
    to = fresh_number()
    arm(infobip, to, "hang_without_accept", hang_seconds=0.3)
    started = time.monotonic()
    response = send(infobip, sms(to))
    assert response.status_code == 500 and time.monotonic() - started >= 0.3
    assert oracle(infobip, to) == []


def test_report_before_response_posts_the_report_before_answering(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """report_before_response: the final report has arrived (and been answered) before the 200 returns."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "report_before_response")
    response = send(infobip, sms(to, **reported(url)))
    answered_at = time.monotonic()
    assert response.status_code == 200
    (post,) = report_receiver.posts(name)
    assert post.at < answered_at and post.results[0]["status"]["name"] == "DELIVERED_TO_HANDSET"
    assert post.results[0]["messageId"] == response.json()["messages"][0]["messageId"]


def test_a_refusal_for_one_destination_refuses_the_whole_request(infobip: InfobipThread) -> None:
    """One destination with a refusing fault refuses the whole send: no destination is accepted."""
    healthy, faulty = fresh_number(), fresh_number()
    arm(infobip, faulty, "error_500")
    body = {"messages": [{"destinations": [{"to": healthy}, {"to": faulty}], "content": {"text": "hi"}}]}
    assert send(infobip, body).status_code == 500
    assert oracle(infobip, healthy) == [] and oracle(infobip, faulty) == []


def test_faults_are_armed_with_or_without_the_plus(infobip: InfobipThread) -> None:
    """A fault armed for +<number> applies to sends to <number> (Infobip takes both forms), and the admin
    API lists, disarms and refuses an invalid fault."""
    to = fresh_number()
    arm(infobip, f"+{to}", "error_500")
    assert send(infobip, sms(to)).status_code == 500
    listed = httpx.get(f"{infobip.url}/_emulator/faults").json()["faults"]
    assert any(f["to"] == f"+{to}" and f["used"] == 1 for f in listed)
    assert httpx.delete(f"{infobip.url}/_emulator/faults/{to}").status_code == 204
    assert send(infobip, sms(to)).status_code == 200
    assert (
        httpx.put(f"{infobip.url}/_emulator/faults/{to}", json={"fault": "rejected", "status_id": 5}).status_code == 422
    )


# ---- lifecycle faults -------------------------------------------------------------------------------


def test_held_in_queue_past_its_validity_expires_unsent(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """A message held in Infobip's queue longer than its validityPeriod expires there: EXPIRED_EXPIRED
    with EC_MESSAGE_CANCELED, at its validity, never sent."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "held_in_queue", queue_seconds=30)
    started = time.monotonic()
    send(infobip, sms(to, options={"validityPeriod": {"amount": 1, "timeUnit": "SECONDS"}}, **reported(url)))
    report = SmsDeliveryReport.from_dict(reports_at(report_receiver, name, 1)[0])
    assert time.monotonic() - started >= 1.0
    assert (report.status.group_name, report.status.name, report.error.id) == ("EXPIRED", "EXPIRED_EXPIRED", 4100)
    assert oracle(infobip, to)[0]["sent"] is False


def test_held_in_queue_within_its_validity_is_delivered_late(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """A message held shorter than its validity leaves the queue when released and is delivered."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "held_in_queue", queue_seconds=0.5)
    started = time.monotonic()
    send(infobip, sms(to, options={"validityPeriod": {"amount": 1, "timeUnit": "MINUTES"}}, **reported(url)))
    assert reports_at(report_receiver, name, 1)[0]["status"]["name"] == "DELIVERED_TO_HANDSET"
    assert time.monotonic() - started >= 0.5


def test_accept_then_hang_with_a_queue_past_validity_expires(infobip: InfobipThread) -> None:
    """accept_then_hang's queue_seconds beyond the validity: the lost answer hides a message that expires unsent."""
    to = fresh_number()
    arm(infobip, to, "accept_then_hang", hang_seconds=0.5, queue_seconds=5)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{infobip.url}/sms/3/messages",
            json=sms(to, options={"validityPeriod": {"amount": 1, "timeUnit": "SECONDS"}}),
            headers=AUTH,
            timeout=0.2,
        )
    (message,) = final_status(infobip, to)
    assert (message["status"]["name"], message["sent"]) == ("EXPIRED_EXPIRED", False)


@pytest.mark.parametrize(
    ("fault", "params", "group", "name", "sent"),
    [
        ("undeliverable", {}, "UNDELIVERABLE", "UNDELIVERABLE_NOT_DELIVERED", True),
        ("undeliverable", {"status_id": 4, "error_id": 27}, "UNDELIVERABLE", "UNDELIVERABLE_REJECTED_OPERATOR", True),
        ("rejected", {}, "REJECTED", "REJECTED_NETWORK", False),
        ("rejected", {"status_id": 10}, "REJECTED", "REJECTED_DND", False),
    ],
)
def test_outcome_faults_end_the_message_as_asked(
    infobip: InfobipThread,
    report_receiver: ReportReceiver,
    fault: str,
    params: dict[str, Any],
    group: str,
    name: str,
    sent: bool,
) -> None:
    """undeliverable ends a sent message UNDELIVERABLE; rejected ends an unsent one REJECTED; both reported
    in a form the official client reads."""
    to, (hook_name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, fault, **params)
    assert send(infobip, sms(to, **reported(url))).status_code == 200
    report = SmsDeliveryReport.from_dict(reports_at(report_receiver, hook_name, 1)[0])
    assert (report.status.group_name, report.status.name) == (group, name)
    if "error_id" in params:
        assert (report.error.id, report.error.group_name) == (27, "HANDSET_ERRORS")
    assert oracle(infobip, to)[0]["sent"] is sent


def test_duplicate_reports_post_each_report_twice(infobip: InfobipThread, report_receiver: ReportReceiver) -> None:
    """duplicate_reports posts the same final report in two POSTs of its own."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "duplicate_reports")
    send(infobip, sms(to, **reported(url)))
    first, second = report_receiver.wait_for(name, 2)
    assert first.results == second.results and len(first.results) == 1
    assert len(oracle(infobip, to)) == 1


def test_out_of_order_reports_post_the_final_before_the_pending(
    infobip: InfobipThread, report_receiver: ReportReceiver
) -> None:
    """out_of_order_reports posts the DELIVERED report first and a PENDING one for the same message after it."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "out_of_order_reports")
    send(infobip, sms(to, **reported(url)))
    first, second = report_receiver.wait_for(name, 2)
    assert [first.results[0]["status"]["name"], second.results[0]["status"]["name"]] == [
        "DELIVERED_TO_HANDSET", "PENDING_WAITING_DELIVERY",
    ]  # fmt: skip
    assert first.at <= second.at


@pytest.mark.parametrize(
    ("fault", "status"), [("no_report", "DELIVERED_TO_HANDSET"), ("silent", "PENDING_WAITING_DELIVERY")]
)
def test_no_report_and_silent_post_nothing(
    infobip: InfobipThread, report_receiver: ReportReceiver, fault: str, status: str
) -> None:
    """no_report delivers without a report (pushed or pulled); silent stops at PENDING for good."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, fault)
    send(infobip, sms(to, **reported(url)))
    wait_until(lambda: oracle(infobip, to)[0]["status"]["name"] == status, status)
    time.sleep(0.3)
    (message,) = oracle(infobip, to)
    assert message["status"]["name"] == status and message["reports"] == [] and report_receiver.posts(name) == []


def test_delayed_report_arrives_after_its_delay(infobip: InfobipThread, report_receiver: ReportReceiver) -> None:
    """delayed_report holds every report for delay_seconds before posting it."""
    to, (name, url) = fresh_number(), hook(report_receiver)
    arm(infobip, to, "delayed_report", delay_seconds=0.8)
    send(infobip, sms(to, **reported(url)))
    final_status(infobip, to)
    done = time.monotonic()
    assert report_receiver.posts(name) == []
    (post,) = report_receiver.wait_for(name, 1)
    assert post.at - done >= 0.6


def test_faults_apply_to_pulled_reports_too(start_infobip: Any) -> None:
    """duplicate_reports on a message without a webhook queues its report twice for the pull API."""
    emulator: InfobipThread = start_infobip()
    to = fresh_number()
    arm(emulator, to, "duplicate_reports")
    send(emulator, sms(to))
    final_status(emulator, to)
    pulled = httpx.get(f"{emulator.url}/sms/3/reports", headers=AUTH).json()["results"]
    assert [r["to"] for r in pulled] == [to, to]


def test_reset_forgets_messages_faults_and_counters(start_infobip: Any) -> None:
    """POST /_emulator/reset forgets messages, pending reports, faults and counters."""
    emulator: InfobipThread = start_infobip()
    to = fresh_number()
    arm(emulator, to, "error_500", count=1)
    send(emulator, sms(fresh_number()))
    assert httpx.post(f"{emulator.url}/_emulator/reset").json() == {"reset": True}
    assert httpx.get(f"{emulator.url}/_emulator/messages").json()["messages"] == []
    assert httpx.get(f"{emulator.url}/_emulator/faults").json()["faults"] == []
    assert stats(emulator)["accepted"] == 0
    assert send(emulator, sms(to)).status_code == 200
