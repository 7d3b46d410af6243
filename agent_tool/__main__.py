"""``python -m agent_tool``: the MCP server over stdio. ``--json-schema`` prints the tools instead.

    HERALD_AGENT_CALLER   who the agent acts for (default eu-marketplace-agent; see tools.CALLERS)
    HERALD_TEMPORAL_*     where intents are started
"""

from __future__ import annotations

import argparse
import asyncio

from agent_tool.server import json_schema, server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_tool", description=__doc__.splitlines()[0])
    parser.add_argument("--json-schema", action="store_true", help="print the tool definitions as JSON Schema and exit")
    args = parser.parse_args()
    if args.json_schema:
        print(asyncio.run(json_schema()))
        return
    server.run()  # stdio


if __name__ == "__main__":
    main()
