"""An ESP's unsubscribe events as the recipient's requests (migration 018's recipient_requests).

SendGrid reports a person who left through its own unsubscribe link (``unsubscribe``) or a
suppression group's (``group_unsubscribe``) as an event about the message the link was in. The event
names the attempt (our ``herald_attempt`` unique arg), not the person; the attempt's intent names
them by keyed fingerprint and says what the message was for. So the request is recorded under the
intent's fingerprint for the intent's category (marketing for an intent recorded before categories),
once per event id, in the transaction that stores the post (the receipt server's SendGrid route):
the unsubscribe commits before SendGrid is answered 2xx, like the events themselves.

An event for an attempt this ledger does not hold (another deployment on the same account), or for
an intent recorded before keyed fingerprints (no fingerprint to record), records nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from psycopg import AsyncConnection
from pydantic import Field

from herald.core.outcomes import Frozen
from herald.core.send_policy import Category
from herald.ledger.recipient_requests import RecipientRequest, record_requests


class EventUnsubscribe(Frozen):
    """One unsubscribe event, as the ESP's route read it."""

    attempt_ref: str
    # The ESP's id of the event (SendGrid's sg_event_id): once per event, however often it is posted.
    source_ref: str = Field(min_length=1, max_length=200)
    # What was classified, without the person: "SendGrid group_unsubscribe".
    detail: str = Field(min_length=1, max_length=200)
    requested_at: datetime


async def record_event_unsubscribes(conn: AsyncConnection, events: Sequence[EventUnsubscribe]) -> int:
    """Record each event under its attempt's intent (fingerprint, category); how many were new."""
    if not events:
        return 0
    cursor = await conn.execute(
        """SELECT a.attempt_ref, i.recipient_fingerprint, i.category
             FROM attempts a JOIN intents i ON i.workflow_id = a.workflow_id
            WHERE a.attempt_ref = ANY(%s) AND i.channel = 'email' AND i.recipient_fingerprint IS NOT NULL""",
        (sorted({event.attempt_ref for event in events}),),
    )
    intents = {ref: (fingerprint, category) for ref, fingerprint, category in await cursor.fetchall()}
    requests = [
        RecipientRequest(
            fingerprint=intents[event.attempt_ref][0],
            channel="email",
            request="unsubscribe",
            category=_category(intents[event.attempt_ref][1]),
            source="esp_event",
            detail=event.detail,
            source_ref=event.source_ref,
            requested_at=event.requested_at,
        )
        for event in events
        if event.attempt_ref in intents
    ]
    return await record_requests(conn, requests)


def _category(recorded: str | None) -> Category:
    """The intent's category; marketing for one recorded before categories (migration 009), the
    category every such unsubscribe link is in."""
    try:
        return Category(recorded) if recorded is not None else Category.MARKETING
    except ValueError:
        return Category.MARKETING
