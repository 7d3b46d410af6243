"""The claim rule (``herald.core.claims.judge``): which message, if any, a search by recipient and content
lets an attempt claim.

A table of the rule's cases first; then a model-based property: random attempts of several intents
to one number with one body, each of which created one message or none (its answer lost or not),
looked up in random order with the ledger's claims carried between lookups; no claim ever credits
an attempt with a message it did not create, and no "none left" is ever said of an attempt that
created one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herald.core.claims import CLOCK_SKEW, Rival, could_have_created, judge
from herald.core.outcomes import Candidate, Candidates, Found, NotFound, ProviderStatus, Unavailable
from tests.depth import examples

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
BOUND = timedelta(seconds=60)


def sid(n: int) -> str:
    return f"SM{n:032x}"


def candidates(*created_offsets: float) -> Candidates:
    """Messages SM..1, SM..2, ... created at T0 + each offset (seconds)."""
    return Candidates(
        messages=[
            Candidate(
                found=Found(provider_id=sid(i), status=ProviderStatus.DELIVERED),
                created_at=T0 + timedelta(seconds=offset),
            )
            for i, offset in enumerate(created_offsets, start=1)
        ],
        searched_since=T0,
        searched_at=T0 + timedelta(minutes=20),
        queue_bounded=True,
    )


def rival(ref: str, started_offset: float) -> Rival:
    return Rival(attempt_ref=ref, started_at=T0 + timedelta(seconds=started_offset))


CASES = [
    # (name, created offsets, holders, rivals, expected kind, expected claim id or reason fragment)
    ("one free message, no rival", (1.0,), {}, [], "claim", sid(1)),
    ("the message another attempt holds is never ours", (1.0,), {sid(1): "b/1"}, [], "none_left", None),
    ("already ours", (1.0, 2.0), {sid(1): "a/1"}, [rival("b/1", 0)], "found", sid(1)),
    ("ours beside another's", (1.0, 2.0), {sid(1): "b/1", sid(2): "a/1"}, [], "found", sid(2)),
    ("the free one beside another's", (1.0, 2.0), {sid(1): "b/1"}, [], "claim", sid(2)),
    ("two free messages", (1.0, 2.0), {}, [], "ambiguous", "2 unclaimed messages"),
    ("a rival that could have created it", (1.2,), {}, [rival("b/1", 1.2)], "ambiguous", "1 rival"),
    ("a rival that started after it was created", (1.0,), {}, [rival("b/1", 5.0)], "claim", sid(1)),
    ("a rival that started long before it", (100.0,), {}, [rival("b/1", 0.0)], "claim", sid(1)),
    ("a rival just inside the skew", (1.0,), {}, [rival("b/1", 2.9)], "ambiguous", "1 rival"),
    ("two rivals", (3.0,), {}, [rival("b/1", 1.0), rival("c/1", 2.0)], "ambiguous", "2 rivals"),
]


@pytest.mark.parametrize(("name", "offsets", "holders", "rivals", "kind", "expect"), CASES, ids=[c[0] for c in CASES])
def test_the_claim_rule(name, offsets, holders, rivals, kind, expect) -> None:
    """Each case of the rule gives the written answer: a claim, the attempt's own, none left, or doubt."""
    decision = judge("a/1", candidates(*offsets), holders, rivals, BOUND)
    if kind == "claim":
        assert decision.claim is not None and decision.claim.found.provider_id == expect
        assert isinstance(decision.result, Found) and decision.result.provider_id == expect
    elif kind == "found":
        assert decision.claim is None
        assert isinstance(decision.result, Found) and decision.result.provider_id == expect
    elif kind == "none_left":
        assert decision.claim is None
        assert isinstance(decision.result, NotFound) and decision.result.queue_bounded
        assert decision.result.searched_at == T0 + timedelta(minutes=20)
    else:
        assert decision.claim is None
        assert isinstance(decision.result, Unavailable) and "ambiguous" in decision.result.reason
        assert expect in decision.result.reason


def test_could_have_created_is_the_in_flight_window_with_skew() -> None:
    """An attempt could have created a message from its start (less skew) to its in-flight bound (plus skew)."""
    start = T0
    assert could_have_created(start, start - CLOCK_SKEW, BOUND)
    assert not could_have_created(start, start - CLOCK_SKEW - timedelta(milliseconds=1), BOUND)
    assert could_have_created(start, start + BOUND + CLOCK_SKEW, BOUND)
    assert not could_have_created(start, start + BOUND + CLOCK_SKEW + timedelta(milliseconds=1), BOUND)


# ---- the property: a ledger of claims built by the rule never holds a wrong one ----------------


@dataclass
class Attempt:
    ref: str
    started: datetime
    created: datetime | None  # when its message was created; None: it created none
    answered: bool  # its submit's answer arrived: an exact claim (or an exact "none")


@st.composite
def worlds(draw: st.DrawFn) -> list[Attempt]:
    count = draw(st.integers(min_value=1, max_value=7))
    attempts = []
    for n in range(count):
        started = T0 + timedelta(seconds=draw(st.floats(min_value=0, max_value=150)))
        made = draw(st.booleans())
        lag = timedelta(seconds=draw(st.floats(min_value=0, max_value=BOUND.total_seconds())))
        attempts.append(Attempt(f"intent{n}/1", started, started + lag if made else None, draw(st.booleans())))
    return attempts


@given(world=worlds(), order=st.randoms(use_true_random=False), rounds=st.integers(min_value=1, max_value=4))
@settings(max_examples=examples(400), deadline=None)
def test_claims_built_by_the_rule_are_never_wrong(world: list[Attempt], order, rounds: int) -> None:
    """Whatever the interleaving of lookups, every claim names the attempt that created the message, and
    no attempt that created a message is ever told none is left for it."""
    messages = {a.ref: sid(i + 1) for i, a in enumerate(world) if a.created is not None}
    created_at = {messages[a.ref]: a.created for a in world if a.created is not None}
    holders: dict[str, str] = {}  # provider id -> attempt ref
    proven_none: set[str] = set()
    for a in world:  # answered submits: exact claims, or exact proof of no message (refused, unreachable)
        if a.answered:
            if a.created is not None:
                holders[messages[a.ref]] = a.ref
            else:
                proven_none.add(a.ref)
    for _ in range(rounds):
        lost = [a for a in world if not a.answered and a.ref not in proven_none and a.ref not in holders.values()]
        order.shuffle(lost)
        for me in lost:
            fitting = [
                Candidate(found=Found(provider_id=pid, status=ProviderStatus.QUEUED), created_at=when)
                for pid, when in created_at.items()
                if me.started - CLOCK_SKEW <= when <= me.started + BOUND + CLOCK_SKEW
            ]
            if not fitting:
                assert me.created is None, "a message of the attempt's own must always fit it"
                proven_none.add(me.ref)
                continue
            rivals = [
                Rival(attempt_ref=o.ref, started_at=o.started)
                for o in world
                if o.ref != me.ref and o.ref not in holders.values() and o.ref not in proven_none
            ]
            search = Candidates(messages=fitting, searched_at=T0, queue_bounded=True)
            decision = judge(me.ref, search, {p: h for p, h in holders.items() if p in dict.fromkeys(c.found.provider_id for c in fitting)}, rivals, BOUND)
            if decision.claim is not None:
                holders[decision.claim.found.provider_id] = me.ref
            elif isinstance(decision.result, NotFound):
                proven_none.add(me.ref)
    for provider_id, holder in holders.items():
        assert messages.get(holder) == provider_id, f"{holder} credited with {provider_id}, another's message"
    for ref in proven_none:
        assert ref not in messages, f"{ref} created a message but was told none is left for it"
