"""The resubmission clock (herald.core.resubmission): how often, and until when, an attempt whose
answer was lost is sent again under its own id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from herald.core.resubmission import DEDUPE_MARGIN, call_by, next_resubmission, resubmit_delay

START = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(("made", "seconds"), [(0, 2), (1, 4), (2, 8), (3, 16), (4, 30), (9, 30)])
def test_resubmissions_back_off_from_2_s_doubling_to_30_s(made: int, seconds: int) -> None:
    """The n-th resubmission waits 2 s doubled n-1 times after the last lost answer, never more than 30 s."""
    assert resubmit_delay(made) == timedelta(seconds=seconds)


def test_the_last_call_is_due_the_margin_before_the_grace_counted_from_the_attempts_start() -> None:
    """A grace of 300 s: resubmissions may call until 270 s after the attempt began, never later."""
    assert call_by(START, 300) == START + timedelta(seconds=300) - DEDUPE_MARGIN == START + timedelta(seconds=270)


@pytest.mark.parametrize(
    ("grace", "made", "answered_after", "due_after"),
    [
        (None, 0, 1, None),  # the provider declares no dedupe: never
        (300, 0, 1, 3),  # 2 s after the lost answer
        (300, 2, 20, 28),  # 8 s after the third lost answer
        (300, 4, 239, 269),  # 30 s, still inside the grace less the margin
        (300, 4, 241, None),  # 30 s would pass the call-by time: looked up instead
        (31, 0, 0, None),  # a grace shorter than the margin and one backoff: never
    ],
)
def test_the_next_resubmission_comes_only_while_it_can_reach_the_provider_inside_its_grace(
    grace: int | None, made: int, answered_after: int, due_after: int | None
) -> None:
    """When the next resubmission is due; None when it would come too late for the grace, or none is declared."""
    due = next_resubmission(START, grace, made, START + timedelta(seconds=answered_after))
    assert due == (None if due_after is None else START + timedelta(seconds=due_after))
