"""When an attempt whose submit answer was lost may be sent again under its own message id: only to
a provider that refuses a repeated id within a grace period (``Capabilities.resubmit_dedupe_seconds``),
and only while the repeat surely reaches it inside that grace.

The grace is the provider's, counted on its clock from when it accepted the first request under
the id. No request of the attempt reaches the provider before the attempt starts, so the grace
ends no earlier than ``started_at + grace``; Herald counts from ``started_at`` and stops
``DEDUPE_MARGIN`` short. A resubmission is made only by ``call_by`` (the submit queue never starts
it later, and the activity checks its own clock again just before the call). Past that, a repeat
could be a second message, and the attempt is looked up as any unknown one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

# The first resubmission follows the lost answer by 2 s, each next one waits twice as long (2, 4,
# 8, 16 s), never more than 30 s: a provider that answered 5xx is given a moment, and three lost
# answers in a row cost seconds, not the proof windows of three lookups (11 minutes each).
RESUBMIT_FIRST_DELAY = timedelta(seconds=2)
RESUBMIT_MAX_DELAY = timedelta(seconds=30)
# Kept between the last moment a resubmission may call and the earliest end of the grace: the
# request's own time on the wire after the activity's last check (a connect and a write: 3 s and
# 10 s by default), the skew between the worker's clock and the Temporal server's (which dates the
# attempt's start), and the two clocks' drift over the grace; 30 s is more than all three.
DEDUPE_MARGIN = timedelta(seconds=30)


def resubmit_delay(resubmissions_made: int) -> timedelta:
    """How long after the last lost answer resubmission number ``resubmissions_made + 1`` goes."""
    return min(RESUBMIT_FIRST_DELAY * 2**resubmissions_made, RESUBMIT_MAX_DELAY)


def call_by(started_at: datetime, grace_seconds: int) -> datetime:
    """The last moment a resubmission of an attempt that started at `started_at` may call the provider."""
    return started_at + timedelta(seconds=grace_seconds) - DEDUPE_MARGIN


def next_resubmission(
    started_at: datetime, grace_seconds: int | None, resubmissions_made: int, now: datetime
) -> datetime | None:
    """When to resubmit an attempt whose latest answer (at `now`) was lost; None when the provider
    declares no dedupe or the next one would come too late for its grace (the attempt is looked up)."""
    if grace_seconds is None:
        return None
    due = now + resubmit_delay(resubmissions_made)
    return due if due <= call_by(started_at, grace_seconds) else None
