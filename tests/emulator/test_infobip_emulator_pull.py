"""The Infobip emulator's pull APIs over real HTTP on 127.0.0.1: GET /sms/3/logs (filters, 120 requests a
minute, 48 h retention) and GET /sms/3/reports (each report once), read by the official client's models.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from infobip_api_client.models import ApiError, SmsDeliveryResult, SmsLog, SmsLogsResponse

from emulator.infobip.config import InfobipConfig
from tests.infobip_emulator import (
    AUTH,
    InfobipThread,
    ReportReceiver,
    declared,
    final_status,
    fresh_number,
    logs,
    reported,
    send,
    sms,
)


# ---- logs ---------------------------------------------------------------------------


def test_logs_show_each_message_as_the_official_client_reads_them(infobip: InfobipThread) -> None:
    """GET /sms/3/logs lists messages newest first, filtered by messageId (comma-separated), bulkId,
    generalStatus, destination and sentSince, as SmsLogsResponse with no undeclared key."""
    to = fresh_number()
    first = send(infobip, sms(to, "one", messageId=f"log-a-{to}")).json()
    send(infobip, sms(to, "two", messageId=f"log-b-{to}"))
    final_status(infobip, to, 2)
    body = logs(infobip, messageId=f"log-a-{to},log-b-{to}").json()
    parsed = SmsLogsResponse.from_dict(body)
    assert all(set(entry) <= declared(SmsLog) for entry in body["results"])
    assert [log.message_id for log in parsed.results] == [f"log-b-{to}", f"log-a-{to}"]
    assert parsed.results[1].content.actual_instance.text == "one"
    assert parsed.results[0].status.group_name == "DELIVERED" and parsed.results[0].destination == to
    assert [r["messageId"] for r in logs(infobip, bulkId=first["bulkId"]).json()["results"]] == [f"log-a-{to}"]
    assert len(logs(infobip, destination=to, generalStatus="DELIVERED").json()["results"]) == 2
    assert logs(infobip, destination=to, generalStatus="PENDING").json()["results"] == []
    assert len(logs(infobip, destination=to, limit=1).json()["results"]) == 1
    assert logs(infobip, destination=to, sentSince="2099-01-01T00:00:00.000+0000").json()["results"] == []
    bad = logs(infobip, limit=1001)
    assert bad.status_code == 400 and ApiError.from_dict(bad.json()).violations[0].var_property == "limit"


def test_logs_allow_120_requests_a_minute_then_429(start_infobip: Callable[..., InfobipThread]) -> None:
    """The 121st logs request within a minute is refused 429 with the ApiError429 body, as documented."""
    emulator = start_infobip()
    assert InfobipConfig(api_key="k").logs_requests_per_minute == 120
    answers = [logs(emulator).status_code for _ in range(121)]
    assert answers[:120] == [200] * 120 and answers[120] == 429
    error = ApiError.from_dict(logs(emulator).json())
    assert (error.error_code, error.description) == ("E429", "Too many requests sent.")


def test_logs_and_reports_are_kept_for_the_retention_only(start_infobip: Callable[..., InfobipThread]) -> None:
    """Past the retention (48 h; 1 s here) a message leaves the logs and its unpulled report is gone."""
    emulator = start_infobip(retention_seconds=1.0)
    to = fresh_number()
    send(emulator, sms(to))
    final_status(emulator, to)
    assert len(logs(emulator, destination=to).json()["results"]) == 1
    time.sleep(1.1)
    assert logs(emulator, destination=to).json()["results"] == []
    assert httpx.get(f"{emulator.url}/sms/3/reports", headers=AUTH).json()["results"] == []


def pull(emulator: InfobipThread, **params: Any) -> list[dict[str, Any]]:
    response = httpx.get(f"{emulator.url}/sms/3/reports", params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    SmsDeliveryResult.from_dict(response.json())
    return response.json()["results"]


def test_pulled_reports_are_returned_once_each(start_infobip: Callable[..., InfobipThread]) -> None:
    """GET /sms/3/reports hands out each report of a message that has no webhook once only, honouring
    messageId and limit; a filtered pull leaves the others for later."""
    emulator = start_infobip()
    numbers = [fresh_number() for _ in range(3)]
    ids = [f"pull-{n}" for n in numbers]
    for number, message_id in zip(numbers, ids):
        send(emulator, sms(number, messageId=message_id))
    for number in numbers:
        final_status(emulator, number)
    assert [r["messageId"] for r in pull(emulator, messageId=ids[1])] == [ids[1]]
    assert pull(emulator, messageId=ids[1]) == []
    assert len(pull(emulator, limit=1)) == 1
    rest = pull(emulator)
    assert len(rest) == 1 and pull(emulator) == []
    assert rest[0]["status"]["name"] == "DELIVERED_TO_HANDSET"


def test_a_pushed_report_is_not_pulled_and_notify_false_keeps_it_for_the_pull(
    start_infobip: Callable[..., InfobipThread], report_receiver: ReportReceiver
) -> None:
    """A report pushed to a webhook is not also handed out by the pull API; with notify false nothing is
    pushed and the report waits for the pull."""
    emulator = start_infobip()
    pushed, held, name = fresh_number(), fresh_number(), f"push-{uuid.uuid4().hex[:8]}"
    send(emulator, sms(pushed, **reported(report_receiver.url(name))))
    send(emulator, sms(held, webhooks={"delivery": {"url": report_receiver.url(name), "notify": False}}))
    final_status(emulator, pushed)
    final_status(emulator, held)
    report_receiver.wait_for(name, 1)
    time.sleep(0.2)
    assert [p.results[0]["to"] for p in report_receiver.posts(name)] == [pushed]
    assert [r["to"] for r in pull(emulator)] == [held]


def test_a_subscription_url_receives_reports_of_messages_without_one(
    start_infobip: Callable[..., InfobipThread], report_receiver: ReportReceiver
) -> None:
    """With an account subscription URL, a message naming no webhook has its report pushed there."""
    name = f"subscription-{uuid.uuid4().hex[:8]}"
    emulator = start_infobip(subscription_url=report_receiver.url(name))
    to = fresh_number()
    send(emulator, sms(to))
    assert report_receiver.wait_for(name, 1)[0].results[0]["to"] == to
