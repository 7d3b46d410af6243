"""Notices written straight into the ledger, row by row as the workflow and the receipt server write them.

The console reads rows; these build the rows of the stories the pages must tell (a lost answer
found by a lookup then reported delivered, an e-mail beside it, a marketing text suppressed after
the person's STOP) in milliseconds, without a workflow. The recipient column holds the person in
clear, as the ledger does: the console's login cannot read it, and the pages must never show it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from tests.intents import fresh_address, fresh_key, fresh_recipient
from tests.keys import SESSION_KEYRING


@dataclass
class Seeded:
    """What a test knows about a notice it wrote: its identifiers, and the person in clear."""

    business_key: str
    phone: str
    address: str
    sms_message_id: str
    sms_attempt_ref: str
    tenant: str
    created_at: datetime

    @property
    def sms(self) -> str:
        return f"{self.business_key}/sms"

    @property
    def email(self) -> str:
        return f"{self.business_key}/email"


async def _intent(cursor: Any, workflow_id: str, channel: str, recipient: str, at: datetime, **fields: Any) -> None:
    row = {
        "workflow_id": workflow_id, "business_key": workflow_id.rsplit("/", 1)[0], "channel": channel,
        "recipient": recipient, "template_id": "order_receipt" if channel == "sms" else "order_receipt_email",
        "template_version": 1, "render_data": Jsonb({"order_ref": "A-1"}), "body": f"secret body for {recipient}",
        "content_sha256": secrets.token_hex(32), "intent_fingerprint": secrets.token_hex(32), "created_at": at,
        "expires_at": at + timedelta(hours=1), "first_run_id": f"run-{secrets.token_hex(8)}",
        "category": "transactional", "recipient_fingerprint": SESSION_KEYRING.recipient(recipient), "tenant": "shared",
        **fields,
    }  # fmt: skip
    names = ", ".join(row)
    await cursor.execute(f"INSERT INTO intents ({names}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values()))


async def _rows(cursor: Any, table: str, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        names = ", ".join(row)
        await cursor.execute(
            f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values())
        )


async def lost_answer_notice(
    pool: AsyncConnectionPool,
    *,
    tenant: str = "acme",
    at: datetime | None = None,
    business_key: str | None = None,
    first_run_id: str | None = None,
) -> Seeded:
    """A two-channel notice: the SMS's submit answer lost, a lookup finding the message, a report
    saying delivered; the e-mail accepted and reported delivered. `first_run_id`: the SMS workflow's
    run in Temporal, when the test started one."""
    t0 = at or datetime.now(UTC) - timedelta(minutes=5)
    seeded = Seeded(
        business_key=business_key or fresh_key("console_receipt"), phone=fresh_recipient(), address=fresh_address(),
        sms_message_id="SM" + secrets.token_hex(16), sms_attempt_ref=f"ref-{secrets.token_hex(6)}", tenant=tenant,
        created_at=t0,
    )  # fmt: skip
    sms, email, ref = seeded.sms, seeded.email, seeded.sms_attempt_ref
    email_ref = f"ref-{secrets.token_hex(6)}"
    s = timedelta(seconds=1)
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        await _intent(cursor, sms, "sms", seeded.phone, t0, tenant=tenant,
                      **({"first_run_id": first_run_id} if first_run_id else {}))  # fmt: skip
        await _intent(cursor, email, "email", seeded.address, t0, tenant=tenant)
        await _rows(cursor, "attempts", [
            {"attempt_ref": ref, "workflow_id": sms, "number": 1, "prepared_at": t0 + 0.1 * s, "provider": "twilio",
             "route": "twilio:+15005550006", "route_reason": "route transactional/*: twilio first",
             "policy_version": 1, "policy_decision": "admitted", "priority": 1, "fairness_weight": 1.0},
            {"attempt_ref": email_ref, "workflow_id": email, "number": 1, "prepared_at": t0 + 0.2 * s,
             "provider": "sendgrid", "route": "smtp:127.0.0.1:2525", "policy_version": 1, "policy_decision": "admitted",
             "priority": 1},
        ])  # fmt: skip
        await cursor.execute(
            """INSERT INTO receipt_inbox (provider, provider_message_id, provider_status, attempt_ref, provider_event_at,
                                          payload, received_at)
               VALUES ('twilio', %s, 'delivered', %s, %s, %s, %s) RETURNING id""",
            (seeded.sms_message_id, ref, t0 + 8 * s, Jsonb({"MessageStatus": "delivered"}), t0 + 9.5 * s),
        )
        (inbox_id,) = await cursor.fetchone()
        await _rows(cursor, "observations", [
            {"workflow_id": sms, "seq": 1, "attempt_number": 1, "source": "submit", "kind": "unknown", "applied": True,
             "reason": "ReadTimeout after the request was sent: the answer was lost", "observed_at": t0 + 6 * s},
            {"workflow_id": sms, "seq": 2, "attempt_number": 1, "source": "poll", "kind": "found",
             "provider_id": seeded.sms_message_id, "provider_status": "sent", "applied": True,
             "reason": "lookup by reference: one unclaimed message fits", "observed_at": t0 + 7 * s},
            {"workflow_id": sms, "seq": 3, "attempt_number": 1, "source": "report", "kind": "status",
             "provider_id": seeded.sms_message_id, "provider_status": "delivered", "applied": True,
             "reason": "delivery report", "inbox_id": inbox_id, "observed_at": t0 + 9.6 * s},
            {"workflow_id": email, "seq": 1, "attempt_number": 1, "source": "submit", "kind": "accepted",
             "provider_id": f"<{email_ref}@herald.test>", "applied": True, "reason": "250 queued",
             "observed_at": t0 + 0.5 * s},
            {"workflow_id": email, "seq": 2, "attempt_number": 1, "source": "report", "kind": "status",
             "provider_id": f"<{email_ref}@herald.test>", "provider_status": "delivered", "applied": True,
             "reason": "SendGrid delivered", "observed_at": t0 + 2 * s},
        ])  # fmt: skip
        await _rows(cursor, "transitions", [
            {"workflow_id": sms, "seq": 1, "at": t0 + 0.1 * s, "from_state": "pending", "to_state": "submitting",
             "reason": "attempt 1 prepared", "source": "submit", "attempt_number": 1},
            {"workflow_id": sms, "seq": 2, "at": t0 + 7 * s, "from_state": "submitting", "to_state": "accepted",
             "reason": "lookup found the message the lost answer was about", "source": "poll", "attempt_number": 1},
            {"workflow_id": sms, "seq": 3, "at": t0 + 9.6 * s, "from_state": "accepted", "to_state": "delivered",
             "reason": "delivery report: delivered", "source": "report", "attempt_number": 1},
            {"workflow_id": email, "seq": 1, "at": t0 + 0.2 * s, "from_state": "pending", "to_state": "submitting",
             "reason": "attempt 1 prepared", "source": "submit", "attempt_number": 1},
            {"workflow_id": email, "seq": 2, "at": t0 + 2 * s, "from_state": "submitting", "to_state": "delivered",
             "reason": "SendGrid delivered", "source": "report", "attempt_number": 1},
        ])  # fmt: skip
    return seeded


async def stopped_marketing_text(pool: AsyncConnectionPool) -> Seeded:
    """A person's STOP, then a marketing text to them suppressed by the send policy before any attempt."""
    t0 = datetime.now(UTC) - timedelta(minutes=2)
    seeded = Seeded(
        business_key=fresh_key("console_promo"), phone=fresh_recipient(), address="", sms_message_id="",
        sms_attempt_ref="", tenant="shared", created_at=t0,
    )  # fmt: skip
    fingerprint = SESSION_KEYRING.recipient(seeded.phone)
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        await _rows(cursor, "recipient_requests", [
            {"recipient_fingerprint": fingerprint, "channel": "sms", "request": "opt_out", "source": "inbound_keyword",
             "detail": "keyword STOP", "source_ref": "SM" + secrets.token_hex(16), "requested_at": t0 - timedelta(minutes=1)},
        ])  # fmt: skip
        await _intent(cursor, seeded.sms, "sms", seeded.phone, t0, template_id="class_promo", category="marketing")
        await _rows(cursor, "observations", [
            {"workflow_id": seeded.sms, "seq": 1, "source": "policy", "kind": "policy_suppressed", "applied": True,
             "reason": "suppressed by policy v1: opt_out (keyword STOP)", "observed_at": t0 + timedelta(seconds=0.3)},
        ])  # fmt: skip
        await _rows(cursor, "transitions", [
            {"workflow_id": seeded.sms, "seq": 1, "at": t0 + timedelta(seconds=0.3), "from_state": "pending",
             "to_state": "suppressed", "reason": "send policy: opt_out (keyword STOP)", "source": "policy"},
        ])  # fmt: skip
    return seeded


async def one_persons_notices(pool: AsyncConnectionPool, phone: str, times: list[datetime]) -> list[str]:
    """SMS intents to one person, one created at each of `times` (repeats allowed); their workflow ids."""
    made = []
    async with pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
        for at in times:
            workflow_id = f"{fresh_key('console_person')}/sms"
            await _intent(cursor, workflow_id, "sms", phone, at)
            made.append(workflow_id)
    return made
