"""Which closing clock has closed an intent, as pure functions (the workflow passes the time).

An intent has three clocks that can end it: its expiry, the resolution horizon of the attempt it
is resolving, and cancellation (not a clock: the cancel update closes the intent the moment it is
accepted). The earliest wins, and the reason names it.
"""

from __future__ import annotations

from datetime import datetime

from herald.core.lifecycle import IntentState, Source
from herald.core.outcomes import Frozen

HORIZON_REASON = "resolution horizon passed without proof either way"


class Closing(Frozen):
    state: IntentState
    reason: str
    source: Source = Source.CLOCK


def closing_clock(now: datetime, expires_at: datetime, horizon_at: datetime | None) -> Closing | None:
    """The clock that has closed, if any: the horizon when it came first (and no later than expiry),
    else expiry; None while neither has passed.

    Args:
        now: the workflow's time.
        expires_at: the intent's expiry.
        horizon_at: the resolution horizon of the attempt being resolved; None when none is.
    """
    if horizon_at is not None and horizon_at <= now and horizon_at <= expires_at:
        return Closing(state=IntentState.UNKNOWN, reason=HORIZON_REASON)
    if expires_at <= now:
        return Closing(state=IntentState.EXPIRED, reason=f"intent expired at {expires_at.isoformat()}")
    return None


def closing_rule(state: IntentState) -> str:
    """The rule a terminal state names in `closed_by` (`<source>:<rule>`): the clock or cause that
    closed it, or the state itself for an outcome."""
    return _RULES.get(state, state.value)


_RULES = {
    IntentState.EXPIRED: "expiry",
    IntentState.CANCELLED: "cancel",
    IntentState.UNKNOWN: "resolution_horizon",
    IntentState.SUPPRESSED: "ledger",
}
