"""Presumed absent, then seen: the one rule for a provider fact about an attempt Herald had
concluded the provider never took, before its intent closed or after.

Herald opens another attempt only once it has concluded the provider does not have the previous
one (a definite refusal, an unreachable provider, a lookup past the proof window, the silence
rule). A provider that shows the attempt after all proves that conclusion wrong, and a duplicate
may have gone out: the contradiction is recorded once per attempt, so the ledger's report counts
it. The intent machine judges a fact by this rule while its workflow runs; once the workflow has
closed, the receipt path reads the attempt's standing from the ledger and the same rule decides
the rows the ledger stores. Pure: it is given everything it judges.
"""

from __future__ import annotations

from datetime import datetime

from herald.core.lifecycle import ObservationKind, Source
from herald.core.outcomes import Frozen, ProviderStatus
from herald.core.rows import Finding

# The verdict on a report whose intent's workflow has closed: recorded, never applied.
CLOSED_REASON = "intent's workflow has closed; recorded, not applied"


class Standing(Frozen):
    """What Herald had concluded about one attempt when a fact about it arrives."""

    attempt_number: int
    # Why Herald concluded the provider does not have it (``SubmitResult.presumption``, the
    # ledger's ``presumed_not_accepted.cause``); None: it concluded no such thing.
    presumption: str | None = None
    # A contradiction is recorded for it already: it is recorded once per attempt.
    seen: bool = False
    # The later attempts of the intent that went to the provider: each may be a copy that went out.
    later_sent: tuple[int, ...] = ()


class Sighting(Frozen):
    """A provider fact showing it has the attempt: its id for it, its status, who said so, when."""

    provider_id: str | None
    status: ProviderStatus
    source: Source
    observed_at: datetime


class LateReport(Frozen):
    """A stored report whose intent's workflow has closed (the receipt server's signal found no run)."""

    inbox_id: int
    attempt_number: int | None  # None: its reference names no attempt
    provider_id: str
    status: ProviderStatus
    error_code: int | None = None
    received_at: datetime


def seen_after_presumed_absent(standing: Standing, sighting: Sighting, *, closed: bool) -> Finding | None:
    """The contradiction `sighting` records about an attempt presumed absent, or None when there is
    none to record (no presumption, or recorded already). `closed`: the intent's workflow has
    closed, so the fact is recorded and not applied."""
    if standing.presumption is None or standing.seen:
        return None
    number, later = standing.attempt_number, standing.later_sent
    reason = (
        f"attempt {number} was presumed not accepted ({standing.presumption}) and is {sighting.status.value} "
        f"({sighting.source.value}); "
        + (f"later attempt(s) {list(later)} went to the provider too" if later else "no later attempt went out")
        + ("; reported after the intent closed" if closed else "")
    )
    return Finding(
        attempt_number=number,
        source=sighting.source,
        kind=ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN,
        provider_id=sighting.provider_id,
        provider_status=sighting.status.value,
        applied=not closed,
        reason=reason,
        observed_at=sighting.observed_at,
    )


def late_report_rows(report: LateReport, standing: Standing | None) -> list[Finding]:
    """The rows a report after the close is stored with: the report itself, not applied (its
    inbox verdict is ``ignored``), then the contradiction if it shows an attempt presumed absent.
    `standing`: its attempt's, as the ledger holds it (None when the report names no attempt)."""
    rows = [
        Finding(
            attempt_number=report.attempt_number,
            source=Source.REPORT,
            kind=ObservationKind.STATUS,
            provider_id=report.provider_id,
            provider_status=report.status.value,
            error_code=report.error_code,
            applied=False,
            reason=CLOSED_REASON,
            inbox_id=report.inbox_id,
            observed_at=report.received_at,
        )
    ]
    if standing is not None:
        sighting = Sighting(
            provider_id=report.provider_id, status=report.status, source=Source.REPORT, observed_at=report.received_at
        )
        seen = seen_after_presumed_absent(standing, sighting, closed=True)
        if seen is not None:
            rows.append(seen)
    return rows
