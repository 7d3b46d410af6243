"""The agent tool through a real MCP client session: the `mcp` package's client speaks to
`python -m agent_tool` over stdio; intents start on the test stack and are counted there."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from psycopg_pool import AsyncConnectionPool
from temporalio.service import RPCError

from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.message import Channel
from tests.stack import Emulator

SELLER_PHONE = "+15550100017"  # sel_17, the seller of ord_1001 in agent_tool/store.py
CALLER = "eu-marketplace-agent"


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    return await asyncio.wait_for(session.call_tool(tool, arguments), 30)


async def test_an_agent_lists_the_tools_and_starts_one_intent_however_often_it_calls(
    stack: LocalStack, herald: HeraldClient, emulator: Emulator
) -> None:
    """Two identical calls start one intent and one message; a caller outside its marketplace is refused."""
    env = {**stack.config.service_env(stack.database_url), "HERALD_AGENT_CALLER": CALLER}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tool"], env=env)
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


def _run_tool(*args: str, **overrides: str | None) -> subprocess.CompletedProcess[str]:
    """`python -m agent_tool` with the test's environment, each override set (or, given None, removed)."""
    env = {**os.environ, **{name: value for name, value in overrides.items() if value is not None}}
    for name in (name for name, value in overrides.items() if value is None):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "agent_tool", *args], check=False, env=env, capture_output=True, text=True, timeout=60)


REQUIRED = "HERALD_AGENT_CALLER: required, the caller the agent acts for (one of eu-marketplace-agent)"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"HERALD_AGENT_CALLER": None}, REQUIRED),
        ({"HERALD_AGENT_CALLER": ""}, REQUIRED),
        ({"HERALD_AGENT_CALLER": "  "}, REQUIRED),
        ({"HERALD_AGENT_CALLER": "nobody"}, "HERALD_AGENT_CALLER: must be one of eu-marketplace-agent"),
        (
            {"HERALD_AGENT_CALLER": CALLER, "HERALD_TWILIO_CONNECT_TIMEOUT": "abc"},
            "HERALD_TWILIO_CONNECT_TIMEOUT: must be a number of seconds from 0 to 600",
        ),
    ],
    ids=["caller-unset", "caller-empty", "caller-blank", "caller-unknown", "bad-setting"],
)
def test_a_missing_caller_or_a_bad_setting_stops_the_tool_server_in_one_line(overrides: dict[str, str | None], line: str) -> None:
    """No configured caller (or a bad one, or a bad setting) exits 1 with one line and no traceback, before serving."""
    ran = _run_tool(**overrides)
    assert ran.returncode == 1
    assert ran.stderr == line + "\n"
    assert ran.stdout == ""


def test_the_json_schema_needs_no_caller() -> None:
    """`--json-schema` starts nothing and acts for no one, so it prints both tools without a caller."""
    ran = _run_tool("--json-schema", HERALD_AGENT_CALLER=None)
    assert ran.returncode == 0, ran.stderr
    assert {tool["name"] for tool in json.loads(ran.stdout)} == {"notify_seller", "notify_member"}


async def test_an_agent_may_let_a_notice_wait_and_the_tenant_is_the_records(
    stack: LocalStack, herald: HeraldClient, pool: AsyncConnectionPool
) -> None:
    """The tool's `priority` is a strict key 1..5 (9, "4" and true are errors naming it); priority 4 is
    granted to a class cancellation, and the intent is the studio's, a tenant the model never named."""
    env = {**stack.config.service_env(stack.database_url), "HERALD_AGENT_CALLER": CALLER}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tool"], env=env)
    arguments = {"class_occurrence_id": "cls_502", "member_id": "mem_9", "action": "class_cancelled"}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await asyncio.wait_for(session.initialize(), 30)
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        for name in ("notify_seller", "notify_member"):
            schema = tools[name].input_schema
            assert "tenant" not in schema["properties"] and "priority" not in schema["required"]
            assert {"type": "integer", "minimum": 1, "maximum": 5} in schema["properties"]["priority"]["anyOf"]
        for bad in (9, "4", True):
            refused = await _call(session, "notify_member", {**arguments, "priority": bad})
            assert refused.is_error and "priority" in refused.content[0].text, refused
        started = await _call(session, "notify_member", {**arguments, "priority": 4})
        assert started.structured_content["outcome"] == "started", started
    key = started.structured_content["business_key"]
    final = await asyncio.wait_for(herald.wait(key), 60)
    assert [attempt.priority for attempt in final.attempts] == [4]
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT tenant FROM intents WHERE workflow_id = %s", (f"{key}/sms",))
        assert await cursor.fetchone() == ("riverside",)
