"""Ledger reads and writes: parameterised SQL only, each write idempotent on its key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from herald.core.intent import Intent
from herald.core.lifecycle import IntentState, ObservationKind
from herald.core.machine.presumptions import LateReport, Standing, late_report_rows
from herald.core.rows import InboxReport, IntentRecorded, LedgerBatch, ObservationRow, ReceiptOutcomeRow
from herald.core.send_policy import Decision, PolicyDecision
from herald.ledger import claims
from herald.ledger.lending import CheckIfIdle


def open_pool(conninfo: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 5.0) -> AsyncConnectionPool:
    """A pool that is not yet open: callers ``await pool.open()`` or use ``async with``.

    ``timeout`` bounds the wait for a connection: with the database down, the receipt endpoint
    must answer 5xx (so the provider redelivers) well inside the provider's own timeout.
    A connection idle for a while is checked before it is lent (``herald.ledger.lending``).
    """
    lending = CheckIfIdle()
    return AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=timeout,
        check=lending.check,
        reset=lending.reset,
    )


class NotAdmitted(Exception):
    """The send policy deferred or suppressed the attempt: the transaction was rolled back, so
    nothing of the batch was written and the provider must not be called."""

    def __init__(self, decision: PolicyDecision) -> None:
        self.decision = decision
        super().__init__(decision.reason)


class AlreadyHanded(Exception):
    """The admitted attempt's row was committed by an earlier execution of its submit (a commit whose
    answer was lost, or two executions racing): that execution may have called the provider, so this
    one must not. The transaction was rolled back (the earlier one wrote the same rows)."""

    def __init__(self, provider: str | None) -> None:
        self.provider = provider
        super().__init__(f"attempt already handed to {provider or 'its provider'} by an earlier execution")


# Decides, inside the submit's transaction, whether the attempt may go (policy and cooldown claim).
Admission = Callable[[Any], Awaitable[PolicyDecision]]


async def write_batch(
    pool: AsyncConnectionPool,
    batch: LedgerBatch,
    *,
    timeout: float | None = None,
    admit: tuple[str, Admission] | None = None,
    claim: tuple[str, int] | None = None,
) -> IntentRecorded | None:
    """Write one batch of workflow rows in one transaction; a repeated batch inserts nothing new.

    With ``batch.record``, the intent row is inserted first (a no-op when it exists) and what the
    ledger already knew is returned. When the row belongs to another workflow run (Temporal's
    retention forgot an earlier run of this key, the ledger did not), nothing else is written:
    the caller's sequence numbers would collide with that run's rows. ``timeout`` bounds the
    wait for a connection (the pool's own timeout otherwise).

    With ``admit`` (an attempt reference and its admission), the send policy is evaluated in the
    same transaction before any row is written: allowed, the attempt row records the version and
    decision; deferred or suppressed, everything rolls back and ``NotAdmitted`` is raised.

    With ``claim`` (an attempt reference and an observation's sequence number), that observation
    row is this execution's claim on a resubmission of the attempt: found committed already,
    nothing is written and ``AlreadyHanded`` is raised (another execution made that call).

    The statements go in pipeline mode: BEGIN, the inserts and COMMIT travel together and the
    client waits only where it reads an answer (the intent row, the policy), so a checkpoint's
    write is one round trip instead of one per statement; an error still rolls back the whole.
    """
    if batch.is_empty():
        return None
    async with pool.connection(timeout=timeout) as conn, conn.pipeline(), conn.transaction():
        async with conn.cursor() as cursor:
            recorded = None
            if batch.record is not None:
                recorded = await _record_intent(cursor, batch.record.intent, batch.record.run_id)
                if recorded.first_run_id != batch.record.run_id:
                    return recorded
            if admit is not None:
                attempt_ref, admission = admit
                decision = await admission(cursor)
                if decision.decision is not Decision.ALLOW:
                    raise NotAdmitted(decision)  # leaves the transaction: nothing is written
                batch = batch.admitted(attempt_ref, decision.version, decision.decision.value)
                if decision.handed_to is not None:  # the route's choice, committed before the call
                    to = decision.handed_to
                    batch = batch.handed_to(attempt_ref, to.provider, to.route, to.reason)
                # The admitted attempt's row is this execution's claim on the provider call: an insert
                # that finds it (committed by another execution, or waited for on its unique index
                # while a racing one commits) means that execution may have called. One call per
                # attempt, whichever worker, whichever provider the route would choose now.
                if batch.attempts and not await _claim_attempt(cursor, attempt_ref, batch):
                    raise AlreadyHanded(await _handed_provider(cursor, attempt_ref))
            if claim is not None and not await _claim_observation(cursor, batch, claim[1]):
                raise AlreadyHanded(await _handed_provider(cursor, claim[0]))
            await _insert_rows(cursor, batch)
    return recorded


async def _claim_attempt(cursor: Any, attempt_ref: str, batch: LedgerBatch) -> bool:
    """Insert the admitted attempt's row alone; True when this transaction wrote it (no row is
    written twice: ``_insert_rows`` then finds it and does nothing)."""
    [row] = [a for a in batch.attempts if a.attempt_ref == attempt_ref] or [None]
    if row is None:
        return True
    await cursor.execute(
        """INSERT INTO attempts (attempt_ref, workflow_id, number, prepared_at, provider, route,
               policy_version, policy_decision, priority, fairness_weight, route_reason)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1""",
        (row.attempt_ref, row.workflow_id, row.number, row.prepared_at, row.provider, row.route,
         row.policy_version, row.policy_decision, row.priority, row.fairness_weight, row.route_reason),
    )  # fmt: skip
    return await cursor.fetchone() is not None


async def _claim_observation(cursor: Any, batch: LedgerBatch, seq: int) -> bool:
    """Insert the observation numbered `seq` alone; True when this transaction wrote it."""
    [row] = [o for o in batch.observations if o.seq == seq] or [None]
    if row is None:
        return True
    await cursor.execute(
        """INSERT INTO observations (workflow_id, seq, attempt_number, source, kind, provider_id,
               provider_status, error_code, applied, reason, inbox_id, observed_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1""",
        (row.workflow_id, row.seq, row.attempt_number, row.source.value, row.kind.value, row.provider_id,
         row.provider_status, row.error_code, row.applied, row.reason, row.inbox_id, row.observed_at),
    )  # fmt: skip
    return await cursor.fetchone() is not None


async def _handed_provider(cursor: Any, attempt_ref: str) -> str | None:
    await cursor.execute("SELECT provider FROM attempts WHERE attempt_ref = %s", (attempt_ref,))
    found = await cursor.fetchone()
    return found[0] if found else None


async def write_checkpoints(conn: AsyncConnection, batches: list[LedgerBatch]) -> list[None]:
    """The rows of several workflows' checkpoints in the caller's transaction (``GroupCommit``).

    Only batches without an intent row to record: those carry no answer (``write_batch``
    returns None for them) and cannot collide with another run, so they can share statements.
    """
    if any(batch.record is not None for batch in batches):
        raise ValueError("write_checkpoints takes batches without an intent row to record")
    merged = LedgerBatch(
        attempts=[row for batch in batches for row in batch.attempts],
        transitions=[row for batch in batches for row in batch.transitions],
        observations=[row for batch in batches for row in batch.observations],
        receipt_outcomes=[row for batch in batches for row in batch.receipt_outcomes],
    )
    async with conn.cursor() as cursor:
        await _insert_rows(cursor, merged)
    return [None] * len(batches)


async def _insert_rows(cursor: Any, batch: LedgerBatch) -> None:
    if batch.attempts:
        await cursor.executemany(
            """INSERT INTO attempts (attempt_ref, workflow_id, number, prepared_at, provider, route,
                   policy_version, policy_decision, priority, fairness_weight, route_reason)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            [
                (a.attempt_ref, a.workflow_id, a.number, a.prepared_at, a.provider, a.route,
                 a.policy_version, a.policy_decision, a.priority, a.fairness_weight, a.route_reason)
                for a in batch.attempts
            ],  # fmt: skip
        )
    if batch.transitions:
        await cursor.executemany(
            """INSERT INTO transitions (workflow_id, seq, at, from_state, to_state, reason, source,
                   attempt_number)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
            [
                (t.workflow_id, t.seq, t.at, t.from_state.value, t.to_state.value, t.reason,
                 t.source.value, t.attempt_number)
                for t in batch.transitions
            ],
        )
    if batch.observations:
        await _insert_observations(cursor, batch.observations)
    if batch.receipt_outcomes:
        await _insert_receipt_outcomes(cursor, batch.receipt_outcomes)


async def _record_intent(cursor: Any, intent: Intent, run_id: str) -> IntentRecorded:
    message = intent.message
    await cursor.execute(
        """INSERT INTO intents (workflow_id, business_key, channel, recipient, template_id,
               template_version, render_data, body, content_sha256, intent_fingerprint,
               created_at, expires_at, first_run_id, subject, attachment_sha256, attachment_size,
               encoding, segments, category, recipient_fingerprint, tenant)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT DO NOTHING
           RETURNING workflow_id""",
        (
            intent.workflow_id,
            intent.business_key,
            message.channel.value,
            message.recipient,
            intent.template_id,
            intent.template_version,
            Jsonb(intent.render_data),
            message.body,
            intent.content_sha256,
            intent.intent_fingerprint,
            intent.created_at,
            intent.expires_at,
            run_id,
            message.subject,
            message.attachment.sha256 if message.attachment else None,
            message.attachment.size_bytes if message.attachment else None,
            intent.encoding.value if intent.encoding else None,
            intent.segments,
            message.category.value,
            intent.recipient_fingerprint,
            intent.tenant,
        ),
    )
    created = await cursor.fetchone() is not None
    if created:
        # A new row: this run is its first, and no transition or observation exists yet.
        return IntentRecorded(
            created=True, same_payload=True, first_run_id=run_id,
            next_transition_seq=1, next_observation_seq=1, last_state=None,
        )  # fmt: skip
    await cursor.execute(
        """SELECT i.intent_fingerprint, i.first_run_id,
                  (SELECT coalesce(max(seq), 0) FROM transitions t WHERE t.workflow_id = i.workflow_id),
                  (SELECT coalesce(max(seq), 0) FROM observations o WHERE o.workflow_id = i.workflow_id),
                  (SELECT to_state FROM transitions t WHERE t.workflow_id = i.workflow_id
                    ORDER BY seq DESC LIMIT 1)
             FROM intents i WHERE i.workflow_id = %s""",
        (intent.workflow_id,),
    )
    fingerprint, first_run_id, max_transition, max_observation, last_state = await cursor.fetchone()
    return IntentRecorded(
        created=created,
        same_payload=fingerprint == intent.intent_fingerprint,
        first_run_id=first_run_id,
        next_transition_seq=max_transition + 1,
        next_observation_seq=max_observation + 1,
        last_state=IntentState(last_state) if last_state else None,
    )


async def _insert_observations(cursor: Any, rows: list[ObservationRow]) -> None:
    """The observations, and the provider messages they name claimed for their attempts."""
    await cursor.executemany(
        """INSERT INTO observations (workflow_id, seq, attempt_number, source, kind, provider_id,
               provider_status, error_code, applied, reason, inbox_id, observed_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        [
            (o.workflow_id, o.seq, o.attempt_number, o.source.value, o.kind.value, o.provider_id, o.provider_status,
             o.error_code, o.applied, o.reason, o.inbox_id, o.observed_at)
            for o in rows
        ],
    )
    await claims.claim_observed(cursor, rows)


async def _insert_receipt_outcomes(cursor: Any, rows: list[ReceiptOutcomeRow]) -> None:
    await cursor.executemany(
        """INSERT INTO receipt_outcomes (inbox_id, outcome, reason, workflow_id)
           VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        [(r.inbox_id, r.outcome, r.reason, r.workflow_id) for r in rows],
    )


_INBOX_COLUMNS = (
    "id, provider, provider_message_id, provider_status, attempt_ref, error_code, provider_event_at, received_at"
)
# The intent an inbox row's attempt belongs to, read with the row (None while our attempt row is unknown).
_WORKFLOW_OF_ATTEMPT = "(SELECT a.workflow_id FROM attempts a WHERE a.attempt_ref = receipt_inbox.attempt_ref) AS workflow_id"


# The report is stored and, where its callback names our attempt, the message claimed for it, in
# one statement (herald.ledger.claims).
_INSERT_REPORT = f"""WITH stored AS (
    INSERT INTO receipt_inbox (provider, provider_message_id, provider_status, attempt_ref,
        error_code, provider_event_at, payload)
    VALUES (%s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (provider, provider_message_id, provider_status, attempt_ref) DO NOTHING
    RETURNING {_INBOX_COLUMNS}){claims.CLAIM_STORED_REPORTS}
SELECT stored.*, {_WORKFLOW_OF_ATTEMPT.replace("receipt_inbox.", "stored.")} FROM stored"""

_EXISTING_REPORT = f"""SELECT {_INBOX_COLUMNS}, {_WORKFLOW_OF_ATTEMPT} FROM receipt_inbox
     WHERE provider = %s AND provider_message_id = %s AND provider_status = %s
       AND attempt_ref IS NOT DISTINCT FROM %s"""


async def store_reports(conn: AsyncConnection, reports: list[InboxReport]) -> list[dict[str, Any]]:
    """Insert verified reports into the inbox in the caller's transaction, in the order given.

    One report may be stored in autocommit mode instead (``GroupCommit(alone_in_autocommit=True)``):
    its INSERT is idempotent and the SELECT that finds a repeat's first copy reads committed rows,
    so each statement is safe to commit by itself.

    Returns each report's inbox row, with ``new`` (False for a repeat: the first copy's row) and
    ``workflow_id`` (the intent its attempt belongs to; None while our attempt row is unknown).
    Every INSERT is sent before any answer is read, and then every repeat's SELECT, so in pipeline
    mode (``GroupCommit``) a call costs two round trips however many reports it holds: a
    redelivered post of 5,000 repeats once cost 5,000 (seconds on a busy host, past the store
    deadline). Two copies of one report in the same call find the same row, the second as a repeat.
    """
    inserts = []
    for report in reports:
        cursor = conn.cursor(row_factory=dict_row)
        await cursor.execute(
            _INSERT_REPORT,
            (report.provider, report.provider_message_id, report.provider_status, report.attempt_ref,
             report.error_code, report.provider_event_at, Jsonb(report.payload)),
        )  # fmt: skip
        inserts.append(cursor)
    inserted: list[dict[str, Any] | None] = []
    repeats: dict[int, AsyncCursor[dict[str, Any]]] = {}
    for index, (report, cursor) in enumerate(zip(reports, inserts, strict=True)):
        inserted.append(await cursor.fetchone())
        await cursor.close()
        if inserted[-1] is None:
            lookup = conn.cursor(row_factory=dict_row)
            await lookup.execute(
                _EXISTING_REPORT,
                (report.provider, report.provider_message_id, report.provider_status, report.attempt_ref),
            )
            repeats[index] = lookup
    rows = []
    for index, row in enumerate(inserted):
        if row is None:
            lookup = repeats[index]
            row = await lookup.fetchone()
            await lookup.close()
            assert row is not None  # the INSERT found a conflicting row, and rows are never deleted here
        rows.append({**row, "new": index not in repeats})
    return rows


async def store_rejection(
    conn: AsyncConnection, *, provider: str, reason: str, fields: dict[str, str], attempt_ref: str | None
) -> int:
    """Record a verified report that breaks a storage rule, with the rule; returns the rejection's id."""
    cursor = await conn.execute(
        """INSERT INTO receipt_rejections (provider, reason, fields, attempt_ref)
           VALUES (%s, %s, %s, %s) RETURNING id""",
        (provider, reason, Jsonb(fields), attempt_ref),
    )
    row = await cursor.fetchone()
    assert row is not None  # INSERT ... RETURNING always returns the row
    return int(row[0])


async def workflow_for_attempt(pool: AsyncConnectionPool, attempt_ref: str) -> str | None:
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT workflow_id FROM attempts WHERE attempt_ref = %s", (attempt_ref,))
        row = await cursor.fetchone()
    return row[0] if row else None


async def record_report_for_closed_intent(pool: AsyncConnectionPool, *, workflow_id: str, report: LateReport) -> None:
    """Record a report whose intent's workflow has closed, with the rows the machine's own rule
    decides for it (``herald.core.machine.presumptions``): the report, not applied, and the
    contradiction when it shows an attempt presumed absent. The ledger reads the rule's inputs
    (the attempt's standing) and stores what it decided.

    The workflow no longer writes this intent's observations, so the next sequence number is
    taken under a per-intent advisory lock.
    """
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (workflow_id,))
        cursor = await conn.execute("SELECT 1 FROM receipt_outcomes WHERE inbox_id = %s", (report.inbox_id,))
        if await cursor.fetchone() is not None:
            return
        cursor = await conn.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM observations WHERE workflow_id = %s", (workflow_id,)
        )
        seq = (await cursor.fetchone())[0]
        standing = None
        if report.attempt_number is not None:
            standing = await _standing(conn, workflow_id, report.attempt_number)
        findings = late_report_rows(report, standing)
        rows = [
            ObservationRow(workflow_id=workflow_id, seq=seq + offset, **finding.model_dump())
            for offset, finding in enumerate(findings)
        ]
        outcomes = [
            ReceiptOutcomeRow(
                inbox_id=row.inbox_id,
                outcome="applied" if row.applied else "ignored",
                reason=row.reason,
                workflow_id=workflow_id,
            )
            for row in rows
            if row.inbox_id is not None
        ]
        async with conn.cursor() as cur:
            await _insert_observations(cur, rows)
            await _insert_receipt_outcomes(cur, outcomes)


async def _standing(conn: AsyncConnection, workflow_id: str, number: int) -> Standing:
    """What the ledger holds of the rule's inputs for one attempt: why it was presumed absent (the
    view ``presumed_not_accepted``), whether the contradiction is recorded already, and which later
    attempts went to the provider (a submit answer other than ``not_sent``)."""
    cursor = await conn.execute(
        """SELECT (SELECT p.cause FROM presumed_not_accepted p
                    WHERE p.workflow_id = %(w)s AND p.attempt_number = %(n)s),
                  EXISTS (SELECT 1 FROM observations o
                           WHERE o.workflow_id = %(w)s AND o.attempt_number = %(n)s AND o.kind = %(seen)s),
                  ARRAY(SELECT DISTINCT o.attempt_number FROM observations o
                         WHERE o.workflow_id = %(w)s AND o.attempt_number > %(n)s
                           AND o.source = 'submit' AND o.kind <> 'not_sent'
                         ORDER BY o.attempt_number)""",
        {"w": workflow_id, "n": number, "seen": ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN.value},
    )
    row = await cursor.fetchone()
    assert row is not None  # a SELECT without FROM returns one row
    cause, seen, later = row
    return Standing(attempt_number=number, presumption=cause, seen=seen, later_sent=tuple(later))


async def undecided_reports(
    pool: AsyncConnectionPool, *, older_than_seconds: float, limit: int, after_id: int = 0
) -> list[dict[str, Any]]:
    """Inbox rows above `after_id` without a verdict whose redelivery is due, oldest first.

    A row with a redelivery schedule is due at its ``next_try_at``; a row without one (its
    direct delivery signalled it, or its receipt server died first) once it is older than
    ``older_than_seconds``. `after_id` is a floor from `decided_floor` (0: the whole inbox).
    """
    # Row factories are set per cursor: a pooled connection must come back as it was lent.
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            """SELECT r.id, r.provider, r.provider_message_id, r.provider_status, r.attempt_ref, r.error_code,
                      r.provider_event_at, r.received_at, coalesce(d.tries, 0) AS tries
                 FROM receipt_inbox r
                 LEFT JOIN receipt_outcomes o ON o.inbox_id = r.id
                 LEFT JOIN receipt_redelivery d ON d.inbox_id = r.id
                WHERE r.id > %s AND o.inbox_id IS NULL
                  AND (d.next_try_at <= now()
                       OR (d.inbox_id IS NULL AND r.received_at < now() - make_interval(secs => %s)))
                ORDER BY r.received_at
                LIMIT %s""",
            (after_id, older_than_seconds, limit),
        )
        return await cursor.fetchall()


async def decided_floor(pool: AsyncConnectionPool, *, after_id: int, settled_seconds: float) -> int:
    """The highest inbox id at or below which every row that will ever exist has a verdict.

    Walks up from `after_id` (a floor already known, or 0) to the first row that is undecided or
    received in the last `settled_seconds`, and answers the last row before it: an id handed out
    before an old, visible row's belongs to a transaction that ended long ago (an inbox write
    lasts seconds), so nothing can still appear below the floor. Costs the rows since `after_id`,
    read in id order, not the whole inbox.
    """
    async with pool.connection() as conn:
        cursor = await conn.execute(
            """WITH first_open AS (
                   SELECT min(r.id) AS id FROM receipt_inbox r
                    WHERE r.id > %(after)s
                      AND (r.received_at >= now() - make_interval(secs => %(settled)s)
                           OR NOT EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = r.id)))
               SELECT coalesce(max(r.id), %(after)s) FROM receipt_inbox r, first_open f
                WHERE r.id > %(after)s AND (f.id IS NULL OR r.id < f.id)""",
            {"after": after_id, "settled": settled_seconds},
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def schedule_redeliveries(pool: AsyncConnectionPool, rows: list[tuple[int, float, str | None]]) -> None:
    """When to offer each (inbox id, delay in seconds, last error) again, in one round trip."""
    async with pool.connection() as conn, conn.cursor() as cursor:
        await cursor.executemany(
            """INSERT INTO receipt_redelivery (inbox_id, tries, next_try_at, last_error)
               VALUES (%s, 1, now() + make_interval(secs => %s), %s)
               ON CONFLICT (inbox_id) DO UPDATE
                  SET tries = receipt_redelivery.tries + 1,
                      next_try_at = excluded.next_try_at,
                      last_error = excluded.last_error""",
            rows,
        )


async def attempt_provider(pool: AsyncConnectionPool, attempt_ref: str) -> str | None:
    """The provider an attempt's row was handed to (None: no row, or one that names none)."""
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT provider FROM attempts WHERE attempt_ref = %s", (attempt_ref,))
        row = await cursor.fetchone()
    return row[0] if row else None
