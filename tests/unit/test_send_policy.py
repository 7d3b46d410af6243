"""The send policy's pure decision: consent, suppression, country, quiet hours and cooldown."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from herald.core.send_policy import (
    Category,
    CategoryRules,
    Decision,
    PolicyRules,
    QuietHours,
    RecipientFacts,
    decide,
    dispatch_order,
)

QUIET = QuietHours(start=time(21, 0), end=time(8, 0))
RULES = PolicyRules(quiet_hours=QUIET)
# 22:30 in Los Angeles (UTC-8 in December) is 06:30 UTC the next day.
LATE_IN_LA = datetime(2026, 12, 2, 6, 30, tzinfo=UTC)
NOON_IN_LA = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)


def facts(**overrides: object) -> RecipientFacts:
    base = {"channel": "sms", "category": Category.ACCOUNT, "region": "US", "time_zones": ["America/Los_Angeles"],
            "consent": False, "suppressed_because": None, "cooldown_until": None}  # fmt: skip
    return RecipientFacts.model_validate({**base, **overrides})


def rules_with(category: Category, **changes: object) -> PolicyRules:
    categories = dict(RULES.categories)
    categories[category] = categories[category].model_copy(update=changes)
    return RULES.model_copy(update={"categories": categories})


def test_a_non_urgent_message_at_2230_recipient_time_waits_for_the_window_end() -> None:
    decision = decide(rules_with(Category.ACCOUNT, urgent=False), 3, facts(), LATE_IN_LA)
    assert decision.decision is Decision.DEFER and decision.rule == "quiet_hours" and decision.version == 3
    # 08:00 in Los Angeles on 2 December is 16:00 UTC.
    assert decision.not_before == datetime(2026, 12, 2, 16, 0, tzinfo=UTC)


def test_an_urgent_category_is_never_deferred_by_quiet_hours() -> None:
    assert decide(RULES, 3, facts(category=Category.TRANSACTIONAL), LATE_IN_LA).decision is Decision.ALLOW


def test_outside_quiet_hours_it_is_allowed_and_names_the_version() -> None:
    decision = decide(rules_with(Category.ACCOUNT, urgent=False), 7, facts(), NOON_IN_LA)
    assert (decision.decision, decision.rule, decision.reason) == (Decision.ALLOW, "allow", "allowed by policy v7")


@pytest.mark.parametrize(
    "start,end,local,inside",
    [
        (time(21), time(8), datetime(2026, 12, 1, 20, 59), False),
        (time(21), time(8), datetime(2026, 12, 1, 21, 0), True),
        (time(21), time(8), datetime(2026, 12, 2, 7, 59), True),
        (time(21), time(8), datetime(2026, 12, 2, 8, 0), False),
        (time(12), time(14), datetime(2026, 12, 2, 13, 0), True),
        (time(12), time(14), datetime(2026, 12, 2, 14, 0), False),
    ],
)
def test_quiet_window_edges(start: time, end: time, local: datetime, inside: bool) -> None:
    assert (QuietHours(start=start, end=end).window_end(local) is not None) is inside


def test_marketing_without_consent_is_suppressed_and_with_it_allowed() -> None:
    refused = decide(RULES, 2, facts(category=Category.MARKETING), NOON_IN_LA)
    assert (refused.decision, refused.rule) == (Decision.SUPPRESS, "consent")
    assert refused.reason.endswith("(policy v2)")
    assert decide(RULES, 2, facts(category=Category.MARKETING, consent=True), NOON_IN_LA).decision is Decision.ALLOW


def test_a_suppressed_recipient_is_suppressed_before_any_deferral() -> None:
    decision = decide(rules_with(Category.ACCOUNT, urgent=False), 1, facts(suppressed_because="opt_out (Twilio 21610)"), LATE_IN_LA)
    assert (decision.decision, decision.rule) == (Decision.SUPPRESS, "suppression")
    assert "21610" in decision.reason


def test_destination_countries_per_category() -> None:
    only_gb = rules_with(Category.ACCOUNT, countries=["GB"])
    assert decide(only_gb, 1, facts(), NOON_IN_LA).rule == "country"
    assert decide(only_gb, 1, facts(region="GB", time_zones=["Europe/London"]), NOON_IN_LA).decision is Decision.ALLOW
    assert decide(only_gb, 1, facts(region=None, time_zones=[]), NOON_IN_LA).decision is Decision.SUPPRESS


def test_the_cooldown_defers_to_its_end_and_the_later_of_two_waits_wins() -> None:
    until = NOON_IN_LA + timedelta(seconds=30)
    decision = decide(RULES, 1, facts(cooldown_until=until), NOON_IN_LA)
    assert (decision.decision, decision.rule, decision.not_before) == (Decision.DEFER, "cooldown", until)
    both = decide(rules_with(Category.ACCOUNT, urgent=False), 1, facts(cooldown_until=LATE_IN_LA + timedelta(minutes=5)), LATE_IN_LA)
    assert both.rule == "quiet_hours"


def test_rules_are_validated_when_published() -> None:
    with pytest.raises(ValueError, match="every category"):
        PolicyRules(categories={Category.TRANSACTIONAL: CategoryRules()})
    with pytest.raises(ValueError, match="IANA"):
        PolicyRules(default_time_zone="Mars/Olympus")
    with pytest.raises(ValueError, match="cooldown_seconds"):
        PolicyRules(cooldown_seconds={"fax": 10})


def test_an_admitted_attempt_carries_its_categorys_give_up_on_an_unreachable_provider() -> None:
    """The category's unreachable_give_up_seconds travels with the allow decision (None by default), so
    the workflow can bound an outage sooner than the intent's expiry; deferrals carry none."""
    allowed = decide(rules_with(Category.ACCOUNT, unreachable_give_up_seconds=600), 3, facts(), NOON_IN_LA)
    assert allowed.decision is Decision.ALLOW and allowed.give_up_after_seconds == 600
    assert decide(RULES, 3, facts(), NOON_IN_LA).give_up_after_seconds is None
    deferred = decide(rules_with(Category.ACCOUNT, urgent=False, unreachable_give_up_seconds=600), 3, facts(), LATE_IN_LA)
    assert deferred.decision is Decision.DEFER and deferred.give_up_after_seconds is None


@pytest.mark.parametrize("seconds", [0, -1, 7 * 86_400 + 1])
def test_a_give_up_outside_one_second_to_a_week_is_refused(seconds: int) -> None:
    """A give-up of zero would end every outage at once, and one past a week outlives any notice."""
    with pytest.raises(ValueError):
        CategoryRules(unreachable_give_up_seconds=seconds)


# ---- dispatch order: priority and fairness -----------------------------------------------------


def test_the_built_in_priorities_put_account_first_and_marketing_last_even_when_a_category_is_named() -> None:
    named = PolicyRules(categories={**PolicyRules().categories, Category.MARKETING: CategoryRules(consent_required=False)})
    for rules in (PolicyRules(), named):
        keys = [dispatch_order(rules, 1, c, "shared", None).priority_key for c in (Category.ACCOUNT, Category.TRANSACTIONAL, Category.MARKETING)]
        assert keys == [1, 2, 5]
    moved = PolicyRules(categories={**PolicyRules().categories, Category.MARKETING: CategoryRules(priority=4)})
    assert dispatch_order(moved, 2, Category.MARKETING, "shared", None).priority_key == 4


@pytest.mark.parametrize(
    ("requested", "key", "said"),
    [(None, 2, None), (2, 2, None), (4, 4, "lowered to 4 by the intent"), (1, 2, "asked for 1, ahead of its category: not granted")],
)
def test_an_intent_goes_at_its_category_or_lower_never_higher(requested: int | None, key: int, said: str | None) -> None:
    order = dispatch_order(PolicyRules(tenant_weights={"acme": 2.5}), 7, Category.TRANSACTIONAL, "acme", requested)
    assert (order.version, order.priority_key, order.fairness_key, order.fairness_weight) == (7, key, "acme", 2.5)
    assert order.reason.startswith("transactional priority 2 (policy v7)") and order.reason.endswith("tenant acme weight 2.5")
    assert (said in order.reason) if said else ("intent" not in order.reason)


def test_a_tenant_the_policy_does_not_name_weighs_one() -> None:
    assert dispatch_order(PolicyRules(tenant_weights={"acme": 4}), 1, Category.MARKETING, "globex", None).fairness_weight == 1.0


@pytest.mark.parametrize("weights", [{"Acme": 1.0}, {"acme": 0.0}, {"acme": -1.0}, {"acme": 1001.0}, {"": 1.0}])
def test_tenant_weights_are_refused_outside_their_shape(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="tenant_weights"):
        PolicyRules(tenant_weights=weights)


@pytest.mark.parametrize("priority", [0, 6])
def test_a_category_priority_outside_the_keys_is_refused(priority: int) -> None:
    with pytest.raises(ValueError, match="priority"):
        CategoryRules(priority=priority)
