"""Run the Twilio emulator: ``python -m emulator --account-sid AC... --auth-token ...``.

Test and demo use only. It binds to the host given (default 127.0.0.1) and
posts status callbacks only to loopback hosts unless ``--allow-callback-host``
names another.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from emulator.app import create_app
from emulator.config import LOOPBACK_HOSTS, EmulatorConfig
from emulator.faults import load_faults_file

# Hang faults hold requests open; shutdown must not wait for them for long.
_GRACEFUL_SHUTDOWN_SECONDS = 2


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m emulator", description="Twilio-compatible SMS emulator with fault injection (test/demo only)."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8234, help="port to bind (default 8234)")
    parser.add_argument("--account-sid", required=True, help="account SID clients must authenticate as (AC + 32 hex)")
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("EMULATOR_AUTH_TOKEN"),
        help="auth token clients must present and callbacks are signed with (default: $EMULATOR_AUTH_TOKEN)",
    )
    parser.add_argument("--step-ms", type=int, default=100, help="milliseconds per lifecycle step (default 100)")
    parser.add_argument(
        "--rate-limit-per-sender", type=float, default=0, help="messages per second per sender; 0 = unlimited"
    )
    parser.add_argument(
        "--max-messages", type=int, default=10_000, help="messages kept in memory before creates answer 503"
    )
    parser.add_argument("--faults-file", type=Path, help='JSON list of {"to": ..., "fault": ..., ...} armed at start')
    parser.add_argument(
        "--allow-callback-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also post callbacks to this host (repeatable; loopback hosts are always allowed)",
    )
    parser.add_argument(
        "--inbound-url",
        metavar="URL",
        help="the number's incoming-message webhook, where POST /_emulator/inbound posts replies (a loopback URL)",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    if not args.auth_token:
        parser.error("--auth-token is required (or set EMULATOR_AUTH_TOKEN)")
    return args


def build_config(args: argparse.Namespace) -> EmulatorConfig:
    """The emulator settings the command line asks for."""
    return EmulatorConfig(
        account_sid=args.account_sid,
        auth_token=args.auth_token,
        step_ms=args.step_ms,
        rate_limit_per_sender=args.rate_limit_per_sender,
        max_messages=args.max_messages,
        allowed_callback_hosts=LOOPBACK_HOSTS | frozenset(args.allow_callback_host),
        inbound_url=args.inbound_url,
        initial_faults=load_faults_file(args.faults_file) if args.faults_file else (),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = build_config(args)
    except (OSError, ValueError) as error:
        print(f"emulator: {error}", file=sys.stderr)
        return 2
    if args.host not in LOOPBACK_HOSTS:
        print(
            f"emulator: binding {args.host}; the admin API still answers loopback clients only. "
            "This is a test tool: never expose it beyond a private network.",
            file=sys.stderr,
        )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        lifespan="on",
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
