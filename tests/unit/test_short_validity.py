"""Where lateness is worse than absence: the built-in send policy gives account messages (sign-in and
verification codes) a short provider queue validity, and every attempt of theirs carries it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from herald.core.machine.commands import Submit
from herald.core.machine.events import OrderRead
from herald.core.send_policy import (
    BUILT_IN_VALIDITY,
    Category,
    CategoryRules,
    PolicyRules,
    built_in_order,
    dispatch_order,
)
from tests.unit.clock import TestClock
from tests.unit.machine_tables import AT, SMS, STARTED, Case, machine_for

CODE = {**SMS, "business_key": "signin:s_1", "template_id": "class_reminder",
        "render_data": {"class_name": "Morning yoga", "starts_at": "Mon 09:00"}}  # fmt: skip


@pytest.mark.parametrize(
    ("category", "seconds"),
    [(Category.ACCOUNT, 120), (Category.TRANSACTIONAL, None), (Category.MARKETING, None)],
)
def test_the_built_in_policy_gives_account_messages_two_minutes_in_the_providers_queue(
    category: Category, seconds: int | None
) -> None:
    """Under the built-in rules (version 1, and the order used when the policy cannot be read) an account
    message may wait 120 s in the provider's queue; the others the delivery policy's ten minutes (None)."""
    assert dispatch_order(PolicyRules(), 1, category, "shared", None).validity_seconds == seconds
    assert built_in_order(category, "shared", None).validity_seconds == seconds
    assert BUILT_IN_VALIDITY[category] == seconds


def test_a_rules_file_naming_the_account_category_for_another_rule_keeps_its_short_validity() -> None:
    """A published version that names the account category only to limit its countries does not let
    its codes wait ten minutes; a validity it names itself wins, longer or shorter."""
    categories = PolicyRules().categories
    named = PolicyRules(categories={**categories, Category.ACCOUNT: CategoryRules(urgent=True, countries=["GB"])})
    assert dispatch_order(named, 2, Category.ACCOUNT, "shared", None).validity_seconds == 120
    for seconds in (30, 900):
        own = CategoryRules(urgent=True, provider_queue_validity_seconds=seconds)
        rules = PolicyRules(categories={**categories, Category.ACCOUNT: own})
        assert dispatch_order(rules, 3, Category.ACCOUNT, "shared", None).validity_seconds == seconds


@pytest.mark.parametrize(("expires_in", "seconds"), [(None, 120), (timedelta(seconds=90), 90)])
def test_an_account_attempt_is_submitted_with_the_short_validity_never_past_its_expiry(
    expires_in: timedelta | None, seconds: int
) -> None:
    """The attempt the machine submits for an account intent carries the category's 120 s, or what is left
    of the intent's life when that is shorter."""
    request = CODE if expires_in is None else {**CODE, "expires_at": (AT + expires_in).isoformat()}
    m = machine_for(Case("account code", [], request=request), TestClock(AT))
    m.step(STARTED)
    (submit,) = m.step(OrderRead(order=dispatch_order(PolicyRules(), 1, Category.ACCOUNT, "shared", None)))
    assert isinstance(submit, Submit)
    assert (submit.priority_key, submit.input.validity_seconds) == (1, seconds)
