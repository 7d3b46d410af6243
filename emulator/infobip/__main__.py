"""Run the Infobip emulator: ``python -m emulator.infobip --port N --api-key KEY [...]``.

Test and demo use only. It binds the host given (default 127.0.0.1), posts delivery reports only to
loopback hosts unless ``--allow-webhook-host`` names another, prints its URL once it listens, and
stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path


from emulator.config import LOOPBACK_HOSTS
from emulator.infobip.config import InfobipConfig
from emulator.infobip.faults import load_faults_file
from emulator.infobip.server import InfobipServer
from emulator.launch import built, stop_on_signals


def _pair(value: str) -> tuple[str, str]:
    user, colon, password = value.partition(":")
    if not colon or not user or not password:
        raise argparse.ArgumentTypeError("expected USER:PASSWORD")
    return user, password


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m emulator.infobip",
        description="Infobip SMS API v3 stand-in with fault injection (test/demo only).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8239, help="port to bind (default 8239; 0 = any free port)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("INFOBIP_EMULATOR_API_KEY"),
        help="the key clients send as 'Authorization: App KEY' (default: $INFOBIP_EMULATOR_API_KEY)",
    )
    parser.add_argument("--basic", type=_pair, metavar="USER:PASSWORD", help="also accept HTTP Basic with these")
    parser.add_argument("--step-ms", type=int, default=100, help="milliseconds per lifecycle step (default 100)")
    parser.add_argument(
        "--time-factor",
        type=float,
        default=1.0,
        help="scales Infobip's report-retry schedule (1 min + 1 min x n^2); 0.01 makes a minute 0.6 s",
    )
    parser.add_argument("--report-max-retries", type=int, default=10, help="retries of a failed report post")
    parser.add_argument(
        "--webhook-basic",
        type=_pair,
        default=os.environ.get("INFOBIP_EMULATOR_WEBHOOK_BASIC") or None,
        metavar="USER:PASSWORD",
        help="post reports with HTTP Basic credentials (default: $INFOBIP_EMULATOR_WEBHOOK_BASIC)",
    )
    parser.add_argument("--subscription-url", help="where reports go when a message names no webhook URL")
    parser.add_argument(
        "--idempotency-grace",
        type=float,
        metavar="SECONDS",
        help="turn idempotent sending on: a messageId reused within SECONDS is rejected as a duplicate",
    )
    parser.add_argument(
        "--logs-requests-per-minute", type=int, default=120, help="GET /sms/3/logs limit (default 120; 0 = none)"
    )
    parser.add_argument("--max-messages", type=int, default=10_000, help="messages kept before sends answer 500")
    parser.add_argument("--faults-file", type=Path, help='JSON list of {"to": ..., "fault": ..., ...} armed at start')
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also post reports to this host (repeatable; loopback hosts are always allowed)",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    if not args.api_key:
        parser.error("--api-key is required (or set INFOBIP_EMULATOR_API_KEY)")
    return args


def build_config(args: argparse.Namespace) -> InfobipConfig:
    """The emulator settings the command line asks for."""
    basic = args.basic or (None, None)
    webhook_basic = args.webhook_basic or (None, None)
    return InfobipConfig(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        basic_username=basic[0],
        basic_password=basic[1],
        step_ms=args.step_ms,
        time_factor=args.time_factor,
        report_max_retries=args.report_max_retries,
        webhook_basic_username=webhook_basic[0],
        webhook_basic_password=webhook_basic[1],
        subscription_url=args.subscription_url,
        idempotency_grace_seconds=args.idempotency_grace,
        # 0 on the command line reads as "no limit"; the config says that with None.
        logs_requests_per_minute=args.logs_requests_per_minute or None,
        max_messages=args.max_messages,
        allowed_webhook_hosts=LOOPBACK_HOSTS | frozenset(args.allow_webhook_host),
        initial_faults=load_faults_file(args.faults_file) if args.faults_file else (),
    )


async def _serve(server: InfobipServer) -> int:
    stop = stop_on_signals()
    try:
        await server.start()
    except OSError as error:
        print(f"infobip emulator: cannot listen: {error}", file=sys.stderr)
        await server.aclose()
        return 2
    try:
        print(f"infobip emulator: {server.url}/", flush=True)
        await server.serve_until(stop)
    finally:
        await server.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = built("infobip emulator", lambda: InfobipServer(build_config(args)), args.host)
    if server is None:
        return 2
    return asyncio.run(_serve(server))


if __name__ == "__main__":
    sys.exit(main())
