"""``python -m agent_tool``: the MCP server over stdio. ``--json-schema`` prints the tools instead.

    HERALD_AGENT_CALLER   who the agent acts for (default eu-marketplace-agent; see tools.CALLERS)
    HERALD_TEMPORAL_*     where intents are started
"""

from __future__ import annotations

import argparse
import asyncio
import os

from agent_tool.server import json_schema, server
from agent_tool.tools import CALLERS
from herald.settings import InvalidSetting, load_settings


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_tool", description=__doc__.splitlines()[0])
    parser.add_argument("--json-schema", action="store_true", help="print the tool definitions as JSON Schema and exit")
    args = parser.parse_args()
    if args.json_schema:
        print(asyncio.run(json_schema()))
        return
    # Settings are checked before the server answers anything: a bad one is one line, not a
    # traceback at the agent's first tool call.
    try:
        load_settings()
    except InvalidSetting as error:
        raise SystemExit(str(error)) from None
    caller = os.environ.get("HERALD_AGENT_CALLER", "eu-marketplace-agent")
    if caller not in CALLERS:
        raise SystemExit("HERALD_AGENT_CALLER: must be one of " + ", ".join(sorted(CALLERS)))
    server.run()  # stdio


if __name__ == "__main__":
    main()
