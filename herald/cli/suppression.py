"""`suppression list` and `suppression lift`: what a recipient's suppression rests on, and lifting it.

What suppresses now is the policy gate's own reading (``policy_store.standing``, the statement every
submit runs, and ``Standing.suppressed_because``), category by category; what each recorded request
or report stops is ``PolicyRules.stopped_by``, the same rule read the other way.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from herald import cli_input
from herald.cli.policy import POLICY_LEDGER
from herald.fingerprints import short
from herald.ledger.policy_store import (
    Standing,
    lift_suppression,
    standing,
    suppression_evidence,
    suppression_lifts,
)
from herald.ledger.recipient_requests import requests_of
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.send_policy import Category

# What a recipient's own request does, beside what it stops (an opt-in lifts, others are recorded).
_OPT_OUTS = ("opt_out", "unsubscribe")


async def cmd_suppression_lift(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    recipient = cli_input.recipient(args.recipient, "RECIPIENT", args.channel)
    fingerprint = runtime.keyring().recipient(recipient)
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool:
        at = await lift_suppression(
            pool, fingerprint=fingerprint, channel=args.channel, operator=args.operator, reason=args.reason
        )
    print(f"suppression lifted at {at.isoformat()} (evidence before it no longer suppresses)")
    return 0


async def cmd_suppression_list(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """What RECIPIENT asked of us and what the providers reported, and whether each suppresses now."""
    recipient = cli_input.recipient(args.recipient, "RECIPIENT", args.channel)
    channel = args.channel or ("sms" if recipient.startswith("+") else "email")
    fps = runtime.keyring().recipient_candidates(recipient)
    now = datetime.now(UTC)
    async with runtime.pool(LEDGER, POLICY_LEDGER) as pool, pool.connection() as conn:
        asked = await requests_of(conn, fps, channel)
        evidence = await suppression_evidence(conn, fps=fps, recipient=recipient, channel=channel)
        lifts = await suppression_lifts(conn, fps=fps, channel=channel)
        # The gate's own reading, category by category: what an attempt prepared now would meet.
        standings = {
            category: await standing(
                conn, at=now, recipient=recipient, channel=channel, category=category, workflow_id="", fps=fps
            )
            for category in Category
        }
    found = standings[Category.TRANSACTIONAL]  # the version in force and the lift: the same for every category
    print(f"recipient fingerprint {short(fps[0])}, channel {channel}, policy v{found.version} in force")
    suppressed = [(c.value, because) for c, s in standings.items() if (because := s.suppressed_because(c))]
    for category, because in suppressed:
        print(f"now: {category} suppressed by {because}")
    if not suppressed:
        print("now: not suppressed")
    print("requests (what the recipient asked):" if asked else "requests: none recorded")
    for r in asked:
        if r.request in _OPT_OUTS:
            effect = _effect(found, r.request, r.requested_at, Category(r.category) if r.category else None)
        else:
            effect = "lifts what came before it" if r.request == "opt_in" else "recorded only"
        scope = f" ({r.category})" if r.category else ""
        print(f"  {r.requested_at.isoformat()}  {r.request}{scope}  {r.source}: {r.detail}  -> {effect}")
    print("evidence (what providers reported):" if evidence else "evidence: none recorded")
    for e in evidence:
        print(f"  {e.seen_at.isoformat()}  {e.cause}  {e.source}: {e.detail}  -> {_effect(found, e.cause, e.seen_at)}")
    if lifts:
        print("lifts (operators):")
    for lift in lifts:
        print(f"  {lift.lifted_at.isoformat()}  by {lift.operator}: {lift.reason}")
    return 0


def _effect(found: Standing, cause: str, seen_at: datetime, scope: Category | None = None) -> str:
    """What one request or report does now: lifted (at or before the latest lift), or the categories
    it stops under the policy in force."""
    if found.lifted_at is not None and seen_at <= found.lifted_at:
        return f"lifted at {found.lifted_at.isoformat()}"
    stopped = found.rules.stopped_by(cause, scope)
    if stopped:
        return f"suppresses {', '.join(c.value for c in stopped)}"
    return f"suppresses nothing under policy v{found.version}"
