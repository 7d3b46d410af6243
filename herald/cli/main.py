"""Herald's command line for services and operators (``starter.py`` at the repository's top runs it).

    python starter.py send --key order_receipt:pay_157 --to +15551230001 --template order_receipt \\
        --version 1 --data order_ref=ord_1 --data amount=42.50 --data currency=EUR --data merchant=Shop
    python starter.py send --file intent.json     # or {"business_key": ..., "channels": [{...sms}, {...email}]}
    python starter.py status order_receipt:pay_157
    python starter.py cancel order_receipt:pay_157 --reason "seat filled" --operator alice
    python starter.py report
    python starter.py --help                      # every command, with examples; COMMAND --help for one

Every command checks all of its input (arguments, files, JSON, render data and the settings it
uses) before it opens any connection, so a mistake is reported as that mistake even when Temporal
or PostgreSQL is down. Exit codes: 0 done; 2 bad input or settings, as one line naming the option
(or variable) and the rule, never the value typed; 1 a service that failed or could not be
reached, as one line; 3 `erase` done in part (an intent was still running: run it again later);
130 interrupted (``herald.runtime.exits``).

Settings come from HERALD_* variables, over those of the file HERALD_ENV_FILE names; the entry
point may name a default file (``starter.py`` names the `.state/stack.env` a running local stack
writes, so a command finds that stack with nothing exported).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from herald.cli.parser import parse_args
from herald.runtime import exits
from herald.runtime.process import ProcessRuntime
from herald.settings import Settings, load_settings
from herald.variables import environment


def read_settings(env_file: Path | None) -> Settings:
    """The settings of one command: the environment over the env file's variables (read late, once
    the command's arguments are checked)."""
    return load_settings(environment(env_file))


def run(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Run the parsed command; every failure becomes one line on stderr and an exit code."""
    try:
        return int(asyncio.run(args.run(args, runtime)))
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 (a bug, too, is one line: see exits.failure)
        return exits.fail(*exits.failure(error))


def main(argv: Sequence[str] | None = None, *, env_file: Path | None = None) -> int:
    """Parse `argv`, run the command with settings from the environment (over `env_file`), exit code."""
    args = parse_args(argv)
    # Failures are reported in one line; the pool's own retry warnings would add lines to stderr.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    runtime = ProcessRuntime(lambda: read_settings(env_file), own_temporal_runtime=True)
    try:
        return run(args, runtime)
    finally:
        runtime.close()


if __name__ == "__main__":
    sys.exit(main())
