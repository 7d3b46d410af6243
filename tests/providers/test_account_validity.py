"""An account message's short provider queue validity (the built-in send policy's 120 s) goes out in
both SMS providers' requests, as each one's API description takes it."""

from __future__ import annotations

import json

import httpx
from infobip_api_client.models import SmsRequest

from herald.core.message import Channel, Message
from herald.core.send_policy import Category, PolicyRules, dispatch_order
from herald.providers.infobip import VALIDITY_PERIOD_RANGE as INFOBIP_RANGE
from herald.providers.port import OutboundMessage
from tests.providers.test_infobip_spec_conformance import adapter_with
from tests.providers.test_twilio_spec_conformance import (
    check_request,
    find_operation,
    load_spec,
    make_adapter,
    spec_replaying_transport,
)

REF = "att_0123456789abcdef01234567_1"
# What the submit activity hands the adapter for an account attempt under the built-in policy.
VALIDITY = dispatch_order(PolicyRules(), 1, Category.ACCOUNT, "shared", None).validity_seconds


def _outbound() -> OutboundMessage:
    message = Message(channel=Channel.SMS, recipient="+15558675310", body="Your sign-in code is 482913")
    return OutboundMessage(message=message, attempt_ref=REF, receipts_url=None, validity_seconds=VALIDITY)


async def test_twilio_is_asked_to_drop_an_account_message_after_two_minutes_in_its_queue() -> None:
    """Twilio's request carries ValidityPeriod=120, an integer within the 1..36,000 s its description
    accepts (and above the 5 s it recommends)."""
    assert VALIDITY == 120
    spec = load_spec()
    seen: list[httpx.Request] = []
    async with make_adapter(httpx.MockTransport(spec_replaying_transport(spec, seen))) as adapter:
        await adapter.submit(_outbound())
    (request,) = seen
    assert dict(httpx.QueryParams(request.content.decode()))["ValidityPeriod"] == "120"
    operation = find_operation(spec, "POST", request.url.path)[1]
    described = json.dumps(operation["requestBody"])
    assert "from `1` to `36000`" in described and "greater than `5` is recommended" in described
    check_request(spec, request)


async def test_infobip_is_asked_to_drop_an_account_message_after_two_minutes() -> None:
    """Infobip's request carries validityPeriod {amount: 120, timeUnit: SECONDS}, an SmsRequest its
    official model reads whole, within the 1 s to 48 h it keeps a message."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"messages": [{"messageId": REF, "status": {"groupName": "PENDING"}}]})

    async with adapter_with(record, None) as adapter:
        await adapter.submit(_outbound())
    (request,) = seen
    document = json.loads(request.content)
    (message,) = document["messages"]
    assert message["options"] == {"validityPeriod": {"amount": 120, "timeUnit": "SECONDS"}}
    model = SmsRequest.from_dict(document)
    assert model is not None and model.to_dict() == document
    assert INFOBIP_RANGE[0] <= 120 <= INFOBIP_RANGE[1]
