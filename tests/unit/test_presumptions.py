"""Presumed absent, then seen (``herald.machine.presumptions``): one pure rule for a provider fact
about an attempt Herald concluded the provider never took, judged while the intent's workflow
runs (the machine) or after it closed (the receipt path, from the ledger's reading of the attempt)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from herald.lifecycle import ObservationKind, Source
from herald.machine.presumptions import (
    CLOSED_REASON,
    LateReport,
    Sighting,
    Standing,
    late_report_rows,
    seen_after_presumed_absent,
)
from herald.outcomes import ProviderStatus

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DELIVERED = Sighting(provider_id="SM1", status=ProviderStatus.DELIVERED, source=Source.REPORT, observed_at=AT)
SAID = "attempt 1 was presumed not accepted"


@pytest.mark.parametrize(
    ("standing", "closed", "expected"),
    [
        (Standing(attempt_number=1), False, None),  # nothing was presumed
        (Standing(attempt_number=1, presumption="lookup_not_found", seen=True), False, None),  # once per attempt
        (Standing(attempt_number=1, presumption="lookup_not_found", seen=True), True, None),  # after the close too
        (
            Standing(attempt_number=1, presumption="lookup_not_found"),
            False,
            (True, f"{SAID} (lookup_not_found) and is delivered (report); no later attempt went out"),
        ),
        (
            Standing(attempt_number=1, presumption="submit_refused", later_sent=(2,)),
            False,
            (True, f"{SAID} (submit_refused) and is delivered (report); later attempt(s) [2] went to the provider too"),
        ),
        (
            Standing(attempt_number=1, presumption="events_absent", later_sent=(2, 3)),
            True,
            (
                False,
                (
                    f"{SAID} (events_absent) and is delivered (report); later attempt(s) [2, 3] went to the provider "
                    "too; reported after the intent closed"
                ),
            ),
        ),
    ],
)
def test_a_sighting_of_an_attempt_presumed_absent_is_recorded_once(
    standing: Standing, closed: bool, expected: tuple[bool, str] | None
) -> None:
    """The contradiction is recorded once per attempt, with the presumption's cause and the later
    copies; after the close it is recorded and not applied, and says so."""
    finding = seen_after_presumed_absent(standing, DELIVERED, closed=closed)
    if expected is None:
        assert finding is None
        return
    assert finding is not None
    assert (finding.applied, finding.reason) == expected
    assert (finding.kind, finding.attempt_number, finding.provider_id, finding.provider_status) == (
        ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN, 1, "SM1", "delivered",
    )  # fmt: skip


LATE = LateReport(inbox_id=7, attempt_number=1, provider_id="SM1", status=ProviderStatus.SENT, error_code=None, received_at=AT)


@pytest.mark.parametrize(
    ("standing", "kinds"),
    [
        (None, [ObservationKind.STATUS]),  # the report names no attempt
        (Standing(attempt_number=1), [ObservationKind.STATUS]),
        (Standing(attempt_number=1, presumption="lookup_not_found", seen=True), [ObservationKind.STATUS]),
        (
            Standing(attempt_number=1, presumption="lookup_not_found", later_sent=(2,)),
            [ObservationKind.STATUS, ObservationKind.PRESUMED_NOT_ACCEPTED_THEN_SEEN],
        ),
    ],
)
def test_a_report_after_the_close_is_stored_unapplied_with_what_the_rule_decides(
    standing: Standing | None, kinds: list[ObservationKind]
) -> None:
    """The report itself is recorded, not applied, with its inbox id (its verdict: ignored); the
    contradiction follows when the attempt was presumed absent and none is recorded yet."""
    rows = late_report_rows(LATE, standing)
    assert [row.kind for row in rows] == kinds
    report = rows[0]
    assert (report.applied, report.reason, report.inbox_id, report.provider_status) == (False, CLOSED_REASON, 7, "sent")
    assert all(not row.applied and row.observed_at == AT for row in rows)
    assert [row.inbox_id for row in rows[1:]] == [None] * (len(rows) - 1)  # one verdict per report
