"""What recipients asked of us directly (migration 018): opt-outs, opt-ins, help requests and
unsubscribes, recorded by keyed fingerprint and classification only, once per provider reference.

The policy gate reads them with the rest of a recipient's standing (herald.ledger.policy_store):
an opt-out or an unsubscribe suppresses every attempt prepared after its commit, an opt-in lifts
what came before it on that channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from psycopg import AsyncConnection
from pydantic import Field, model_validator

from herald.core.outcomes import Frozen
from herald.core.send_policy import Category

RequestKind = Literal["opt_out", "opt_in", "help", "unsubscribe", "other"]
RequestSource = Literal["inbound_keyword", "one_click", "esp_event"]


class RecipientRequest(Frozen):
    fingerprint: str = Field(min_length=1, max_length=200)
    channel: Literal["sms", "email"]
    request: RequestKind
    # The one category an unsubscribe was for; None for a request about the whole channel.
    category: Category | None = None
    source: RequestSource
    # What was classified, never the person's words: "keyword STOP", "SendGrid group_unsubscribe".
    detail: str = Field(min_length=1, max_length=200)
    # The provider's reference (inbound MessageSid, the token's id, the ESP event's id): once each.
    source_ref: str = Field(min_length=1, max_length=200)
    requested_at: datetime

    @model_validator(mode="after")
    def _unsubscribe_names_its_category(self) -> RecipientRequest:
        if (self.request == "unsubscribe") != (self.category is not None):
            raise ValueError("category: an unsubscribe names its category, and only an unsubscribe does")
        return self


class RecordedRequest(Frozen):
    request: RequestKind
    channel: str
    category: str | None
    source: RequestSource
    detail: str
    requested_at: datetime
    recorded_at: datetime


async def record_requests(conn: AsyncConnection, requests: Sequence[RecipientRequest]) -> int:
    """Insert the requests not already recorded (by source and reference); how many were new."""
    new = 0
    async with conn.cursor() as cursor:
        for r in requests:
            await cursor.execute(
                """INSERT INTO recipient_requests (recipient_fingerprint, channel, request, category, source,
                                                   detail, source_ref, requested_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (source, source_ref) DO NOTHING""",
                (r.fingerprint, r.channel, r.request, r.category.value if r.category else None, r.source,
                 r.detail, r.source_ref, r.requested_at),
            )  # fmt: skip
            new += cursor.rowcount
    return new


async def requests_of(
    conn: AsyncConnection, fingerprints: Sequence[str], channel: str | None = None
) -> list[RecordedRequest]:
    """A recipient's requests (under any of their fingerprints), newest first."""
    cursor = await conn.execute(
        """SELECT request, channel, category, source, detail, requested_at, recorded_at FROM recipient_requests
            WHERE recipient_fingerprint = ANY(%s) AND (%s::text IS NULL OR channel = %s)
            ORDER BY requested_at DESC, id DESC""",
        (list(fingerprints), channel, channel),
    )
    return [
        RecordedRequest(request=k, channel=c, category=cat, source=s, detail=d, requested_at=at, recorded_at=rec)
        for k, c, cat, s, d, at, rec in await cursor.fetchall()
    ]
