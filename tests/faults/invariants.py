"""The fault matrix's invariants, checked from the emulator's and the ledger's own records.

I1 at most one live message per intent at the emulator; I2 no 2xx from the receipt endpoint
without a committed inbox row; I3 every inbox row ends applied or ignored, exactly once;
I4 a terminal state never changes; I5 ledger rows are append-only and each intent's
sequences have no gaps; I6 (checked where input is refused) no workflow and no send.
"""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool

from tests import reads
from tests.stack import Emulator

TERMINAL = {"delivered", "undelivered", "unknown", "permanent_failure", "expired", "cancelled", "suppressed"}
_DEFINITE_FAILURES = {"failed", "undelivered", "canceled"}


async def check_invariants(pool: AsyncConnectionPool, emulator: Emulator, intents: dict[str, str]) -> None:
    """Assert I1-I5 for `intents` (workflow id -> recipient); waits up to 20 s for I3 to settle."""
    sids: list[str] = []
    for workflow_id, recipient in intents.items():
        messages = await emulator.messages(recipient)
        live = [m for m in messages if m["status"] not in _DEFINITE_FAILURES]
        assert len(live) <= 1, f"I1: {workflow_id} has {len(live)} live messages at the emulator"
        for message in messages:
            sids.append(message["sid"])
            # I2: every callback the receipt server answered 2xx has its inbox row.
            for callback in message["callbacks"]:
                if callback.get("http_status") and 200 <= callback["http_status"] < 300:
                    stored = await reads.tuples(
                        pool,
                        "SELECT 1 FROM receipt_inbox WHERE provider_message_id = %s AND provider_status = %s",
                        message["sid"],
                        callback["status"],
                    )
                    assert stored, f"I2: 2xx for {message['sid']} {callback['status']} without an inbox row"
    # I3: every inbox row of these messages has exactly one verdict (receipt_outcomes' key makes it at most one).
    undecided: list[tuple] = []
    for _ in range(100):
        undecided = await reads.tuples(
            pool,
            """SELECT r.id, r.provider_message_id, r.provider_status FROM receipt_inbox r
                WHERE r.provider_message_id = ANY(%s)
                  AND NOT EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = r.id)""",
            sids,
        )
        if not undecided:
            break
        await asyncio.sleep(0.2)
    assert not undecided, f"I3: inbox rows without a verdict: {undecided}"
    ids = list(intents)
    # I4: no transition ever leaves a terminal state.
    after_terminal = await reads.tuples(
        pool,
        "SELECT workflow_id, seq, from_state FROM transitions WHERE workflow_id = ANY(%s) AND from_state = ANY(%s)",
        ids,
        list(TERMINAL),
    )
    assert not after_terminal, f"I4: transitions out of a terminal state: {after_terminal}"
    # I5: sequences are dense from 1, and the tables refuse rewrites (the triggers are in place).
    for table in ("transitions", "observations"):
        gaps = await reads.tuples(
            pool,
            f"""SELECT workflow_id FROM {table} WHERE workflow_id = ANY(%s)
                 GROUP BY workflow_id HAVING max(seq) <> count(*) OR min(seq) <> 1""",
            ids,
        )
        assert not gaps, f"I5: gaps in {table} of {gaps}"
    triggers = await reads.tuples(pool, "SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%%append_only'")
    assert triggers[0][0] >= 6, "I5: append-only triggers missing"
