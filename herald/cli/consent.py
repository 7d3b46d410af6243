"""`consent grant`: record that a recipient agreed to a category's messages, by fingerprint only."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from herald import cli_input
from herald.cli.policy import POLICY_LEDGER
from herald.ledger.policy_store import grant_consent
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.send_policy import Category


async def cmd_consent_grant(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    recipient = cli_input.recipient(args.recipient, "RECIPIENT")
    fingerprint = runtime.keyring().recipient(recipient)
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool:
        await grant_consent(
            pool, fingerprint=fingerprint, category=Category(args.category), source=args.source,
            granted_at=datetime.now(UTC),
        )  # fmt: skip
    print(f"consent recorded for {args.category} (recipient fingerprint {fingerprint[:16]})")
    return 0
