"""The Infobip adapter and receipt route against Infobip's official Python client's models (the API description).

``infobip-api-python-client`` (MIT, pinned in the ``dev`` extra) is generated from Infobip's OpenAPI
specification; its pydantic models are what Infobip's API reads and writes. Checked here, with a
search over messages and reports:

- every send request the adapter really makes (captured on the wire) is an ``SmsRequest`` the model
  reads, with no property it does not declare (read back, it is the same document), within the
  spec's bounds; the logs lookup asks only parameters ``get_outbound_sms_message_logs`` declares;
- every report the receipt route stores as a report is an ``SmsDeliveryResult`` the model reads, and
  every result the model reads, with a status name and Herald's callbackData, is stored as a report;
- the answers the adapter reads (``SmsResponse``, ``SmsLogsResponse``), as the client's models write
  them, are read as Accepted and Found.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from infobip_api_client.api.sms_api import SmsApi
from infobip_api_client.models import (
    SmsDeliveryResult,
    SmsLog,
    SmsLogsResponse,
    SmsMessageStatus,
    SmsRequest,
    SmsResponse,
    SmsResponseDetails,
)
from pydantic import SecretBytes

from herald.core.message import Channel, Message
from herald.core.outcomes import Accepted, Found
from herald.providers.infobip import InfobipAdapter
from herald.providers.infobip_codes import GROUPS, STATUSES
from herald.providers.infobip_signature import CallbackKeys
from herald.providers.port import OutboundMessage
from herald.receipts.infobip_reports import sort_results
from herald.settings import InfobipSettings, InfobipWebhookSettings
from tests.depth import examples

WEBHOOK = InfobipWebhookSettings(keys={"k1": SecretBytes(bytes(32))})
KEYS = CallbackKeys.from_settings(WEBHOOK)
assert KEYS is not None

_refs = st.from_regex(r"att_[0-9a-f]{24}_[1-9][0-9]{0,2}", fullmatch=True)
_senders = st.none() | st.from_regex(r"\+?[0-9]{1,15}", fullmatch=True) | st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,10}", fullmatch=True)
_recipients = st.from_regex(r"\+[1-9][0-9]{7,14}", fullmatch=True)
_validity = st.none() | st.integers(1, 48 * 3600)
_receipts = st.none() | st.sampled_from(["https://hooks.example.com", "http://127.0.0.1:8235/", "https://h.example/base"])


def adapter_with(handler: Any, sender: str | None) -> InfobipAdapter:
    config = InfobipSettings(base_url="https://abcde.api.infobip.com", api_key="k", sender=sender, webhook=WEBHOOK)
    return InfobipAdapter(config, transport=httpx.MockTransport(handler))


@settings(max_examples=examples(200), deadline=None)
@given(ref=_refs, to=_recipients, body=st.text(min_size=1, max_size=400), validity=_validity, receipts=_receipts, sender=_senders)
async def test_every_send_request_is_an_sms_request_the_official_model_reads_whole(
    ref: str, to: str, body: str, validity: int | None, receipts: str | None, sender: str | None
) -> None:
    """Whatever the message, the body on the wire is an SmsRequest, read back unchanged (no undeclared
    property), with one destination named by the attempt and the spec's bounds kept."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"messages": [{"messageId": ref, "status": {"groupName": "PENDING"}}]})

    outbound = OutboundMessage(
        message=Message(channel=Channel.SMS, recipient=to, body=body), attempt_ref=ref,
        receipts_url=receipts, validity_seconds=validity,
    )  # fmt: skip
    async with adapter_with(record, sender) as adapter:
        await adapter.submit(outbound)
    (request,) = seen
    assert request.url.path == "/sms/3/messages" and request.headers["content-type"] == "application/json"
    document = json.loads(request.content)
    model = SmsRequest.from_dict(document)
    assert model is not None and model.to_dict() == document
    (message,) = model.messages
    (destination,) = message.destinations
    assert destination.message_id == ref and len(destination.to) <= 64 and len(ref) <= 200
    if message.webhooks is not None:
        assert message.webhooks.callback_data is not None and len(message.webhooks.callback_data) <= 4000


async def test_the_logs_lookup_asks_only_parameters_the_client_declares() -> None:
    """GET /sms/3/logs with messageId and limit: both parameters of get_outbound_sms_message_logs, the
    limit within its documented 1,000."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"results": []})

    async with adapter_with(record, None) as adapter:
        await adapter.fetch("att_0123456789abcdef01234567_1")
    declared = set(inspect.signature(SmsApi.get_outbound_sms_message_logs).parameters)
    aliases = {"messageId": "message_id", "limit": "limit"}
    (request,) = seen
    assert request.url.path == "/sms/3/logs"
    assert {aliases[name] for name in request.url.params} <= declared
    assert int(request.url.params["limit"]) <= 1000


_names = st.sampled_from(sorted(STATUSES)) | st.from_regex(r"[A-Z][A-Z_]{0,30}", fullmatch=True)
_text = st.text(max_size=30)
_times = st.sampled_from(["2019-11-09T16:00:00.000+0100", "2026-12-06T08:00:05.000+0000", "2026-12-06T08:00:05.123+05:30"])


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


@st.composite
def documented_results(draw: st.DrawFn) -> dict[str, Any]:
    """A DeliveryReport as the spec documents it (every field optional but ours), with Herald's callbackData."""
    ref = draw(_refs)
    values = {
        "bulkId": draw(_optional(_text)), "messageId": ref, "to": draw(_optional(_text)), "sender": draw(_optional(_text)),
        "sentAt": draw(_optional(_times)), "doneAt": draw(_optional(_times)),
        "messageCount": draw(_optional(st.integers(0, 100))), "mccMnc": draw(_optional(_text)),
        "callbackData": KEYS.sign(ref), "campaignReferenceId": draw(_optional(_text)),
        "price": draw(_optional(st.fixed_dictionaries({"pricePerMessage": st.floats(0, 1) | st.integers(0, 5),
                                                      "currency": st.sampled_from(["EUR", "USD"])}))),
        "platform": draw(_optional(st.fixed_dictionaries({"entityId": _text, "applicationId": _text}))),
        "status": {"groupId": draw(st.integers(0, 5)), "groupName": draw(st.sampled_from(sorted(GROUPS))),
                   "id": draw(st.integers(0, 200)), "name": draw(_names), "description": draw(_text)},
        "error": draw(_optional(st.fixed_dictionaries({
            "groupId": st.integers(0, 3), "groupName": st.sampled_from(["OK", "HANDSET_ERRORS", "USER_ERRORS", "OPERATOR_ERRORS"]),
            "id": st.integers(0, 6000), "name": _text, "description": _text, "permanent": st.booleans()}))),
    }  # fmt: skip
    return {key: value for key, value in values.items() if value is not None}


_odd = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text | st.lists(st.integers(), max_size=2)


@st.composite
def perturbed_results(draw: st.DrawFn) -> dict[str, Any]:
    """A documented result with some of its fields (or its status's and error's) replaced by anything."""
    result = draw(documented_results())
    for key in draw(st.lists(st.sampled_from(sorted(set(result) - {"messageId", "callbackData"})), max_size=3)):
        result[key] = draw(_odd)
    for part in ("status", "error"):
        if isinstance(result.get(part), dict):
            for key in draw(st.lists(st.sampled_from(sorted(result[part])), max_size=2)):
                result[part][key] = draw(_odd | st.sampled_from(["FOO", "Ok"]))
    return result


@settings(max_examples=examples(300), deadline=None)
@given(result=documented_results())
def test_every_documented_result_with_a_status_name_is_stored_as_a_report(result: dict[str, Any]) -> None:
    """What Infobip's own model reads, the route stores as a report (the status name as the label)."""
    assert SmsDeliveryResult.from_dict({"results": [result]}) is not None
    post = sort_results(KEYS, json.dumps({"results": [result]}).encode())
    assert not post.refused and not post.rejections
    (report,) = post.reports
    assert report.provider_status == result["status"]["name"] and report.attempt_ref == result["messageId"]


@settings(max_examples=examples(400), deadline=None)
@given(result=perturbed_results())
def test_every_result_stored_as_a_report_is_one_the_official_model_reads(result: dict[str, Any]) -> None:
    """Whatever a verified result holds, it is stored as a report only if SmsDeliveryResult reads it;
    otherwise it is a rejection with its rule, never an exception."""
    post = sort_results(KEYS, json.dumps({"results": [result]}).encode())
    assert len(post.reports) + len(post.rejections) == 1 and not post.refused
    if post.reports:
        assert SmsDeliveryResult.from_dict({"results": [result]}) is not None


@pytest.mark.parametrize("name", sorted(STATUSES))
async def test_the_answers_the_client_writes_are_read(name: str) -> None:
    """An SmsResponse and an SmsLogsResponse as the client's models write them are read as Accepted
    (or a refusal before sending) and Found, for every status in Herald's table."""
    ref = "att_0123456789abcdef01234567_1"
    entry = STATUSES[name]
    group = next(g for g, s in GROUPS.items() if name.startswith(g)) if any(name.startswith(g) for g in GROUPS) else "REJECTED"
    status = SmsMessageStatus(groupId=entry.group_id, groupName=group, id=entry.status_id, name=name)
    sent = SmsResponse(bulkId="b", messages=[SmsResponseDetails(messageId=ref, status=status, destination="41793026727")])
    logged = SmsLogsResponse(results=[SmsLog(messageId=ref, status=status, destination="41793026727")])

    def answer(request: httpx.Request) -> httpx.Response:
        document = sent if request.method == "POST" else logged
        return httpx.Response(200, content=document.to_json().encode(), headers={"Content-Type": "application/json"})

    outbound = OutboundMessage(message=Message(channel=Channel.SMS, recipient="+41793026727", body="x"), attempt_ref=ref)
    async with adapter_with(answer, None) as adapter:
        submitted, looked_up = (await adapter.submit(outbound)).result, (await adapter.fetch(ref)).result
    assert isinstance(submitted, Accepted) or submitted.kind in ("rejected", "retryable")
    assert isinstance(looked_up, Found) and looked_up.provider_id == ref
