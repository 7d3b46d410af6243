"""Which provider message, if any, an attempt may claim from a search by recipient and content.

A provider that takes no id of ours (Twilio) can only be searched by recipient, sender and body.
Two intents that send the same text to the same number moments apart each fit the other's message,
so a fit is not proof: crediting an attempt with a message another attempt created closes an intent
`delivered` on someone else's message while its own was never sent (the silent loss the design
forbids, with a false audit record on top). The ledger therefore holds one claim per provider
message (``message_claims``: a constraint, not a convention), and this rule decides what a search's
candidates mean for one attempt, given who already holds what and which other attempts could still
have created a message. Pure: the ledger reads the inputs and writes the claim in one transaction
(``herald.ledger.claims``).

The rule, for attempt A and the messages that fit its reference (same recipient, sender and body,
created from A's start to the latest its request could have created one, each with 2 s of skew):

1. A message another attempt holds is that attempt's, never A's. A message A already holds is
   A's: Found, whatever else fits.
2. No fitting message left: NotFound. It proves absence only as any NotFound does (the proof
   window, ``herald.core.delivery_policy.absence_proven``): had A created a message, it would fit and be
   unclaimed, because no attempt claims by inference a message A could have created (rule 4).
3. Two or more unclaimed messages fit: ambiguous. A's request created at most one of them and
   nothing tells which; doubt stays doubt (looked up again; `unknown` at the horizon).
4. Exactly one unclaimed message M fits: A claims it only if no rival could have created it. A
   rival is another attempt to the same recipient with the same content on the same provider that
   holds no message and has no proof that it created none (unreachable, refused, or proven absent),
   whose start was at most M's creation and at most the in-flight bound before it (skew allowed).
   With a rival, M fits two unresolved attempts: ambiguous, and A waits for evidence (a report
   carrying the rival's reference, a claim by its own submit's answer) or for the horizon.

An attempt's row is committed before its provider is called, so every attempt that could have
created M is visible to the ledger when the rule runs; an attempt that created a message and whose
answer was lost is a rival until its own evidence arrives. The rule never credits one attempt with
a message that could be another's, at the cost of leaving some attempts `unknown` that a guess
would have resolved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from herald.core.outcomes import Candidate, Candidates, Found, Frozen, NotFound, Unavailable

# Clock skew allowed between our clocks (an attempt's start) and the provider's (`date_created`).
CLOCK_SKEW = timedelta(seconds=2)


class Rival(Frozen):
    """Another attempt that could have created a fitting message: same recipient, content and
    provider, holding no message, with no proof that it created none."""

    attempt_ref: str
    started_at: datetime


class ClaimDecision(Frozen):
    """What the candidates mean for the attempt, and the message it now claims (None: no new claim)."""

    result: Found | NotFound | Unavailable
    claim: Candidate | None = None


def could_have_created(started_at: datetime, created_at: datetime, in_flight_bound: timedelta) -> bool:
    """Whether an attempt that started at `started_at` could have created a message at `created_at`:
    its requests create nothing before it starts or past the in-flight bound after."""
    return started_at - CLOCK_SKEW <= created_at <= started_at + in_flight_bound + CLOCK_SKEW


def judge(
    attempt_ref: str,
    search: Candidates,
    holders: Mapping[str, str],
    rivals: Sequence[Rival],
    in_flight_bound: timedelta,
) -> ClaimDecision:
    """The rule above for one attempt.

    Args:
        attempt_ref: The attempt the search was made for.
        search: The messages that fit its reference.
        holders: Provider message id -> the attempt holding it, for the candidates already claimed.
        rivals: The other attempts that hold nothing and are not proven to have created nothing.
        in_flight_bound: How long after an attempt starts its request can still create a message.
    """
    mine = [each for each in search.messages if holders.get(each.found.provider_id) == attempt_ref]
    if len(mine) > 1:
        return ClaimDecision(result=Unavailable(reason=f"ledger holds {len(mine)} messages for this one attempt"))
    if mine:
        return ClaimDecision(result=mine[0].found)
    free = [each for each in search.messages if each.found.provider_id not in holders]
    if not free:
        return ClaimDecision(result=search.none_left())
    if len(free) > 1:
        return ClaimDecision(
            result=Unavailable(reason=f"ambiguous: {len(free)} unclaimed messages fit this attempt; none is claimed")
        )
    message = free[0]
    others = [
        rival.attempt_ref
        for rival in rivals
        if rival.attempt_ref != attempt_ref
        and could_have_created(rival.started_at, message.created_at, in_flight_bound)
    ]
    if others:
        return ClaimDecision(
            result=Unavailable(
                reason=f"ambiguous: the one fitting message could be another unresolved attempt's "
                f"({len(others)} rival{'s' if len(others) > 1 else ''}); none is claimed"
            )
        )
    return ClaimDecision(result=message.found, claim=message)
