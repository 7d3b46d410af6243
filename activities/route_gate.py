"""The route, chosen in the submit's transaction once the send policy admits the attempt: which provider, and why.

The choice is the pure rule of ``herald.core.routes``, applied to what this transaction reads: the
route in the policy version that admitted the attempt, the providers' outage marks, and the ledger
rows of the attempt itself and of the one the intent is pinned to. It is stamped on the attempt row
(provider, account, the reason) in the same commit, before the provider is called, so a choice is
never made twice for one attempt: a submit repeated after a lost commit finds its row handed to a
provider already and goes there. It costs no Temporal action: the submit activity runs anyway.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from activities.policy_gate import PolicyGate
from herald.core.contracts import SubmitInput
from herald.core.message import Channel
from herald.core.routes import HOLD_FOR, PROBE_AFTER, HandedTo, Mark, RouteChoice, choose
from herald.core.send_policy import Decision, PolicyDecision
from herald.ledger import provider_marks
from herald.ledger.provider_marks import RoutingFacts
from herald.providers.port import Provider
from herald.providers.registry import Providers

# The submit answers that came from the provider: it is up (marked while it is watched).
_ANSWERS = frozenset({"accepted", "retryable", "rejected"})


class RouteGate:
    """Admits one attempt under the send policy (``PolicyGate``), then chooses its provider."""

    def __init__(self, policy: PolicyGate, input: SubmitInput, providers: Providers) -> None:
        self.policy = policy
        self._input = input
        self._providers = providers
        # Set once the attempt is admitted: the provider it goes to and why (None: none serves the channel).
        self.provider: Provider | None = None
        self.choice: RouteChoice | None = None
        self._route: tuple[str, list[str]] | None = None
        self._facts: RoutingFacts | None = None

    async def __call__(self, cursor: Any) -> PolicyDecision:
        decision = await self.policy(cursor)
        channel = self._input.message.channel
        default = self._providers.default(channel)
        if decision.decision is not Decision.ALLOW or default is None:
            return decision  # held by the policy, or no provider here (refused after the rows, as before)
        route = None
        if channel is Channel.SMS and self.policy.rules is not None:
            route = self.policy.rules.sms_route(self._input.message.category, self.policy.region)
        name, providers = route or ("built-in", [default.name])
        self._route = (f"{name} v{decision.version}" if route else name, providers)
        choice = await self._choose(cursor, default.name)
        if choice.provider is None:
            # Pinned where the route no longer goes: nothing is written or sent; asked again later.
            return PolicyDecision(
                version=decision.version, decision=Decision.DEFER, rule="route",
                reason=choice.reason, not_before=self._input.policy_at + HOLD_FOR,
            )  # fmt: skip
        self.choice, self.provider = choice, self._providers[choice.provider]
        handed = HandedTo(provider=self.provider.name, route=self.provider.route, reason=choice.reason)
        return decision.model_copy(update={"handed_to": handed})

    async def _choose(self, cursor: Any, default: str) -> RouteChoice:
        assert self._route is not None
        name, route = self._route
        intent, ref = self._input.route, self._input.attempt_ref
        configured = self._providers.serving(self._input.message.channel)
        pinned = [intent.pinned_attempt] if intent.pinned_attempt and intent.pinned_to is None else []
        looked = [*route, *(p for p in [intent.pinned_to] if p and p not in route)]
        facts = self._facts = await provider_marks.routing_facts(
            cursor, looked, [ref, *pinned], probe_after=self._probe_after
        )
        already = facts.attempt_providers.get(ref)
        if already is not None:
            # This very attempt was committed before (the commit's answer was lost): where it went.
            where = f"already handed to {already} (the same attempt, submitted again)"
            return RouteChoice(provider=already if already in configured else None, reason=where)
        # The pin as the machine knows it, else as the pinned attempt's row says; a row that names
        # no provider was written before providers were named: the channel's default then.
        pinned_to = intent.pinned_to or (facts.attempt_providers.get(pinned[0], default) if pinned else None)
        choice = choose(route, name, intent, pinned_to, facts.healths, configured)
        if choice.probe and choice.provider is not None:
            if not await provider_marks.claim_probe(cursor, choice.provider, ref, self._probe_after):
                # Another attempt probes it now: this one is routed as if no probe were due.
                taken = facts.healths[choice.provider].model_copy(update={"probe_due": False})
                choice = choose(route, name, intent, pinned_to, {**facts.healths, choice.provider: taken}, configured)
        return choice

    @property
    def _probe_after(self) -> timedelta:
        """The probe interval of the policy that admitted the attempt (the built-in 30 s without one)."""
        rules = self.policy.rules
        return timedelta(seconds=rules.provider_probe_after_seconds) if rules is not None else PROBE_AFTER

    def mark_for(self, kind: str) -> Mark | None:
        """What the submit's answer `kind` tells about the chosen provider, to append (None: nothing).
        Unreachable always; a provider answer only while the provider is watched or probed; a lost
        answer (unknown) never."""
        if self.provider is None or self._facts is None or self.choice is None:
            return None
        if kind == "unreachable":
            return Mark.UNREACHABLE
        state = self._facts.healths.get(self.provider.name)
        if kind in _ANSWERS and (self.choice.probe or (state is not None and state.watched)):
            return Mark.ANSWERED
        return None

    def next_provider(self) -> str | None:
        """After the chosen provider was unreachable: the other provider the route would give the
        intent's next attempt now, one this intent has not found down already and not in outage
        (None: there is none, so the next attempt backs off as before: never a ping-pong without
        a pause between providers that are all down)."""
        if self.provider is None or self._facts is None or self._route is None or self._input.route.pinned_attempt:
            return None
        name, route = self._route
        demoted = [*self._input.route.demoted, self.provider.name]
        intent = self._input.route.model_copy(update={"demoted": list(dict.fromkeys(demoted))})
        configured = self._providers.serving(self._input.message.channel)
        # Its probe is not due: this attempt was it, or the provider is down for this intent anyway.
        healths = {n: h.model_copy(update={"probe_due": False}) for n, h in self._facts.healths.items()}
        chosen = choose(route, name, intent, None, healths, configured).provider
        tried = chosen in self._input.route.demoted or chosen == self.provider.name
        if chosen is None or tried or healths[chosen].outage_since is not None:
            return None
        return chosen
