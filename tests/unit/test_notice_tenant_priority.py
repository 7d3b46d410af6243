"""A notice's tenant (one for the notice) and its channels' priorities: taken only in their shapes,
passed into every channel's intent, refused naming the field, kept by the outbox's stored form, and
shown per attempt in the side-by-side view."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.contracts import AttemptStatus, IntentStatus
from herald.core.lifecycle import IntentState, SubmitResult
from herald.intake.errors import InvalidIntent
from herald.intake.notice import parse_notice
from herald.intake.requests import build_intent, parse_request
from herald.notice_view import render_notice
from herald.outbox import stored_notice
from tests.intents import EMAIL_ENTRY, SMS_ENTRY
from tests.keys import SESSION_KEYRING

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SMS, EMAIL = SMS_ENTRY, EMAIL_ENTRY
TENANT_RULE = "must be a tenant id: 1 to 48 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
PRIORITY_RULE = "must be a priority key, a whole number from 1 (first) to 5 (last)"


def notice(*channels: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"business_key": "order_receipt:pay_1", "channels": list(channels), **fields}


def test_the_notices_tenant_and_each_channels_priority_reach_its_intent() -> None:
    """One tenant for every channel; each channel its own priority (or none: the category's)."""
    requests = parse_notice(notice({**SMS, "priority": 3}, EMAIL, tenant="acme")).requests()
    assert [(r.channel.value, r.tenant, r.priority) for r in requests] == [("sms", "acme", 3), ("email", "acme", None)]
    intents = [build_intent(request, AT, SESSION_KEYRING) for request in requests]
    assert [(i.tenant, i.priority) for i in intents] == [("acme", 3), ("acme", None)]


def test_a_notice_without_them_is_the_shared_tenants_at_the_categorys_priority() -> None:
    requests = parse_notice(notice(SMS, EMAIL)).requests()
    assert {(r.tenant, r.priority) for r in requests} == {("shared", None)}


def test_a_notice_for_another_tenant_is_another_notice() -> None:
    """The tenant is part of every channel's intent fingerprint when named, as for a single request."""
    shared = [build_intent(r, AT, SESSION_KEYRING).intent_fingerprint for r in parse_notice(notice(SMS)).requests()]
    acme = [
        build_intent(r, AT, SESSION_KEYRING).intent_fingerprint
        for r in parse_notice(notice(SMS, tenant="acme")).requests()
    ]
    single = build_intent(
        parse_request({"business_key": "order_receipt:pay_1", **SMS, "tenant": "acme"}), AT, SESSION_KEYRING
    )
    assert shared != acme == [single.intent_fingerprint]


@pytest.mark.parametrize("tenant", ["ACME", "acme corp", "", "-acme", "a" * 49, "+15551230001", 7, None, True])
def test_a_bad_tenant_is_refused_naming_the_field_without_the_value(tenant: Any) -> None:
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice(SMS, EMAIL, tenant=tenant))
    assert [field for field, _ in refused.value.problems] == ["tenant"]
    if isinstance(tenant, str):
        assert refused.value.problems == [("tenant", TENANT_RULE)]
        assert "+15551230001" not in str(refused.value)


@pytest.mark.parametrize("priority", [0, 6, -1, 10**30, True, False, 3.0, "3", "first", [3], {"k": 3}])
def test_a_bad_channel_priority_is_refused_with_the_intents_own_rule(priority: Any) -> None:
    """A notice's entry and a single request refuse a priority with the same words, named per channel."""
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice(SMS, {**EMAIL, "priority": priority}))
    assert refused.value.problems == [("channels.1.priority", PRIORITY_RULE)]
    with pytest.raises(InvalidIntent) as alone:
        parse_request({"business_key": "order_receipt:pay_1", **EMAIL, "priority": priority})
    assert alone.value.problems == [("priority", PRIORITY_RULE)]


def test_a_tenant_inside_a_channel_entry_is_refused_with_the_reason() -> None:
    """A notice is for one tenant: a channel naming its own is told where the tenant goes."""
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(notice(SMS, {**EMAIL, "tenant": "acme"}, tenant="acme"))
    assert refused.value.problems == [
        ("channels.1.tenant", "a notice is for one tenant: name it once, as the notice's own 'tenant'")
    ]


_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,47}")
any_priority = st.none() | st.integers(-3, 9) | st.booleans() | st.floats(0, 6) | st.text(max_size=3)


@given(tenant=st.none() | st.text(max_size=60) | st.sampled_from(["acme", "shared", "t-1.b_2"]),
       priorities=st.lists(any_priority, min_size=2, max_size=2))  # fmt: skip
def test_any_tenant_and_priorities_are_taken_exactly_in_their_shapes(tenant: str | None, priorities: list[Any]) -> None:
    """Accepted exactly when the tenant is an id and each priority a whole number 1..5 (or absent);
    otherwise refused naming every bad field (tenant, channels.<i>.priority), and never half-taken."""
    entries = [{**entry, **({} if p is None else {"priority": p})} for entry, p in zip((SMS, EMAIL), priorities)]
    raw = notice(*entries, **({} if tenant is None else {"tenant": tenant}))
    tenant_ok = tenant is None or _TENANT.fullmatch(tenant) is not None
    bad = {f"channels.{i}.priority" for i, p in enumerate(priorities)
           if p is not None and not (type(p) is int and 1 <= p <= 5)}  # fmt: skip
    if tenant_ok and not bad:
        requests = parse_notice(raw).requests()
        assert [(r.tenant, r.priority) for r in requests] == [(tenant or "shared", p) for p in priorities]
        return
    with pytest.raises(InvalidIntent) as refused:
        parse_notice(raw)
    named = {field for field, _ in refused.value.problems}
    # The model's rules run before the entries' intents: a bad tenant is reported with every bad priority.
    assert named == bad | ({"tenant"} if not tenant_ok else set())


def test_the_outbox_stores_tenant_and_priorities_and_reads_them_back() -> None:
    """The stored form is what the relay parses: the same notice comes back, tenant and priorities included."""
    parsed = parse_notice(notice({**SMS, "priority": 4}, {**EMAIL, "priority": 5}, tenant="acme"))
    stored = stored_notice(parsed)
    assert stored["tenant"] == "acme" and [c["priority"] for c in stored["channels"]] == [4, 5]
    assert parse_notice(stored) == parsed
    assert [(r.tenant, r.priority) for r in parse_notice(stored).requests()] == [("acme", 4), ("acme", 5)]


def test_a_notice_that_names_neither_is_stored_as_before() -> None:
    """No tenant or priority key in the row, so a relay that does not know them still reads it."""
    stored = stored_notice(parse_notice(notice(SMS, EMAIL)))
    assert stored == {"business_key": "order_receipt:pay_1", "channels": [SMS, EMAIL]}
    named_shared = stored_notice(parse_notice(notice(SMS, tenant="shared")))
    assert "tenant" not in named_shared


def test_the_notice_view_shows_each_attempts_priority_and_weight() -> None:
    attempts = [
        AttemptStatus(number=1, attempt_ref="att_1", started_at=AT, submit_result=SubmitResult.UNKNOWN, priority=4,
                      fairness_weight=3.0),
        AttemptStatus(number=2, attempt_ref="att_2", started_at=AT, submit_result=SubmitResult.ACCEPTED),
    ]  # fmt: skip
    status = IntentStatus(
        workflow_id="order_receipt:pay_1/sms",
        business_key="order_receipt:pay_1",
        channel="sms",
        template_id="order_receipt",
        template_version=1,
        content_sha256="ab" * 32,
        state=IntentState.SUBMITTING,
        attempts=attempts,
    )
    lines = render_notice("order_receipt:pay_1", {"sms": status}).splitlines()
    assert [line.strip() for line in lines if "priority" in line] == ["priority 4, weight 3"]
