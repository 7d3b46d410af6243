"""``python -m agent_tool``: the MCP server over stdio. ``--json-schema`` prints the tools instead.

    HERALD_AGENT_CALLER   who the agent acts for (required; one of tools.CALLERS)
    HERALD_TEMPORAL_*     where intents are started

Without a caller the server does not start: a tool that guessed one would act with that caller's
authority for whoever launched it. ``--json-schema`` needs none, since it starts nothing and
describes the tools the same for every caller.
"""

from __future__ import annotations

import argparse
import asyncio

from agent_tool.server import json_schema, serve
from agent_tool.tools import CALLERS, Caller
from herald.runtime.process import ProcessRuntime
from herald.settings import InvalidSetting, load_settings
from herald.variables import given_variables

CALLER_VARIABLE = "HERALD_AGENT_CALLER"


def configured_caller(value: str | None) -> Caller:
    """The caller ``value`` names; SystemExit with one line naming the variable and the rule otherwise."""
    name = (value or "").strip()  # blank is unset, as for every Herald variable
    known = ", ".join(sorted(CALLERS))
    if not name:
        raise SystemExit(f"{CALLER_VARIABLE}: required, the caller the agent acts for (one of {known})")
    if name not in CALLERS:
        raise SystemExit(f"{CALLER_VARIABLE}: must be one of {known}")
    return CALLERS[name]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_tool", description=__doc__.splitlines()[0])
    parser.add_argument("--json-schema", action="store_true", help="print the tool definitions as JSON Schema and exit")
    args = parser.parse_args()
    if args.json_schema:
        print(asyncio.run(json_schema()))
        return
    caller = configured_caller(given_variables().get(CALLER_VARIABLE))
    # Settings and the fingerprint keys are checked before the server answers anything: a bad one
    # is one line, not a traceback at the agent's first tool call.
    try:
        runtime = ProcessRuntime(load_settings())
        runtime.keyring()
    except InvalidSetting as error:
        raise SystemExit(str(error)) from None
    serve(caller, runtime)  # stdio


if __name__ == "__main__":
    main()
