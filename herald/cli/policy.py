"""`policy list`, `policy show` and `policy publish`: the send policy's versions in the ledger."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from pydantic import ValidationError

from herald import cli_input
from herald.cli_input import CliInputError
from herald.errors import HeraldError
from herald.intent import describe_validation_error
from herald.ledger.policy_store import policy_version, policy_versions, publish_policy
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.send_policy import PolicyRules

# Why a policy command needs DATABASE_URL; consent and suppression live beside the policy.
POLICY_LEDGER = "required (the send policy lives in the ledger's database)"


def _since(effective_from: datetime | None) -> str:
    return "the beginning" if effective_from is None else effective_from.isoformat()


async def cmd_policy_list(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool:
        for row in await policy_versions(pool):
            print(f"v{row.version:<4} effective from {_since(row.effective_from)}   owner {row.owner}   {row.note}")
    return 0


async def cmd_policy_show(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool:
        row = await policy_version(pool, args.version)
    if row is None:
        raise HeraldError(f"VERSION: no policy version {args.version}")
    print(f"v{row.version} effective from {_since(row.effective_from)}, owner {row.owner}: {row.note}")
    print(row.rules.model_dump_json(indent=2))
    return 0


async def cmd_policy_publish(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Publish FILE (JSON rules) as the next version; validated before connecting."""
    raw = cli_input.read_json_object(args.file, "FILE")
    try:
        rules = PolicyRules.model_validate(raw)
    except ValidationError as error:
        # Field paths are shown only where they are identifiers: a key of the file may be anything.
        problems = [describe_validation_error(item) for item in error.errors(include_input=False, include_url=False)]
        raise CliInputError("FILE", "; ".join(f"{field}: {rule}" for field, rule in problems)) from None
    effective = args.effective_from or datetime.now(UTC)
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool:
        version = await publish_policy(pool, rules, effective_from=effective, owner=args.owner, note=args.note)
    print(f"published policy v{version}, effective from {effective.isoformat()}")
    return 0
