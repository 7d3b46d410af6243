"""`status`: a notice's channels side by side, or one intent live from Temporal with its ledger rows."""

from __future__ import annotations

import argparse

from psycopg_pool import AsyncConnectionPool

from herald.cli.connections import herald_client
from herald.core.intent import workflow_id_for
from herald.intake.errors import HeraldError
from herald.ledger.history import IntentHistory, intent_history
from herald.ledger.recipient_requests import RecordedRequest, requests_of
from herald.notice_view import render_notice
from herald.runtime.process import LEDGER, ProcessRuntime


async def cmd_status(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    if args.channel is None:
        return await _notice_status(args, runtime)
    url = runtime.database_url()  # checked for form before Temporal is connected to
    herald = await herald_client(runtime)
    live = await herald.status(args.key, args.channel)
    print(f"intent      {live.workflow_id}")
    print(f"template    {live.template_id} v{live.template_version}   content sha256 {live.content_sha256}")
    print(f"state       {live.state.value}" + (f"   closed by {live.closed_by}" if live.closed_by else ""))
    print(f"tenant      {live.tenant}")
    for attempt in live.attempts:
        print(
            f"attempt {attempt.number}   ref {attempt.attempt_ref}   "
            f"submit {attempt.submit_result.value if attempt.submit_result else '-'}   "
            f"provider {attempt.provider_id or '-'} {attempt.provider_status.value if attempt.provider_status else ''}"
            f"   lookups {attempt.lookups}"
            + (f"   retry after {attempt.retry_delay_seconds:.1f}s" if attempt.retry_delay_seconds else "")
            + (f"   priority {attempt.priority}" if attempt.priority is not None else "")
            + (f" weight {attempt.fairness_weight:g}" if attempt.fairness_weight is not None else "")
            + ("   SEEN AFTER PRESUMED NOT ACCEPTED" if attempt.seen_after_presumed_absent else "")
        )
    if url is None:
        print("(set DATABASE_URL to include the ledger's transitions and observations)")
        return 0
    async with runtime.pool(LEDGER, "required") as pool:
        history = await intent_history(pool, workflow_id_for(args.key, args.channel))
        requests = await _recipients_requests(pool, history, args.channel)
    if history is None:
        print("ledger: no row yet")
        return 0
    _print_history(history, requests)
    return 0


async def _recipients_requests(
    pool: AsyncConnectionPool, history: IntentHistory | None, channel: str
) -> list[RecordedRequest]:
    """What the intent's recipient asked of us (STOP, START, unsubscribes), found by the fingerprint
    the intent row carries: the number itself is never looked up."""
    if history is None or history.recipient_fingerprint is None:
        return []
    async with pool.connection() as conn:
        return await requests_of(conn, [history.recipient_fingerprint], channel)


def _print_history(history: IntentHistory, requests: list[RecordedRequest]) -> None:
    print("attempts (ledger):")
    for a in history.attempts:
        # Which provider the route handed it to and why (pinned, outage skipped, probe...).
        policy = f" policy v{a.policy_version}" if a.policy_version is not None else ""
        print(
            f"  {a.number:>3} {a.prepared_at:%H:%M:%S.%f} {a.provider or '-'}{policy}: {a.route_reason or 'no route recorded'}"
        )
    print("transitions (ledger):")
    for t in history.transitions:
        print(f"  {t.seq:>3} {t.at:%H:%M:%S.%f} {t.from_state:>17} -> {t.to_state:<17} [{t.source}] {t.reason}")
    print("observations (ledger):")
    for o in history.observations:
        verdict = "applied" if o.applied else "ignored"
        print(
            f"  {o.seq:>3} attempt {o.attempt_number or '-'} [{o.source}] {o.kind} "
            f"{o.provider_status or ''} {verdict}: {o.reason}"
        )
    print("the recipient's requests on this channel (ledger):" + ("" if requests else " none"))
    for r in requests:
        category = f" ({r.category})" if r.category else ""
        print(f"  {r.requested_at:%Y-%m-%d %H:%M:%S} {r.request}{category} by {r.source}: {r.detail}")


async def _notice_status(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Every channel's intent under the key, side by side."""
    herald = await herald_client(runtime)
    found = await herald.notice_status(args.key)
    if not any(found.values()):
        raise HeraldError(f"key: no intent on any channel for {args.key}")
    print(render_notice(args.key, {channel.value: status for channel, status in found.items()}))
    return 0
