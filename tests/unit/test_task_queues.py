"""A route's queues by name (herald/temporal/task_queues.py): the urgent lane is its own workflow
queue, and every intent of the route, on the lane or not, submits through the one paced submit queue."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.settings import InvalidSetting, load_settings
from herald.settings.temporal import LANE_SUFFIXES
from herald.temporal.task_queues import (
    SUBMIT_SUFFIX,
    URGENT_SUFFIX,
    route_task_queue,
    submit_task_queue,
    urgent_task_queue,
    workflow_task_queue,
)

# What HERALD_TASK_QUEUE accepts: 1 to 990 characters without whitespace, not ending like a lane.
base_queues = st.text(st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=990).filter(
    lambda name: not any(c.isspace() for c in name) and not name.endswith(LANE_SUFFIXES)
)


@given(base_queues, st.integers(min_value=1, max_value=5))
def test_every_intent_of_a_route_submits_through_its_one_submit_queue(base: str, priority_key: int) -> None:
    queue = workflow_task_queue(base, priority_key)
    assert submit_task_queue(queue) == submit_task_queue(base) == f"{base}{SUBMIT_SUFFIX}"
    assert route_task_queue(queue) == base


@given(base_queues)
def test_only_the_first_priority_runs_on_the_urgent_lane(base: str) -> None:
    assert workflow_task_queue(base, 1) == urgent_task_queue(base) != base
    assert {workflow_task_queue(base, key) for key in range(2, 6)} == {base}
    # No lane is another route's base or its submits: the queues of two routes never meet.
    assert len({base, urgent_task_queue(base), submit_task_queue(base)}) == 3


def test_the_settings_refuse_a_base_queue_named_like_a_lane() -> None:
    """herald.settings spells the suffixes itself (it may not import herald.temporal): the same ones."""
    assert set(LANE_SUFFIXES) == {URGENT_SUFFIX, SUBMIT_SUFFIX}
    for suffix in LANE_SUFFIXES:
        with pytest.raises(InvalidSetting, match="HERALD_TASK_QUEUE: "):
            load_settings({"HERALD_TASK_QUEUE": f"herald{suffix}"})
