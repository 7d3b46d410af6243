"""SendGrid's unsubscribe events read as the person's requests: which events, which reference, which detail."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from herald.providers.sendgrid_events import parse_events, unsubscribes

RECEIVED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REF = "att_0123456789abcdef01234567_1"


def _event(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "email": "member@example.com", "event": name, "smtp-id": f"<{REF}@mail.herald.example>", "herald_attempt": REF,
        "timestamp": 1772366400, "sg_event_id": f"ev-{name}", **fields,
    }  # fmt: skip


def _read(*events: dict[str, Any]) -> list[Any]:
    return unsubscribes(parse_events(json.dumps(list(events)).encode()).events, RECEIVED)


def test_only_unsubscribe_and_group_unsubscribe_are_requests() -> None:
    """Delivery, engagement, complaint and resubscribe events ask nothing; the two unsubscribes do, each by
    its sg_event_id, at the event's time, the group named when SendGrid names one."""
    found = _read(
        _event("delivered"), _event("open"), _event("spamreport"), _event("group_resubscribe", asm_group_id=7),
        _event("unsubscribe"), _event("group_unsubscribe", asm_group_id=7),
    )  # fmt: skip
    assert [(f.source_ref, f.detail) for f in found] == [
        ("ev-unsubscribe", "SendGrid unsubscribe"),
        ("ev-group_unsubscribe", "SendGrid group_unsubscribe (group 7)"),
    ]
    assert {f.attempt_ref for f in found} == {REF} and found[0].requested_at == datetime.fromtimestamp(1772366400, UTC)


def test_an_event_without_a_usable_id_or_time_is_still_one_request() -> None:
    """No sg_event_id, or one longer than the ledger's reference: referenced by attempt and event name (one per
    attempt and kind); no timestamp: the post's arrival; a group id that is no integer is left out of the detail."""
    no_id = {k: v for k, v in _event("unsubscribe").items() if k not in ("sg_event_id", "timestamp")}
    long_id = _event("group_unsubscribe", sg_event_id="x" * 201, asm_group_id="7")
    found = _read(no_id, long_id)
    assert [(f.source_ref, f.detail) for f in found] == [
        (f"{REF}/unsubscribe", "SendGrid unsubscribe"),
        (f"{REF}/group_unsubscribe", "SendGrid group_unsubscribe"),
    ]
    assert found[0].requested_at == RECEIVED
