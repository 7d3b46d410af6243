"""Routes in the send policy and the pure rule that picks an attempt's provider (herald.core.routes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from herald.core.lifecycle import SubmitResult
from herald.core.routes import (
    OUTAGE_WINDOW,
    PROBE_AFTER,
    IntentRoute,
    Mark,
    PastAttempt,
    ProviderHealth,
    choose,
    health,
    intent_route,
    proven_nothing,
)
from herald.core.send_policy import Category, PolicyRules

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
U, A = Mark.UNREACHABLE, Mark.ANSWERED
ROUTE = ["twilio", "infobip"]
BOTH = {"twilio", "infobip"}


def past(ref: str, provider: str | None, result: SubmitResult | None, taken: bool = False) -> PastAttempt:
    return PastAttempt(ref=ref, provider=provider, submit_result=result, taken=taken)


def down(name: str, probe_due: bool = False) -> ProviderHealth:
    return ProviderHealth(provider=name, outage_since=NOW - timedelta(minutes=1), probe_due=probe_due, watched=True)


# ---- the policy's routes ------------------------------------------------------------------


def test_a_policy_without_routes_takes_the_built_in_route() -> None:
    """Every version published before routes existed validates and names no route (the built-in one)."""
    rules = PolicyRules.model_validate({})
    assert rules.sms_route(Category.TRANSACTIONAL, "GB") is None


def test_a_country_takes_its_own_route_and_the_rest_take_the_star() -> None:
    """The route is looked up by the number's region, then "*"; a category not named is built-in."""
    rules = PolicyRules.model_validate(
        {"sms_routes": {"transactional": {"GB": ["infobip", "twilio"], "*": ["twilio", "infobip"]}}}
    )
    assert rules.sms_route(Category.TRANSACTIONAL, "GB") == ("transactional/GB", ["infobip", "twilio"])
    assert rules.sms_route(Category.TRANSACTIONAL, "US") == ("transactional/*", ["twilio", "infobip"])
    assert rules.sms_route(Category.TRANSACTIONAL, None) == ("transactional/*", ["twilio", "infobip"])
    assert rules.sms_route(Category.MARKETING, "GB") is None


def test_a_route_without_a_star_leaves_other_countries_on_the_built_in_route() -> None:
    """Only the countries named are routed; the rest keep the built-in route."""
    rules = PolicyRules.model_validate({"sms_routes": {"account": {"DE": ["infobip"]}}})
    assert rules.sms_route(Category.ACCOUNT, "FR") is None


@pytest.mark.parametrize(
    ("routes", "named"),
    [
        ({"transactional": {"gb": ["twilio"]}}, "sms_routes.transactional: a country is an ISO 3166 region"),
        ({"transactional": {"GB": []}}, "sms_routes.transactional.GB: at least one provider"),
        ({"transactional": {"*": ["twilio", "twilio"]}}, "sms_routes.transactional.*: each provider at most once"),
        ({"transactional": {"*": ["Twilio"]}}, "sms_routes.transactional.*: a provider name is"),
        ({"bulk": {"*": ["twilio"]}}, "sms_routes.bulk"),
    ],
)
def test_a_bad_route_is_refused_naming_the_field_and_the_rule(routes: dict[str, object], named: str) -> None:
    """Validation errors name the field and the rule broken."""
    with pytest.raises(ValidationError) as refused:
        PolicyRules.model_validate({"sms_routes": routes})
    assert named in str(refused.value)


def test_routes_survive_publication_as_json() -> None:
    """The published form (JSON, defaults left out) reads back to the same routes."""
    rules = PolicyRules.model_validate({"sms_routes": {"account": {"*": ["twilio", "infobip"]}}})
    dumped = rules.model_dump(mode="json", exclude_defaults=True)
    assert PolicyRules.model_validate(dumped) == rules


# ---- what the machine knows about the intent ------------------------------------------------


@pytest.mark.parametrize(
    ("result", "taken", "proven"),
    [
        (SubmitResult.UNREACHABLE, False, True),
        (SubmitResult.RETRYABLE, False, True),
        (SubmitResult.REJECTED, False, True),
        (SubmitResult.NOT_ACCEPTED, False, True),
        (SubmitResult.NOT_SENT, False, True),
        (SubmitResult.ACCEPTED, False, False),
        (SubmitResult.UNKNOWN, False, False),
        (SubmitResult.NO_EVIDENCE, False, False),  # presumed by a rule, never proven
        (None, False, False),
        (SubmitResult.NOT_ACCEPTED, True, False),  # seen at the provider after all
        (SubmitResult.UNREACHABLE, True, False),
    ],
)
def test_only_proof_of_no_message_counts(result: SubmitResult | None, taken: bool, proven: bool) -> None:
    """Unreachable, refusals, a lookup's proof and never handed over are proof; anything else is not."""
    assert proven_nothing(past("att_1", "twilio", result, taken)) is proven


def test_the_first_attempt_that_may_have_produced_a_message_pins_the_intent() -> None:
    """Earlier proven attempts demote their providers; the first unproven one pins."""
    attempts = [
        past("att_1", "twilio", SubmitResult.UNREACHABLE),
        past("att_2", "infobip", SubmitResult.ACCEPTED, taken=True),
        past("att_3", "infobip", SubmitResult.UNKNOWN),
    ]
    assert intent_route(attempts) == IntentRoute(pinned_attempt="att_2", pinned_to="infobip")


def test_unreachable_and_refusing_providers_are_demoted_in_the_order_found() -> None:
    """A lookup's proof of absence demotes no one: the provider answered."""
    attempts = [
        past("att_1", "infobip", SubmitResult.RETRYABLE),
        past("att_2", "twilio", SubmitResult.UNREACHABLE),
        past("att_3", "infobip", SubmitResult.UNREACHABLE),
        past("att_4", "sinch", SubmitResult.NOT_ACCEPTED),
    ]
    assert intent_route(attempts) == IntentRoute(demoted=["infobip", "twilio"])


def test_an_unknown_attempt_whose_provider_the_machine_never_heard_pins_by_reference() -> None:
    """A submit that never answered leaves the provider to the attempt's ledger row."""
    assert intent_route([past("att_1", None, SubmitResult.UNKNOWN)]) == IntentRoute(pinned_attempt="att_1")


# ---- the outage rule --------------------------------------------------------------------------


def marks(*spec: tuple[Mark, float]) -> list[tuple[Mark, datetime]]:
    """Marks given as (kind, seconds ago), newest first."""
    return [(mark, NOW - timedelta(seconds=ago)) for mark, ago in spec]


@pytest.mark.parametrize(
    ("spec", "in_outage", "probe_due"),
    [
        ((), False, False),
        (((U, 1), (U, 2)), False, False),  # two are a blip
        (((U, 1), (U, 2), (U, 3)), True, False),
        (((U, 1), (U, 2), (A, 3), (U, 4)), False, False),  # an answer between
        (((A, 1), (U, 2), (U, 3), (U, 4)), False, False),  # answered since: back
        (((U, 1), (U, 30), (U, 3600)), False, False),  # scattered over an hour
        (((U, 31), (U, 32), (U, 33)), True, True),  # quiet for 30 s: probe it
        (((Mark.PROBE, 5), (U, 40), (U, 41), (U, 42)), True, False),  # a probe is out
        (((Mark.PROBE, 31), (U, 40), (U, 41), (U, 42)), True, True),  # the probe never answered
        (((U, 600), (U, 601), (U, 602)), True, True),  # an outage lasts until an answer
    ],
)
def test_an_outage_starts_after_three_unreachable_and_ends_at_an_answer(
    spec: tuple[tuple[Mark, float], ...], in_outage: bool, probe_due: bool
) -> None:
    """Three Unreachable in a row within a minute; a probe after 30 s of quiet; any answer ends it."""
    state = health("twilio", marks(*spec), NOW)
    assert (state.outage_since is not None, state.probe_due) == (in_outage, probe_due)


def test_an_outage_is_dated_from_the_first_unreachable_of_its_burst() -> None:
    """The report says since when; the earlier burst, an hour before, is another story."""
    state = health("twilio", marks((U, 1), (U, 20), (U, 50), (U, 70), (U, 3600)), NOW)
    assert state.outage_since == NOW - timedelta(seconds=70)


@pytest.mark.parametrize(("quiet", "probe_after", "due"), [(9, 8, True), (7, 8, False), (29, 30, False), (31, 30, True)])
def test_a_probe_is_due_after_the_policys_probe_interval(quiet: float, probe_after: int, due: bool) -> None:
    """The published `provider_probe_after_seconds` moves when the probe is due; the outage itself is
    the same three Unreachable."""
    state = health("twilio", marks((U, quiet), (U, quiet + 1), (U, quiet + 2)), NOW, timedelta(seconds=probe_after))
    assert state.outage_since is not None and state.probe_due is due


@pytest.mark.parametrize("seconds", [0, -1, 3601])
def test_a_probe_interval_outside_one_second_to_an_hour_is_refused_naming_the_field(seconds: int) -> None:
    """A probe every instant would hammer a provider that is down; one an hour later than that
    leaves a recovered provider skipped for no reason."""
    with pytest.raises(ValidationError, match="provider_probe_after_seconds"):
        PolicyRules(provider_probe_after_seconds=seconds)


def test_answers_are_watched_while_an_unreachable_is_recent() -> None:
    """Submit answers are marked only near an Unreachable, so a healthy provider costs no write."""
    assert health("twilio", marks((U, 5)), NOW).watched
    assert not health("twilio", marks((U, OUTAGE_WINDOW.total_seconds() + 1)), NOW).watched
    assert not health("twilio", marks((A, 1)), NOW).watched


# ---- the choice ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intent", "pinned_to", "healths", "route", "chosen", "probe"),
    [
        (IntentRoute(), None, {}, ROUTE, "twilio", False),
        (IntentRoute(demoted=["twilio"]), None, {}, ROUTE, "infobip", False),
        (IntentRoute(demoted=["twilio", "infobip"]), None, {}, ROUTE, "twilio", False),  # all down: primary
        (IntentRoute(), None, {"twilio": down("twilio")}, ROUTE, "infobip", False),
        (IntentRoute(), None, {"twilio": down("twilio", probe_due=True)}, ROUTE, "twilio", True),
        (IntentRoute(), None, {"twilio": down("twilio"), "infobip": down("infobip")}, ROUTE, "twilio", False),
        (IntentRoute(), None, {}, ["infobip"], "infobip", False),  # twilio drained
        (IntentRoute(), None, {}, ["sinch", "twilio"], "twilio", False),  # not on this worker: left out
        (IntentRoute(pinned_attempt="att_1"), "twilio", {"twilio": down("twilio")}, ROUTE, "twilio", False),
        (IntentRoute(pinned_attempt="att_1", demoted=[]), "infobip", {}, ROUTE, "infobip", False),
        (IntentRoute(pinned_attempt="att_1"), "twilio", {}, ["infobip"], None, False),  # drained: held
        (IntentRoute(pinned_attempt="att_1"), "sinch", {}, ["sinch", "twilio"], None, False),  # not here: held
        (IntentRoute(), None, {}, ["sinch"], None, False),  # nothing configured: held
    ],
)
def test_the_choice(
    intent: IntentRoute,
    pinned_to: str | None,
    healths: dict[str, ProviderHealth],
    route: list[str],
    chosen: str | None,
    probe: bool,
) -> None:
    """Pins beat everything; otherwise the route's order, demoted last, outages skipped unless probed."""
    choice = choose(route, "transactional/*", intent, pinned_to, healths, BOTH)
    assert (choice.provider, choice.probe) == (chosen, probe)


def test_a_held_choice_names_the_pin_and_the_route() -> None:
    """An operator reading the hold sees which attempt pinned it where, and what the route offers."""
    choice = choose(["infobip"], "account/GB", IntentRoute(pinned_attempt="att_1"), "twilio", {}, BOTH)
    assert "pinned to twilio by att_1" in choice.reason and "account/GB ['infobip']" in choice.reason


# ---- the property: no second provider while a message may exist -------------------------------

PROVIDERS = ["twilio", "infobip", "sinch"]
RESULTS = list(SubmitResult)


@settings(max_examples=400, deadline=None)
@given(
    route=st.permutations(PROVIDERS).flatmap(lambda order: st.integers(1, 3).map(lambda n: order[:n])),
    steps=st.lists(
        st.tuples(
            st.sampled_from(RESULTS),
            st.booleans(),  # seen at the provider after all
            st.sets(st.sampled_from(PROVIDERS)),  # in outage now
            st.booleans(),  # probe due
            st.sets(st.sampled_from(PROVIDERS)),  # drained by the policy now
        ),
        max_size=8,
    ),
)
def test_no_new_attempt_goes_to_a_second_provider_while_a_message_may_exist(
    route: list[str], steps: list[tuple[SubmitResult, bool, set[str], bool, set[str]]]
) -> None:
    """Whatever the answers, outages and drains: once an attempt may have produced a message, every
    later attempt goes to that attempt's provider or is held."""
    attempts: list[PastAttempt] = []
    for number, (result, taken, outages, probe_due, drained) in enumerate(steps, start=1):
        intent = intent_route(attempts)
        healths = {name: down(name, probe_due) for name in outages}
        offered = [name for name in route if name not in drained]
        choice = choose(offered, "r", intent, intent.pinned_to, healths, set(PROVIDERS))
        unproven = [a.provider for a in attempts if not proven_nothing(a)]
        if unproven:
            assert choice.provider in (None, unproven[0])
            assert set(unproven) == {unproven[0]}
        elif offered:
            assert choice.provider in offered
        if choice.provider is None:
            continue
        attempts.append(past(f"att_{number}", choice.provider, result, taken))


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.lists(st.floats(0, 3600), max_size=8).map(sorted),
    kinds=st.lists(st.sampled_from(list(Mark)), min_size=8, max_size=8),
)
def test_an_answer_newer_than_every_unreachable_means_no_outage(seconds: list[float], kinds: list[Mark]) -> None:
    """Whatever came before, a provider whose newest answer-bearing mark is an answer is not in outage."""
    spec = list(zip(kinds, seconds))
    answering = [mark for mark, _ in spec if mark is not Mark.PROBE]
    state = health("twilio", marks(*spec), NOW)
    if answering and answering[0] is Mark.ANSWERED:
        assert state.outage_since is None
    if state.probe_due:
        assert all(ago >= PROBE_AFTER.total_seconds() for _, ago in spec)


@settings(max_examples=300, deadline=None)
@given(
    routes=st.dictionaries(
        st.one_of(st.sampled_from([c.value for c in Category]), st.text(max_size=8)),
        st.one_of(
            st.dictionaries(
                st.one_of(st.sampled_from(["*", "GB", "US"]), st.text(max_size=4)),
                st.one_of(st.lists(st.one_of(st.sampled_from(["twilio", "infobip"]), st.text(max_size=6)), max_size=4),
                          st.integers(), st.none()),
                max_size=3,
            ),
            st.text(max_size=4),
        ),
        max_size=3,
    )
)
def test_any_published_routes_validate_or_are_refused_naming_sms_routes(routes: dict[str, object]) -> None:
    """Whatever an operator publishes under sms_routes, it is a valid route table or one ValidationError
    naming sms_routes, never another exception; a valid one reads back the same from its JSON."""
    try:
        rules = PolicyRules.model_validate({"sms_routes": routes})
    except ValidationError as refused:
        assert "sms_routes" in str(refused)
        return
    assert PolicyRules.model_validate(rules.model_dump(mode="json", exclude_defaults=True)) == rules
    for category, countries in rules.sms_routes.items():
        for country, providers in countries.items():
            assert rules.sms_route(category, None if country == "*" else country) is not None
            assert len(set(providers)) == len(providers) >= 1


def test_a_long_outage_probed_every_30_s_is_dated_from_its_first_unreachable() -> None:
    """Probes and their Unreachable every 30 s keep one outage going, dated from where it began."""
    spec = [(kind, 30.0 * n + offset) for n in range(20) for kind, offset in ((U, 0.0), (Mark.PROBE, 0.5))]
    state = health("twilio", marks(*spec), NOW)
    assert state.outage_since == NOW - timedelta(seconds=30.0 * 19)
    assert not state.probe_due  # the newest mark is now
