"""The send policy: versioned rules operations publish, and the pure decision taken before every attempt.

A policy version is data (``policy_versions`` in PostgreSQL, published with ``starter.py policy
publish``): it never changes once published, and the version in force at an instant is the one
with the latest ``effective_from`` at or before it. Before every attempt an activity gathers what
is known about the recipient (``RecipientFacts``) and ``decide`` returns one decision:

    allow ..... send now; the attempt row records the version and the decision
    defer ..... not before a named time (quiet hours, recipient cooldown), with the rule; the intent
                waits on a durable timer and is evaluated again, or expires first
    suppress .. never (no consent for a category that needs it, a suppressed recipient, a refused
                destination country): terminal, naming the rule and the version

Rules are checked in that order of severity: anything that suppresses wins over a deferral, so an
opted-out recipient is not kept waiting for quiet hours to end only to be refused then.

The policy also says where each attempt's submit stands when its route is backlogged
(``dispatch_order``): the category's priority key (Temporal's task-queue priority: 1 goes first)
and the tenant's weight (Temporal's fairness: within one priority, tenants share the route in
proportion to their weights).
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from herald.core.outcomes import Frozen
from herald.core.routes import PROBE_AFTER, HandedTo

# Temporal's priority keys with the server's default range: 1 goes first, 5 last (3 when unset).
PRIORITY_KEYS = (1, 5)
# A tenant: the marketplace, seller, studio or business line a notice is for. Temporal's fairness
# key (at most 64 bytes); lower-case, so one tenant is never two keys.
TENANT_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,47}$"
SHARED_TENANT = "shared"
_TENANT = re.compile(TENANT_PATTERN)
# A provider as routes name it (``Provider.name``: "twilio", "infobip").
PROVIDER_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
_PROVIDER = re.compile(PROVIDER_PATTERN)
_REGION = re.compile(r"^[A-Z]{2}$")


class Category(str, Enum):
    """What a message is for; consent, quiet hours and suppression are decided per category."""

    TRANSACTIONAL = "transactional"  # a receipt, a seat offer: the recipient is waiting for it
    ACCOUNT = "account"  # security and account notices
    MARKETING = "marketing"  # needs consent evidence


# Security codes before receipts and seat offers, marketing after everything.
BUILT_IN_PRIORITY = {Category.ACCOUNT: 1, Category.TRANSACTIONAL: 2, Category.MARKETING: 5}
# The longest a category's message may wait in the provider's own queue when the policy names no
# provider_queue_validity_seconds for it (None: the delivery policy's provider_queue_validity, ten
# minutes). Where lateness is worse than absence the provider must drop the message, not send it late.
# - account, 120 s: sign-in and verification codes and security notices. A code lives 5 minutes
#   (Telesign's default and longest) to 10 (Twilio Verify's default; 2 its shortest), and the person
#   is on a screen waiting for it: past two minutes they have asked for another, which at most
#   services voids the first, and the carrier's delivery and the typing still come on top. Twilio
#   takes 1 to 36,000 s (above 5 recommended), Infobip 1 s to 48 h: both accept it. An account notice
#   dropped unsent is not lost: the provider's "expired in queue" is retryable, and the next attempt
#   (again at most 120 s in the queue, never past the intent's expiry) goes once the route has room.
# - transactional, none: receipts keep their use for days, a seat offer for the hold its text names
#   (minutes to a day); the delivery policy's ten minutes already say "late anyway" for the rest.
# - marketing, none: it waits for quiet hours and cooldowns before the submit, not in the provider's
#   queue; ten minutes there keeps it from slipping into quiet hours by much.
BUILT_IN_VALIDITY: dict[Category, int | None] = {Category.ACCOUNT: 120, Category.TRANSACTIONAL: None,
                                                 Category.MARKETING: None}  # fmt: skip


class Decision(str, Enum):
    ALLOW = "allow"
    DEFER = "defer"
    SUPPRESS = "suppress"


class CategoryRules(Frozen):
    consent_required: bool = False
    # Urgent categories are never deferred by quiet hours.
    urgent: bool = False
    # ISO 3166 regions this category may go to ("*": any, the default); a number whose region
    # cannot be told is allowed only under "*".
    countries: list[str] = ["*"]
    # While the provider is unreachable (nothing can be sent), retries go on until the intent's
    # expiry; a category whose notices are worthless sooner (a login code) gives up this many
    # seconds after the intent was created, and the intent ends `expired` naming the outage.
    # None: the expiry alone bounds it. Up to 7 days.
    unreachable_give_up_seconds: int | None = Field(default=None, ge=1, le=7 * 86_400)
    # Where this category's submits stand in a backlogged route queue: 1 first, 5 last. None: the
    # category's built-in priority (BUILT_IN_PRIORITY), so a rules file that names a category for
    # another rule does not move it in the queue.
    priority: int | None = Field(default=None, ge=PRIORITY_KEYS[0], le=PRIORITY_KEYS[1])
    # The longest this category's message may wait in the provider's own queue (Twilio's
    # ValidityPeriod, 1 to 36,000 s; Infobip's validityPeriod) before the provider drops it unsent:
    # short for a login code, and never past the intent's expiry. None: the category's built-in
    # (BUILT_IN_VALIDITY: account 120 s, the others the delivery policy's provider_queue_validity),
    # so a rules file that names a category for another rule does not let its codes arrive late.
    provider_queue_validity_seconds: int | None = Field(default=None, ge=1, le=36_000)


class QuietHours(Frozen):
    """Local time in the recipient's zone during which non-urgent messages wait."""

    start: time
    end: time

    def window_end(self, local: datetime) -> datetime | None:
        """When the quiet window that `local` falls in ends (local time), or None outside it."""
        clock = local.time().replace(tzinfo=None)
        overnight = self.start > self.end
        inside = (clock >= self.start or clock < self.end) if overnight else (self.start <= clock < self.end)
        if not inside:
            return None
        end = local.replace(hour=self.end.hour, minute=self.end.minute, second=0, microsecond=0)
        return end + timedelta(days=1) if end <= local else end


# Evidence a recipient gave for one category (a one-click unsubscribe, an ESP's unsubscribe event):
# it stops that category whatever `suppression_applies_to` says, and the gate only reads it there.
UNSUBSCRIBE = "unsubscribe"


class PolicyRules(Frozen):
    """One published rule set (``policy_versions.rules``)."""

    categories: dict[Category, CategoryRules] = Field(
        default_factory=lambda: {
            Category.TRANSACTIONAL: CategoryRules(urgent=True),
            Category.ACCOUNT: CategoryRules(urgent=True),
            Category.MARKETING: CategoryRules(consent_required=True),
        }
    )
    quiet_hours: QuietHours | None = None
    # Zone for quiet hours when neither the intent nor the number tells one (e-mail, unknown ranges).
    default_time_zone: str | None = None
    # Which categories each kind of suppression evidence stops (opt_out: Twilio 21610; hard_bounce
    # and complaint: the ESP's events). By default every category: the recipient asked for none,
    # or the address cannot receive.
    suppression_applies_to: dict[str, list[Category]] = Field(
        default_factory=lambda: {cause: list(Category) for cause in ("opt_out", "hard_bounce", "complaint")}
    )
    # Minimum gap between two submits to one recipient on one channel, across intents and workers
    # (enforced in the submit transaction, so racing workers cannot both pass). 0: off.
    cooldown_seconds: dict[str, int] = Field(default_factory=dict)
    # Each tenant's share of a backlogged route within one priority (Temporal's fairness weight);
    # a tenant not named here weighs 1.
    tenant_weights: dict[str, float] = Field(default_factory=dict)
    # Where SMS goes (herald.core.routes): per category, per destination country (ISO 3166 region,
    # "*" for the rest), the provider names in order, primary first. A category or country not
    # named here takes the built-in route (the worker's configured SMS provider), so a policy
    # without routes, and every version published before routes existed, means what it always
    # meant. Draining a provider is publishing a version whose routes leave it out.
    sms_routes: dict[Category, dict[str, list[str]]] = Field(default_factory=dict)
    # How long a provider in outage is skipped after its last mark before one attempt probes it
    # (herald.core.routes): the price of a probe is one request that provably sends nothing when it
    # is still down, against the seconds new intents keep failing over after it is back. 30 s by
    # default; an operator who wants the route back sooner publishes a shorter one.
    provider_probe_after_seconds: int = Field(default=int(PROBE_AFTER.total_seconds()), ge=1, le=3600)

    @field_validator("sms_routes")
    @classmethod
    def _sane_routes(cls, value: dict[Category, dict[str, list[str]]]) -> dict[Category, dict[str, list[str]]]:
        for category, countries in value.items():
            for country, providers in countries.items():
                where = f"sms_routes.{category.value}.{country}"
                if country != "*" and not _REGION.match(country):
                    raise ValueError(f"sms_routes.{category.value}: a country is an ISO 3166 region (two capitals) or \"*\", not {country!r}")
                if not providers:
                    raise ValueError(f"{where}: at least one provider (to send nowhere, leave the country out of the category's countries)")
                if len(set(providers)) != len(providers):
                    raise ValueError(f"{where}: each provider at most once")
                for name in providers:
                    if not _PROVIDER.match(name):
                        raise ValueError(f"{where}: a provider name is {PROVIDER_PATTERN}, not {name!r}")
        return value

    @field_validator("default_time_zone")
    @classmethod
    def _a_real_zone(cls, value: str | None) -> str | None:
        if value is not None:
            zone(value)
        return value

    @field_validator("cooldown_seconds")
    @classmethod
    def _sane_cooldowns(cls, value: dict[str, int]) -> dict[str, int]:
        for channel, seconds in value.items():
            if channel not in ("sms", "email") or not 0 <= seconds <= 86_400:
                raise ValueError("cooldown_seconds: channel sms or email, 0 to 86400 seconds")
        return value

    @field_validator("tenant_weights")
    @classmethod
    def _sane_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for tenant, weight in value.items():
            if not _TENANT.match(tenant) or not 0 < weight <= 1000:
                raise ValueError(f"tenant_weights: a tenant id ({TENANT_PATTERN}) and a weight above 0, at most 1000")
        return value

    @model_validator(mode="after")
    def _every_category(self) -> PolicyRules:
        missing = set(Category) - set(self.categories)
        if missing:
            raise ValueError(f"categories: rules for every category are required (missing {sorted(c.value for c in missing)})")
        return self

    def suppressing_causes(self, category: Category) -> list[str]:
        """The kinds of evidence that stop `category`: as `suppression_applies_to` says, and always an
        unsubscribe (the recipient's own request, recorded for the one category it names)."""
        causes = {cause for cause, categories in self.suppression_applies_to.items() if category in categories}
        return sorted(causes | {UNSUBSCRIBE})

    def stopped_by(self, cause: str, scope: Category | None = None) -> list[Category]:
        """The categories evidence of `cause` stops: those whose ``suppressing_causes`` hold it, an
        unsubscribe only the category it was asked from (`scope`)."""
        return [c for c in Category if cause in self.suppressing_causes(c) and (cause != UNSUBSCRIBE or c == scope)]

    def cooldown(self, channel: str) -> timedelta:
        return timedelta(seconds=self.cooldown_seconds.get(channel, 0))

    def sms_route(self, category: Category, region: str | None) -> tuple[str, list[str]] | None:
        """The route an SMS of `category` to `region` takes: its name ("transactional/GB",
        "transactional/*") and the providers in order; None: the built-in route."""
        countries = self.sms_routes.get(category)
        if not countries:
            return None
        key = region if region is not None and region in countries else "*"
        if key not in countries:
            return None
        return f"{category.value}/{key}", list(countries[key])


class RecipientFacts(Frozen):
    """What the evaluation activity found about one recipient, for one attempt."""

    channel: str
    category: Category
    region: str | None  # from the E.164 number (phonenumbers); None for e-mail or unknown ranges
    time_zones: list[str]  # the recipient's zones: the intent's, else the number's, else the policy default
    consent: bool  # consent evidence exists for this recipient and category
    suppressed_because: str | None  # e.g. "opt_out (Twilio 21610) at 2026-12-01T09:00Z"
    cooldown_until: datetime | None  # the channel's last submit to this recipient plus the cooldown


class PolicyDecision(Frozen):
    version: int
    decision: Decision
    rule: str  # which rule decided: consent, suppression, country, quiet_hours, cooldown, allow
    reason: str
    not_before: datetime | None = None
    # On allow: the category's give-up on an unreachable provider (CategoryRules).
    give_up_after_seconds: int | None = None
    # On allow: the provider the route chose, stamped on the attempt row as it is admitted.
    handed_to: HandedTo | None = None


class DispatchOrder(Frozen):
    """Where one attempt's submit stands in its route's queue (Temporal's ``Priority``), and why."""

    version: int
    priority_key: int
    fairness_key: str
    fairness_weight: float
    reason: str
    # The category's provider queue validity (seconds): the policy's, else its built-in; None: the
    # delivery policy's.
    validity_seconds: int | None = None


def dispatch_order(
    rules: PolicyRules, version: int, category: Category, tenant: str, requested: int | None
) -> DispatchOrder:
    """The category's priority, or the intent's own when it asked for a lower one (a larger key);
    an intent never goes ahead of its category: a request for a higher one is recorded, not granted."""
    floor = rules.categories[category].priority or BUILT_IN_PRIORITY[category]
    key = max(floor, requested) if requested is not None else floor
    weight = rules.tenant_weights.get(tenant, 1.0)
    reason = f"{category.value} priority {floor} (policy v{version})"
    if requested is not None and requested != key:
        reason += f"; the intent asked for {requested}, ahead of its category: not granted"
    elif requested is not None and requested != floor:
        reason += f"; lowered to {key} by the intent"
    validity = rules.categories[category].provider_queue_validity_seconds or BUILT_IN_VALIDITY[category]
    return DispatchOrder(
        version=version, priority_key=key, fairness_key=tenant, fairness_weight=weight,
        reason=f"{reason}; tenant {tenant} weight {weight:g}", validity_seconds=validity,
    )  # fmt: skip


def built_in_order(category: Category, tenant: str, requested: int | None) -> DispatchOrder:
    """The order under the built-in rules (version 0): for a workflow's start, whose policy is not
    read, and for an attempt whose policy could not be."""
    return dispatch_order(_BUILT_IN_RULES, 0, category, tenant, requested)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"not an IANA time zone name: {name!r}") from None


def decide(rules: PolicyRules, version: int, facts: RecipientFacts, now: datetime) -> PolicyDecision:
    """The decision for one attempt at `now` under one policy version (pure)."""
    category = rules.categories[facts.category]
    if category.consent_required and not facts.consent:
        return _suppress(version, "consent", f"{facts.category.value} needs consent evidence; none is recorded")
    if facts.suppressed_because is not None:
        return _suppress(version, "suppression", f"recipient suppressed: {facts.suppressed_because}")
    if "*" not in category.countries:
        if facts.region is None and facts.channel == "sms":
            return _suppress(version, "country", f"{facts.category.value} goes only to {category.countries}; the number's region is unknown")
        if facts.region is not None and facts.region not in category.countries:
            return _suppress(version, "country", f"{facts.category.value} may not go to {facts.region}")
    waits: list[tuple[datetime, str, str]] = []
    if rules.quiet_hours is not None and not category.urgent:
        for name in facts.time_zones:
            end = rules.quiet_hours.window_end(now.astimezone(zone(name)))
            if end is not None:
                waits.append((end, "quiet_hours", f"quiet hours in {name} until {end.isoformat()}"))
    if facts.cooldown_until is not None and facts.cooldown_until > now:
        waits.append((facts.cooldown_until, "cooldown", f"recipient cooldown until {facts.cooldown_until.isoformat()}"))
    if waits:
        until, rule, reason = max(waits)
        return PolicyDecision(version=version, decision=Decision.DEFER, rule=rule, reason=reason, not_before=until)
    return PolicyDecision(
        version=version,
        decision=Decision.ALLOW,
        rule="allow",
        reason=f"allowed by policy v{version}",
        give_up_after_seconds=category.unreachable_give_up_seconds,
    )


def _suppress(version: int, rule: str, reason: str) -> PolicyDecision:
    return PolicyDecision(version=version, decision=Decision.SUPPRESS, rule=rule, reason=f"{reason} (policy v{version})")


_BUILT_IN_RULES = PolicyRules()
