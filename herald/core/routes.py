"""Which provider an attempt goes to: the policy's route, failover only on proof, outages skipped (pure).

The rule, in the order it is applied:

    pinned ..... an earlier attempt of the intent is not proven to have produced no message (it was
                 accepted, its outcome is unknown, it failed after acceptance, its absence is only
                 presumed): the new attempt goes to that attempt's provider and nowhere else. A
                 second provider could deliver a second copy that no dedupe on either side sees.
                 Pinned to a provider the route no longer names (drained) or this worker does not
                 have, the attempt is held (``HOLD_FOR``) until the policy names it again or the
                 intent expires: lookups and reports of the earlier attempt still go to it (they are
                 not new attempts), only a new send waits.
    route ...... otherwise the route's providers in order, those this worker does not have left
                 out, those this intent found unreachable or that refused it before acceptance moved
                 to the end (not out: with every provider down the primary is tried again, and an
                 unreachable submit sends nothing); the first one not in outage is chosen, or, when
                 all are in outage, the first of the order.
    outage ..... seen across all intents from submit answers (``health``): ``OUTAGE_AFTER`` submits in
                 a row Unreachable within ``OUTAGE_WINDOW``; it ends at the first provider answer
                 (accepted, "not now", a refusal). While it lasts, one new attempt every
                 ``PROBE_AFTER`` of quiet is routed to it as a probe (safe: an unreachable submit
                 provably sends nothing). Timeouts count neither way: a lost answer says nothing
                 about whether the provider is up.

Why these numbers. Three in a row: one refused connection is a restarting load balancer, three from
different intents within a minute is the provider's outage as Herald sees it; counting from one would
move traffic on every blip and back. The window keeps three failures scattered over hours from
counting as one outage. Thirty seconds between probes: an outage shorter than that costs a failover
(one extra request per intent, nothing sent twice), and a provider that is back is noticed within
thirty seconds plus one submit, at the cost of one request per thirty seconds while it is down.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from enum import Enum

from herald.core.lifecycle import SubmitResult
from herald.core.outcomes import Frozen

OUTAGE_AFTER = 3
OUTAGE_WINDOW = timedelta(seconds=60)
PROBE_AFTER = timedelta(seconds=30)
# A new attempt pinned to a provider the route does not offer waits this long before the policy
# (and the route in it) is asked again.
HOLD_FOR = timedelta(seconds=60)

# What a submit proved about one attempt: nothing reached a provider (Unreachable), the provider
# looked and said no (Retryable, Rejected), a lookup proved absence, or it was never handed over.
_PROVEN_NOTHING = frozenset(
    {
        SubmitResult.UNREACHABLE,
        SubmitResult.RETRYABLE,
        SubmitResult.REJECTED,
        SubmitResult.NOT_ACCEPTED,
        SubmitResult.NOT_SENT,
    }
)
# The answers that move a provider to the end of this intent's order: it could not be reached, or
# it refused the message before taking it.
_DEMOTING = frozenset({SubmitResult.UNREACHABLE, SubmitResult.RETRYABLE, SubmitResult.REJECTED})


class PastAttempt(Frozen):
    """One earlier attempt of the intent, as the machine knows it."""

    ref: str
    # The provider its submit named (None: the submit never answered; the ledger's row says).
    provider: str | None
    submit_result: SubmitResult | None
    # Any sign the provider took it: its id, a status, evidence after a presumed absence.
    taken: bool = False


def proven_nothing(attempt: PastAttempt) -> bool:
    """Whether the attempt provably produced no message anywhere (anything else may have)."""
    return not attempt.taken and attempt.submit_result in _PROVEN_NOTHING


class IntentRoute(Frozen):
    """What the routing rule needs to know about one intent, computed by its machine."""

    # The earliest attempt not proven to have produced no message: every new attempt goes where it went.
    pinned_attempt: str | None = None
    # Its provider when the machine knows it (None with a pinned attempt: read it from its ledger row).
    pinned_to: str | None = None
    # Providers this intent found unreachable or that refused it before acceptance, first found first.
    demoted: list[str] = []


def intent_route(attempts: Sequence[PastAttempt]) -> IntentRoute:
    """The pin and the demoted providers of an intent whose earlier attempts were `attempts`."""
    demoted: list[str] = []
    for attempt in attempts:
        if not proven_nothing(attempt):
            return IntentRoute(pinned_attempt=attempt.ref, pinned_to=attempt.provider)
        if attempt.submit_result in _DEMOTING and attempt.provider is not None and attempt.provider not in demoted:
            demoted.append(attempt.provider)
    return IntentRoute(demoted=demoted)


class Mark(str, Enum):
    """What one submit told about its provider (``provider_marks``)."""

    UNREACHABLE = "unreachable"  # no provider answer: refused connection, DNS, TLS, 429
    ANSWERED = "answered"  # accepted, "not now" or a refusal: the provider is up
    PROBE = "probe"  # an attempt routed to a provider in outage to see whether it is back


class ProviderHealth(Frozen):
    """One provider as the outage rule sees it now."""

    provider: str
    outage_since: datetime | None = None  # None: not in outage
    probe_due: bool = False
    # Whether submit answers should be marked: in outage, or an Unreachable within the window.
    watched: bool = False


def health(
    provider: str, marks: Sequence[tuple[Mark, datetime]], now: datetime, probe_after: timedelta = PROBE_AFTER
) -> ProviderHealth:
    """The outage rule over the provider's newest marks (newest first); a probe is due `probe_after`
    (the policy's ``provider_probe_after_seconds``) after the newest."""
    answers = [(mark, at) for mark, at in marks if mark is not Mark.PROBE]
    unreachable = [at for mark, at in answers if mark is Mark.UNREACHABLE]
    watched = bool(unreachable) and now - unreachable[0] <= OUTAGE_WINDOW
    run = []
    for mark, at in answers:
        if mark is not Mark.UNREACHABLE:
            break
        run.append(at)
    in_outage = len(run) >= OUTAGE_AFTER and run[0] - run[OUTAGE_AFTER - 1] <= OUTAGE_WINDOW
    if not in_outage:
        return ProviderHealth(provider=provider, watched=watched)
    # Since the first Unreachable of the burst that started it.
    since = run[OUTAGE_AFTER - 1]
    for earlier, later in zip(run[OUTAGE_AFTER:], run[OUTAGE_AFTER - 1 :]):
        if later - earlier > OUTAGE_WINDOW:
            break
        since = earlier
    newest = marks[0][1] if marks else run[0]
    return ProviderHealth(provider=provider, outage_since=since, probe_due=now - newest >= probe_after, watched=True)


class HandedTo(Frozen):
    """Where an admitted attempt goes, stamped on its row in the transaction that admits it."""

    provider: str
    # The provider's account and sender, or relay (attempts.route).
    route: str | None = None
    # Why the route chose it (attempts.route_reason).
    reason: str | None = None


class RouteChoice(Frozen):
    """The provider a new attempt goes to, or a hold, and why."""

    provider: str | None  # None: held (pinned to a provider the route does not offer)
    reason: str
    # The attempt is the probe of a provider in outage (claimed in the ledger, one at a time).
    probe: bool = False


def choose(
    route: Sequence[str],
    route_name: str,
    intent: IntentRoute,
    pinned_to: str | None,
    healths: Mapping[str, ProviderHealth],
    configured: Collection[str],
) -> RouteChoice:
    """Where a new attempt goes under `route` (named `route_name` in reasons), for an intent whose
    pin resolves to `pinned_to` (``IntentRoute.pinned_to``, or its ledger row's provider), with the
    providers' outage state `healths` and the providers this worker has (`configured`)."""
    if intent.pinned_attempt is not None:
        where = f"pinned to {pinned_to} by {intent.pinned_attempt}, which may have produced a message"
        if pinned_to is None or pinned_to not in route:
            return RouteChoice(provider=None, reason=f"{where}; route {route_name} {list(route)} does not offer it: held")
        if pinned_to not in configured:
            return RouteChoice(provider=None, reason=f"{where}; not configured on this worker: held")
        return RouteChoice(provider=pinned_to, reason=where)
    offered = [name for name in route if name in configured]
    if not offered:
        return RouteChoice(provider=None, reason=f"route {route_name} {list(route)}: none configured on this worker: held")
    order = [n for n in offered if n not in intent.demoted] + [n for n in intent.demoted if n in offered]
    notes = [f"route {route_name} {list(route)}"]
    if intent.demoted:
        notes.append(f"{', '.join(intent.demoted)} moved last (unreachable or refused this intent)")
    for name in order:
        state = healths.get(name) or ProviderHealth(provider=name)
        if state.outage_since is None:
            return RouteChoice(provider=name, reason="; ".join(notes))
        if state.probe_due:
            notes.append(f"{name} in outage since {state.outage_since.isoformat()}: this attempt probes it")
            return RouteChoice(provider=name, reason="; ".join(notes), probe=True)
        notes.append(f"{name} in outage since {state.outage_since.isoformat()}: skipped")
    notes.append("every provider in outage: the first in order")
    return RouteChoice(provider=order[0], reason="; ".join(notes))
