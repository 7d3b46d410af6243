"""Run the ESP emulator: ``python -m emulator.esp --smtp-port N --admin-port M --webhook-url URL``.

Test and demo use only. It binds the host given (default 127.0.0.1), speaks
plaintext SMTP (real relays use STARTTLS or implicit TLS), and posts events
only to loopback hosts. It prints the ports and the event-verification public
key at start, and stops both servers on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path


from emulator.esp.config import EspConfig
from emulator.esp.faults import load_faults_file
from emulator.esp.server import EspServer
from emulator.launch import built, stop_on_signals


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m emulator.esp",
        description="SendGrid stand-in: SMTP relay and Signed Event Webhook with fault injection (test/demo only).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind both servers (default 127.0.0.1)")
    parser.add_argument("--smtp-port", type=int, default=2525, help="SMTP port (default 2525; 0 = any free port)")
    parser.add_argument("--admin-port", type=int, default=8235, help="admin API port (default 8235; 0 = any free port)")
    parser.add_argument("--webhook-url", required=True, help="where events are posted (loopback hosts only)")
    parser.add_argument("--username", help="SMTP AUTH username clients must present (SendGrid uses 'apikey')")
    parser.add_argument(
        "--password",
        default=os.environ.get("ESP_EMULATOR_PASSWORD"),
        help="SMTP AUTH password (default: $ESP_EMULATOR_PASSWORD); only with --username",
    )
    parser.add_argument("--step-ms", type=int, default=100, help="milliseconds between a recipient's events")
    parser.add_argument("--max-messages", type=int, default=10_000, help="messages kept before DATA answers 452")
    parser.add_argument("--faults-file", type=Path, help='JSON list of {"to": ..., "fault": ..., ...} armed at start')
    parser.add_argument("--private-key-file", type=Path, help="PEM P-256 key that signs events (default: a new one)")
    parser.add_argument(
        "--activity-api-key",
        default=os.environ.get("ESP_EMULATOR_ACTIVITY_API_KEY"),
        help="Bearer key of the Email Activity API (GET /v3/messages on the admin port; default: "
        "$ESP_EMULATOR_ACTIVITY_API_KEY); without one the API answers 403, as for an account without the add-on",
    )
    parser.add_argument(
        "--activity-lag-ms", type=int, default=1000, help="how long after acceptance the Activity API shows a message"
    )
    parser.add_argument(
        "--activity-requests-per-minute",
        type=int,
        default=6,
        help="Activity API rate limit (default 6, SendGrid's documented limit; 0 = unlimited)",
    )
    parser.add_argument(
        "--smtputf8", action="store_true", help="offer SMTPUTF8 (RFC 6531: non-ASCII local parts); off, as SendGrid documents none"
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    if (args.username is None) != (args.password is None):
        parser.error("--username and --password go together (the password may come from $ESP_EMULATOR_PASSWORD)")
    return args


def build_config(args: argparse.Namespace) -> EspConfig:
    """The emulator settings the command line asks for."""
    return EspConfig(
        host=args.host,
        smtp_port=args.smtp_port,
        admin_port=args.admin_port,
        webhook_url=args.webhook_url,
        username=args.username,
        password=args.password,
        step_ms=args.step_ms,
        max_messages=args.max_messages,
        private_key_file=args.private_key_file,
        initial_faults=load_faults_file(args.faults_file) if args.faults_file else (),
        activity_api_key=args.activity_api_key,
        activity_lag_ms=args.activity_lag_ms,
        # 0 on the command line reads as "no limit"; the config says that with None.
        activity_requests_per_minute=args.activity_requests_per_minute or None,
        smtputf8=args.smtputf8,
    )


async def _serve(server: EspServer) -> int:
    stop = stop_on_signals()
    try:
        await server.start()
    except OSError as error:
        print(f"esp emulator: cannot listen: {error}", file=sys.stderr)
        return 2
    try:
        config = server.config
        # Ports and key on stdout, flushed: a parent process reads them to configure its client and verifier.
        print(f"esp emulator: smtp {config.host}:{server.smtp_port}, admin http://{config.host}:{server.admin_port}/")
        print(f"esp emulator: event webhook public key {server.public_key}", flush=True)
        await server.wait_for_stop(stop)
    finally:
        await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # aiosmtpd 1.4 warns about its own deprecated attribute on every successful AUTH; nothing to act on.
    logging.getLogger("mail.log").addFilter(lambda record: "login_data is deprecated" not in record.getMessage())
    server = built("esp emulator", lambda: EspServer(build_config(args)), args.host)
    if server is None:
        return 2
    return asyncio.run(_serve(server))


if __name__ == "__main__":
    sys.exit(main())
