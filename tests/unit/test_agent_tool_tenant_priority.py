"""The agent tool's tenant and priority: the tenant comes from the record (never from the model), a
priority the model adds is checked as a request's and passed on, and none is sent when none is asked."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from agent_tool.store import demo_store
from agent_tool.tools import CALLERS, AgentTools, MemberAction, PriorityField, SellerAction, Started
from herald.client import SendReceipt
from herald.intake.errors import IntentNotFound, InvalidIntent
from herald.intake.requests import parse_request


class _Herald:
    """Stands in for HeraldClient: records each request, validated as Herald would, and starts nothing."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def send(self, request: dict[str, Any]) -> SendReceipt:
        parse_request(request)
        self.requests.append(request)
        return SendReceipt(workflow_id=f"{request['business_key']}/sms", run_id="run", content_sha256="ab" * 32)

    async def status(self, key: str, channel: Any) -> Any:
        raise IntentNotFound(f"{key}/sms")


def _tools() -> tuple[AgentTools, _Herald]:
    herald = _Herald()
    return AgentTools(demo_store(), herald, CALLERS["eu-marketplace-agent"]), herald  # type: ignore[arg-type]


async def test_a_sellers_notice_is_for_the_orders_seller_at_the_priority_asked() -> None:
    tools, herald = _tools()
    answer = await tools.notify_seller("ord_1001", SellerAction.NEW_ORDER, priority=4)
    assert isinstance(answer, Started)
    assert (herald.requests[0]["tenant"], herald.requests[0]["priority"]) == ("sel_17", 4)


async def test_a_members_notice_is_for_the_classs_studio_and_names_no_priority_unless_asked() -> None:
    tools, herald = _tools()
    answer = await tools.notify_member("cls_502", "mem_9", MemberAction.CLASS_CANCELLED)
    assert isinstance(answer, Started)
    assert herald.requests[0]["tenant"] == "riverside"
    assert "priority" not in herald.requests[0]


@pytest.mark.parametrize("priority", [1, 3, 5])
def test_the_tools_priority_takes_what_a_request_takes(priority: int) -> None:
    assert TypeAdapter(PriorityField).validate_python(priority) == priority


@pytest.mark.parametrize("priority", [0, 6, -1, True, 3.0, "3"])
def test_the_tools_priority_refuses_what_a_request_refuses(priority: Any) -> None:
    """The tool's schema (what an MCP client is held to) and Herald's request refuse the same values."""
    with pytest.raises(ValidationError):
        TypeAdapter(PriorityField).validate_python(priority)
    with pytest.raises(InvalidIntent):
        parse_request({"business_key": "x:y", "recipient": "+15551230001", "template_id": "order_receipt",
                       "template_version": 1, "render_data": {}, "priority": priority})  # fmt: skip
