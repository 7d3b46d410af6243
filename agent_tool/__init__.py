"""A narrow tool for AI agents: notify a seller or a member through Herald, never free text.

Exposed as an MCP server over stdio (``python -m agent_tool``) and as JSON Schema for other agent
frameworks (``python -m agent_tool --json-schema``). The handlers (``tools.py``) are the service's
deterministic code; the demo store (``store.py``) stands in for its database.
"""
