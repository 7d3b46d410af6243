"""`erase`: a recipient's personal data out of the outbox, Temporal and the ledger, in that order."""

from __future__ import annotations

import argparse
import asyncio
from contextlib import AsyncExitStack
from datetime import timedelta

from herald import cli_input
from herald.ledger.privacy import erase_recipient
from herald.ledger.recipient_intents import intents_addressed_to
from herald.outbox.erasure import erase_outbox_notices
from herald.runtime.process import LEDGER, OUTBOX, ProcessRuntime
from herald.temporal_erasure import ExecutionErasure, erase_executions

# `erase` did what it could, but an intent was still running (or a deletion unconfirmed): run it again later.
EXIT_ERASE_INCOMPLETE = 3


async def cmd_erase(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Erase RECIPIENT from every place Herald wrote them: the outbox, Temporal, the ledger.

    The order matters. The outbox goes first, so no relay starts another intent to them. The
    ledger's intents are looked up before the ledger forgets the recipient. Temporal comes before
    the ledger: a running intent is cancelled and given time to close, and a closing intent still
    writes its last rows to the ledger and still reads the recipient back, so the ledger's erasure
    comes after it has closed rather than under it. An intent still running at the bound (it has
    a message at the provider and tracks it) meets the ledger's erasure while running; it is named,
    the command exits 3, and erasing again once it has closed deletes it (the ledger still finds it
    by fingerprint).
    """
    recipient = cli_input.recipient(args.recipient, "RECIPIENT")
    rule = "required (erasure runs in the ledger's database)"
    runtime.required_database_url(LEDGER, rule)
    has_outbox = runtime.database_url(OUTBOX) is not None
    keyring = runtime.keyring()
    # Every place is reached before anything is erased: one that does not answer stops the command
    # with nothing changed, not with an erasure done in part.
    temporal = await runtime.temporal()
    async with AsyncExitStack() as opened:
        pool = await opened.enter_async_context(runtime.pool(LEDGER, rule))
        outbox_pool = await opened.enter_async_context(runtime.pool(OUTBOX, "required")) if has_outbox else None
        workflow_ids: set[str] = set()
        if outbox_pool is None:
            print("outbox: not configured (HERALD_OUTBOX_DATABASE_URL unset)")
        else:
            notices = await erase_outbox_notices(outbox_pool, recipient)
            workflow_ids.update(notices.workflow_ids)
            print(
                f"outbox: {notices.rows_erased} notice(s) addressed to them replaced by the erased marker "
                f"({notices.never_relayed} not yet relayed: refused, never to be relayed)"
            )
            # A relay may be starting one of those rows from a copy read before: its intent exists
            # once the relay's claim ends, and Temporal is searched after that.
            await asyncio.sleep(min(notices.claim_seconds_left, runtime.settings().outbox.lease_seconds))
        workflow_ids.update(await intents_addressed_to(pool, recipient, keyring))
        executions = await erase_executions(
            temporal, sorted(workflow_ids), operator=args.operator, reason=args.reason,
            close_within=timedelta(seconds=args.close_within),
        )  # fmt: skip
        print(_describe_executions(executions, args.close_within))
        erasure = await erase_recipient(
            pool, recipient=recipient, keyring=keyring, operator=args.operator, reason=args.reason
        )
    print(
        f"ledger: erased {erasure.rows_affected} intent(s) of recipient fingerprint "
        f"{erasure.recipient_fingerprint[:16]}: number or address, render data, bodies and subjects; states, "
        f"times and reasons kept; any opt-out kept by fingerprint; {erasure.artifacts_erased} attachment(s) "
        f"erased, {erasure.keys_destroyed} data key(s) destroyed (ledger_purges id {erasure.purge_id})"
    )
    return 0 if executions.complete else EXIT_ERASE_INCOMPLETE


def _describe_executions(done: ExecutionErasure, close_within: int) -> str:
    """The Temporal line of `erase`; workflow ids carry no personal data, so the intents left
    running are named."""
    intents = len({run.workflow_id for run in done.deleted})
    line = f"temporal: {len(done.deleted)} run(s) of {intents} intent(s) deleted, verified gone"
    if done.cancel_requested:
        line += f"; {len(done.cancel_requested)} running intent(s) asked to cancel first"
    if done.still_running:
        line += (
            f"; STILL RUNNING after {close_within}s, not deleted and not terminated: "
            f"{', '.join(done.still_running)} (run erase again once they close)"
        )
    if done.unverified:
        line += f"; {len(done.unverified)} run(s) deleted but still answering (run erase again)"
    if done.archival_enabled:
        line += "; this namespace archives closed executions: archived copies are out of reach"
    return line
