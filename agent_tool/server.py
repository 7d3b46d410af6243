"""The MCP server: two tools over stdio, each a thin door onto ``AgentTools``.

Arguments are validated against the tools' schemas before a handler runs (an enum value outside
the schema is an error the client sees); the handler's answer is structured (``Started`` or
``Refused``), so an agent acts on fields, not on prose.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer

from agent_tool.store import demo_store
from agent_tool.tools import (
    AgentTools,
    Caller,
    MemberActionField,
    MemberId,
    OccurrenceId,
    OrderId,
    PriorityField,
    SellerActionField,
)
from herald.client import HeraldClient
from herald.ledger.store import open_pool
from herald.runtime.process import ProcessRuntime
from herald.temporal.tracing import tracer_provider, tracing_interceptors

server = MCPServer(
    "herald-notify",
    instructions=(
        "Start an approved notification about a marketplace order or a class booking. You choose the record "
        "and the action; the recipient, the wording and the idempotency key come from the service's records. "
        "Calling twice for the same record and action is safe: it is the same notification."
    ),
)
_tools: AgentTools | None = None
# Set by serve() from HERALD_AGENT_CALLER; never a default, so no call runs with a guessed authority.
_caller: Caller | None = None
# What the process opens from its settings (herald.runtime), set by serve().
_runtime: ProcessRuntime | None = None


def serve(caller: Caller, runtime: ProcessRuntime) -> None:
    """Answer over stdio, every tool call on behalf of ``caller``, with what `runtime` opens."""
    global _caller, _runtime
    _caller, _runtime = caller, runtime
    server.run()


async def _agent_tools() -> AgentTools:
    """Connect on first use: listing the tools needs no Temporal, calling one does."""
    global _tools
    if _tools is None:
        if _caller is None or _runtime is None:
            raise RuntimeError(
                "HERALD_AGENT_CALLER: no caller configured; start the server with serve(caller, runtime)"
            )
        caller, runtime = _caller, _runtime
        settings = runtime.settings()
        tracing = tracer_provider(settings.telemetry, "herald-agent-tool")  # the process lives as long as its spans
        client = await runtime.temporal(interceptors=tracing_interceptors(tracing))
        vault = None
        url = runtime.database_url()
        if url is not None:  # seal with the recipients' keys, as every service with the ledger does
            pool = open_pool(url, max_size=2)
            await pool.open()  # lives as long as the tool server
            vault = runtime.vault(pool)
        herald = HeraldClient(client, settings.temporal.task_queue, keyring=runtime.keyring(), vault=vault,
                              urgent_lane=settings.temporal.urgent_lane)  # fmt: skip
        _tools = AgentTools(demo_store(), herald, caller)
    return _tools


@server.tool(
    description=(
        "Notify the seller of a marketplace order with an approved message: a new order to prepare, or a "
        "cancellation. Returns the notification's business key and current state, or a refusal with a code "
        "(unknown_order, not_authorised, action_not_allowed)."
    )
)
async def notify_seller(order_id: OrderId, action: SellerActionField, priority: PriorityField = None) -> dict[str, Any]:
    answer = await (await _agent_tools()).notify_seller(order_id, action, priority)
    return answer.model_dump(mode="json")


@server.tool(
    description=(
        "Notify a member about a class occurrence with an approved message: a seat opened for a waitlisted "
        "member, or the class was cancelled for a booked member. Returns the notification's business key and "
        "current state, or a refusal with a code (unknown_class, unknown_member, not_authorised, "
        "action_not_allowed)."
    )
)
async def notify_member(
    class_occurrence_id: OccurrenceId, member_id: MemberId, action: MemberActionField, priority: PriorityField = None
) -> dict[str, Any]:
    answer = await (await _agent_tools()).notify_member(class_occurrence_id, member_id, action, priority)
    return answer.model_dump(mode="json")


async def json_schema() -> str:
    """The tools as JSON Schema (name, description, input schema) for agent frameworks other than MCP."""
    tools = await server.list_tools()
    return json.dumps(
        [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools], indent=2
    )
