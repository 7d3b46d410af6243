"""The outbox relay: claim committed notices, start them through the client, mark them relayed.

    claim ....... one short transaction: the due rows, FOR UPDATE SKIP LOCKED, leased for LEASE
                  (next_try_at moves ahead), so several relays share one outbox without sharing a row
    start ....... HeraldClient.send_notice: idempotent by business key, so a row started twice (the
                  relay died after starting, before marking) is still one intent per channel
    mark ........ relayed; or refused with the named errors (Herald refuses the payload: never
                  retried blindly); or, for a transient failure, due again after a backoff

A row is read as text and parsed here, bounded in size (MAX_NOTICE_BYTES) and depth
(MAX_NOTICE_DEPTH): a row nested 3,000 levels deep used to raise RecursionError inside the
database driver on every claim, killing the relay and stranding every row behind it. Now such a
row is marked refused with the rule it broke, and the relay goes on.

A relay that dies anywhere loses nothing: an unmarked row comes due again when its lease ends.
LISTEN/NOTIFY wakes the relay as soon as a service commits; polling every POLL_SECONDS stays as
the safety net for a missed notification or a lease that ended.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from psycopg import AsyncConnection
from psycopg import Error as DatabaseError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from herald.client import NoticeReceipt
from herald.intake.errors import IntentConflict, InvalidIntent
from herald.intake.notice import NoticeRequest, parse_notice
from herald.outbox import CHANNEL
from herald.settings import OUTBOX_LEASE_SECONDS

log = logging.getLogger("herald.outbox")

BATCH = 50
# Long enough for a batch's starts; a relay that dies mid-batch hands its rows on after this
# (HERALD_OUTBOX_LEASE_SECONDS sets it for `python -m herald.outbox`).
LEASE = timedelta(seconds=OUTBOX_LEASE_SECONDS)
POLL_SECONDS = 1.0
# Transient failures (the cluster away, a timeout): 1 s, 2 s, 4 s ... up to 5 minutes.
BACKOFF_CAP = timedelta(minutes=5)
# A notice is a few channels of short render data: 64 KiB is far above any real one, and bounds
# what one row costs the relay to read. Deeper than 32 levels is no notice either (a real one is 4).
MAX_NOTICE_BYTES = 64 * 1024
MAX_NOTICE_DEPTH = 32


@dataclass
class RelayPass:
    relayed: int = 0
    refused: int = 0
    retrying: int = 0

    @property
    def claimed(self) -> int:
        return self.relayed + self.refused + self.retrying


@dataclass
class Backlog:
    pending: int
    oldest_age_seconds: float | None
    refused: int = 0
    relayed: int = 0
    by_state: dict[str, int] = field(default_factory=dict)


class NoticeStarter(Protocol):
    """What the relay needs of a Herald client: start a notice's intents, idempotently by key."""

    async def send_notice(self, notice: NoticeRequest) -> NoticeReceipt: ...


class OutboxRelay:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        herald: NoticeStarter,
        *,
        batch: int = BATCH,
        lease: timedelta = LEASE,
    ) -> None:
        self._pool = pool
        self._herald = herald
        self._batch = batch
        self._lease = lease

    async def relay_once(self) -> RelayPass:
        """Claim one batch of due rows and relay each; what happened to them."""
        done = RelayPass()
        # The claimed rows are started concurrently: each start is one round trip to Temporal.
        for outcome in await asyncio.gather(*(self._relay(row) for row in await self._claim())):
            setattr(done, outcome, getattr(done, outcome) + 1)
        return done

    async def _claim(self) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
            # The notice comes back as text, and only up to MAX_NOTICE_BYTES: the driver's own jsonb
            # parsing would run before anything here could bound it.
            await cursor.execute(
                """UPDATE herald_outbox SET next_try_at = now() + %s, tries = tries + 1
                    WHERE id IN (SELECT id FROM herald_outbox
                                  WHERE state = 'pending' AND next_try_at <= now()
                                  ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
                RETURNING id, tries,
                          CASE WHEN octet_length(notice::text) <= %s THEN notice::text END AS notice""",
                (self._lease, self._batch, MAX_NOTICE_BYTES),
            )
            return sorted(await cursor.fetchall(), key=lambda row: row["id"])

    async def _relay(self, row: dict[str, Any]) -> str:
        document = _read_notice(row["notice"])
        if isinstance(document, str):
            return await self._refuse(row["id"], document)
        try:
            notice = parse_notice(document)
        except InvalidIntent as refused:
            return await self._refuse(row["id"], str(refused))
        try:
            await self._herald.send_notice(notice)
        except (InvalidIntent, IntentConflict) as refused:
            return await self._refuse(row["id"], str(refused))
        except Exception as error:  # noqa: BLE001 - any failure to start is this row's, never the relay's
            # The cluster away, a timeout, or a failure nobody foresaw: the row waits and is tried again;
            # the relay itself goes on with the rest.
            delay = min(timedelta(seconds=2 ** min(row["tries"] - 1, 16)), BACKOFF_CAP)
            await self._mark(
                row["id"], "pending", f"start failed ({type(error).__name__}); retrying in {delay.total_seconds():g}s", delay
            )
            return "retrying"
        await self._mark(row["id"], "relayed", None, None)
        return "relayed"

    async def _refuse(self, row_id: int, reason: str) -> str:
        log.warning("outbox row %s refused: %s", row_id, reason)
        await self._mark(row_id, "refused", reason, None)
        return "refused"

    async def _mark(self, row_id: int, state: str, error: str | None, retry_in: timedelta | None) -> None:
        async with self._pool.connection() as conn:
            # Only a row still pending: one erased while this relay held it (herald.outbox.erasure)
            # stays refused, and a row another relay marked after this one's lease ran out stays marked.
            await conn.execute(
                """UPDATE herald_outbox SET state = %s, last_error = %s,
                          relayed_at = CASE WHEN %s = 'relayed' THEN now() END,
                          next_try_at = now() + coalesce(%s, interval '0')
                    WHERE id = %s AND state = 'pending'""",
                (state, error, state, retry_in, row_id),
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until `stop`: whole batches back to back, then wait for a NOTIFY or the poll."""
        async with await AsyncConnection.connect(self._pool.conninfo, autocommit=True) as listener:
            await listener.execute(f"LISTEN {CHANNEL}")
            while not stop.is_set():
                try:
                    done = await self.relay_once()
                except (OSError, DatabaseError) as error:  # the service's database is away: try at the next poll
                    log.warning("outbox claim failed (%s); retrying", type(error).__name__)
                    done = RelayPass()
                if done.claimed >= self._batch:
                    continue  # a full batch: there is probably more
                await _wait_for_notify(listener, stop, POLL_SECONDS)


def _read_notice(text: str | None) -> Any:
    """The row's notice as JSON, or the rule it breaks (a refusal reason naming the field)."""
    if text is None:
        return f"notice: larger than {MAX_NOTICE_BYTES} bytes of JSON"
    if _depth(text) > MAX_NOTICE_DEPTH:
        return f"notice: nested deeper than {MAX_NOTICE_DEPTH} levels"
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # jsonb text is JSON; kept for a driver that says otherwise
        return "notice: not readable as JSON"


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


async def _wait_for_notify(listener: AsyncConnection, stop: asyncio.Event, timeout: float) -> None:
    notified = asyncio.ensure_future(_next_notify(listener))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({notified, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (notified, stopped):
            waiter.cancel()
        await asyncio.gather(notified, stopped, return_exceptions=True)


async def _next_notify(listener: AsyncConnection) -> None:
    async for _ in listener.notifies():
        return


async def backlog(pool: AsyncConnectionPool) -> Backlog:
    """Rows not yet relayed and the age of the oldest; refused and relayed counts."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """SELECT count(*) FILTER (WHERE state = 'pending'),
                      extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')),
                      count(*) FILTER (WHERE state = 'refused'),
                      count(*) FILTER (WHERE state = 'relayed')
                 FROM herald_outbox"""
        )
        pending, oldest, refused, relayed = await cursor.fetchone()  # type: ignore[misc]
    return Backlog(pending=pending, oldest_age_seconds=float(oldest) if oldest is not None else None,
                   refused=refused, relayed=relayed)  # fmt: skip


def describe(backlog_now: Backlog) -> str:
    oldest = "-" if backlog_now.oldest_age_seconds is None else f"{backlog_now.oldest_age_seconds:.1f}s"
    return (
        f"outbox backlog {backlog_now.pending}   oldest unrelayed {oldest}   "
        f"relayed {backlog_now.relayed}   refused {backlog_now.refused}"
    )
