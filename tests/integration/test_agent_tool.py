"""The agent tool through a real MCP client session: the `mcp` package's client speaks to
`python -m agent_tool` over stdio; intents start on the test stack and are counted there."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from temporalio.service import RPCError

from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.intent import Channel
from tests.support import Emulator

SELLER_PHONE = "+15550100017"  # sel_17, the seller of ord_1001 in agent_tool/store.py


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    return await asyncio.wait_for(session.call_tool(tool, arguments), 30)


async def test_an_agent_lists_the_tools_and_starts_one_intent_however_often_it_calls(
    stack: LocalStack, herald: HeraldClient, emulator: Emulator
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agent_tool"], env=stack.config.service_env(stack.database_url)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await asyncio.wait_for(session.initialize(), 30)
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {"notify_seller", "notify_member"}
        schema = tools["notify_seller"].input_schema
        assert schema["$defs"]["SellerAction"]["enum"] == ["new_order", "order_cancelled"]
        assert "never pass them" in schema["properties"]["order_id"]["description"]

        first = await _call(session, "notify_seller", {"order_id": "ord_1001", "action": "new_order"})
        again = await _call(session, "notify_seller", {"order_id": "ord_1001", "action": "new_order"})
        assert not first.is_error and not again.is_error
        assert first.structured_content["outcome"] == "started"
        assert first.structured_content["business_key"] == again.structured_content["business_key"] == "seller_new_order:ord_1001"

        refused = await _call(session, "notify_seller", {"order_id": "ord_2001", "action": "new_order"})
        assert refused.structured_content == {
            "outcome": "refused",
            "code": "not_authorised",
            "message": "eu-marketplace-agent may not notify sellers of ord_2001 (new_order)",
        }
        wrong_state = await _call(session, "notify_seller", {"order_id": "ord_1001", "action": "order_cancelled"})
        assert wrong_state.structured_content["code"] == "action_not_allowed"

        outside = await _call(session, "notify_seller", {"order_id": "ord_1001", "action": "refund_buyer"})
        assert outside.is_error
        assert "action" in outside.content[0].text

    final = await asyncio.wait_for(herald.wait("seller_new_order:ord_1001"), 60)
    assert final.state.value == "delivered" and len(final.attempts) == 1
    assert len(await emulator.messages(SELLER_PHONE)) == 1  # two calls, one intent, one message
    with pytest.raises(RPCError):  # the refused call started nothing
        await herald.handle("seller_new_order:ord_2001", Channel.SMS).describe()


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("HERALD_TWILIO_CONNECT_TIMEOUT", "abc", "HERALD_TWILIO_CONNECT_TIMEOUT: must be a number of seconds from 0 to 600"),
        ("HERALD_AGENT_CALLER", "nobody", "HERALD_AGENT_CALLER: must be one of eu-marketplace-agent"),
    ],
)
def test_a_bad_setting_stops_the_tool_server_in_one_line(variable: str, value: str, line: str) -> None:
    """Before, the server started and the agent's first tool call hit a traceback."""
    import os
    import subprocess

    ran = subprocess.run(
        [sys.executable, "-m", "agent_tool"], env={**os.environ, variable: value}, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 1
    assert ran.stderr == line + "\n"
