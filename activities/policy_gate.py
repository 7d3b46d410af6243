"""The send policy's gate, run inside the submit activity's transaction before the provider call.

Evaluating in the submit's own transaction costs no extra Temporal action on the happy path and
makes the recipient cooldown strict: the claim on the recipient's row and the attempt row commit
together, or neither does. The decision is taken at the workflow's clock (``at``), so a
time-skipping test and a replay see the same instant the workflow saw.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

import phonenumbers
from phonenumbers import timezone as number_zones
from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from herald.core.send_policy import Category, Decision, PolicyDecision, PolicyRules, RecipientFacts, decide
from herald.ledger import policy_store
from herald.privacy.fingerprints import Keyring
from herald.privacy.recipient_vault import is_sealed

log = logging.getLogger("herald.activities")

# phonenumbers' answer when a range has no known zone.
_UNKNOWN_ZONE = "Etc/Unknown"


def number_region_and_zones(e164: str) -> tuple[str | None, list[str]]:
    """The number's region (ISO 3166) and time zones, as far as the numbering plan tells."""
    try:
        number = phonenumbers.parse(e164)
    except phonenumbers.NumberParseException:
        return None, []
    region = phonenumbers.region_code_for_number(number)
    zones = [name for name in number_zones.time_zones_for_number(number) if name != _UNKNOWN_ZONE]
    return region, zones


class PolicyGate:
    """Admits one attempt: the policy in force at `at`, the recipient's standing, the cooldown claim."""

    def __init__(self, *, channel: str, recipient: str, category: Category, time_zone: str | None,
                 workflow_id: str, at: datetime, keyring: Keyring) -> None:  # fmt: skip
        self._keyring = keyring
        self._channel = channel
        self._recipient = recipient
        self._category = category
        self._time_zone = time_zone
        self._workflow_id = workflow_id
        self._at = at
        # Set when this attempt claimed the recipient's cooldown: its answer restamps the claim.
        self.claimed_cooldown = False
        # The decision that admitted the attempt (None until evaluated, or when it was held).
        self.admitted: PolicyDecision | None = None
        # What the evaluation read, for the route that follows it in the same transaction: the
        # rules in force and the number's region (None until evaluated; None region for e-mail).
        self.rules: PolicyRules | None = None
        self.region: str | None = None

    def _fingerprints(self) -> list[str]:
        """Every fingerprint the recipient's standing may be recorded under, the active key's first:
        of the canonical number or address (herald.privacy.fingerprints canonicalises inside, and refuses
        what is neither). A recipient still sealed here could not be opened (erased since it was
        sealed; the submit refuses it): as before, it is looked up under the token's own
        fingerprint, which no standing is recorded under, so no one's standing is read."""
        if is_sealed(self._recipient):
            return [self._keyring.of_text(self._recipient)]
        return self._keyring.recipient_candidates(self._recipient)

    async def __call__(self, cursor: Any) -> PolicyDecision:
        fps = self._fingerprints()
        fingerprint = fps[0]
        found = await policy_store.standing(
            cursor.connection, at=self._at, recipient=self._recipient, channel=self._channel,
            category=self._category, workflow_id=self._workflow_id, fps=fps,
        )  # fmt: skip
        version, rules, last_submit = found.version, found.rules, found.last_submit
        suppressed = found.suppressed_because(self._category)
        region, zones = number_region_and_zones(self._recipient) if self._channel == "sms" else (None, [])
        self.rules, self.region = rules, region
        if self._time_zone is not None:
            zones = [self._time_zone]
        elif not zones and rules.default_time_zone is not None:
            zones = [rules.default_time_zone]
        cooldown = rules.cooldown(self._channel)
        facts = RecipientFacts(
            channel=self._channel,
            category=self._category,
            region=region,
            time_zones=zones,
            consent=found.consent,
            suppressed_because=suppressed,
            cooldown_until=last_submit + cooldown if last_submit is not None and cooldown else None,
        )
        decision = decide(rules, version, facts, self._at)
        if decision.decision is Decision.ALLOW and cooldown:
            # The strict half: claim the recipient now; a racing worker that claimed first wins.
            blocked_until = await policy_store.claim_cooldown(
                cursor, fingerprint=fingerprint, channel=self._channel, workflow_id=self._workflow_id,
                cooldown=cooldown, at=self._at,
            )  # fmt: skip
            self.claimed_cooldown = blocked_until is None
            if blocked_until is not None:
                return PolicyDecision(
                    version=version,
                    decision=Decision.DEFER,
                    rule="cooldown",
                    reason=f"recipient cooldown until {blocked_until.isoformat()} (another intent submitted first)",
                    not_before=blocked_until,
                )
        if decision.decision is Decision.ALLOW:
            self.admitted = decision
        return decision

    async def suppressed_now(self, pool: AsyncConnectionPool, *, timeout: float | None) -> str | None:
        """What suppresses the recipient for this category now (None: nothing), read on its own. A
        resubmission of an admitted attempt asks only this again: a STOP since the admission makes a
        repeat the provider does not recognise a new message to someone who said no."""
        async with asyncio.timeout(timeout), pool.connection() as conn:
            found = await policy_store.standing(
                conn, at=self._at, recipient=self._recipient, channel=self._channel, category=self._category,
                workflow_id=self._workflow_id, fps=self._fingerprints(),
            )  # fmt: skip
        return found.suppressed_because(self._category)

    async def provider_answered(self, pool: AsyncConnectionPool, *, within: float | None) -> None:
        """Count the next intent's cooldown from now, when the provider has answered this attempt
        (call only after this attempt claimed the cooldown).

        The answer itself is never at stake: if the ledger fails or is slower than `within`
        seconds, the claim keeps its earlier stamp (the next intent may go out up to this call's
        duration early), and that is logged, because the message was sent and its outcome must
        reach the workflow whatever the database does.
        """
        try:
            async with asyncio.timeout(within):
                await policy_store.count_cooldown_from_answer(
                    pool, fingerprint=self._fingerprints()[0],
                    channel=self._channel, workflow_id=self._workflow_id,
                )  # fmt: skip
        except (DatabaseError, PoolTimeout, OSError, TimeoutError) as error:
            log.warning("recipient cooldown kept its claim-time stamp: ledger failed after the provider answered (%s)",
                        type(error).__name__)  # fmt: skip
