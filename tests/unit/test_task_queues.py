"""A route's queues by name (herald/temporal/task_queues.py): the urgent lane is its own workflow
queue, and every intent of the route, on the lane or not, submits through the one paced submit queue."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from herald.client import HeraldClient
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
from tests.intents import ORDER_DATA
from tests.keys import SESSION_KEYRING
from tests.unit.test_settings import TASK_QUEUE_RULE, WORKER_QUEUES_RULE

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


class _Temporal:
    """Stands in for temporalio's Client: keeps the task queue and priority of each start."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    async def start_workflow(self, workflow: Any, arg: Any, **kwargs: Any) -> Any:
        self.started.append((kwargs["task_queue"], kwargs["priority"].priority_key))
        return SimpleNamespace(_start_workflow_response=SimpleNamespace(started=True), result_run_id="run")


CODE = {"business_key": "signin:s_1", "recipient": "+15551230001", "template_id": "class_reminder",
        "template_version": 1, "render_data": {"class_name": "Spin", "starts_at": "Mon 18:00"}}  # fmt: skip
RECEIPT = {"business_key": "order_receipt:pay_1", "recipient": "+15551230001", "template_id": "order_receipt",
           "template_version": 1, "render_data": ORDER_DATA}  # fmt: skip


@pytest.mark.parametrize(("lane", "code_queue"), [(True, "herald-urgent"), (False, "herald")])
async def test_the_client_starts_only_priority_1_on_the_lane_and_only_when_it_is_on(
    lane: bool, code_queue: str
) -> None:
    """An account code (priority 1) starts on the lane; a receipt (priority 2) on the route's queue;
    with HERALD_URGENT_LANE off (a rolling deploy whose workers do not poll the lane yet), both there."""
    temporal = _Temporal()
    herald = HeraldClient(temporal, "herald", keyring=SESSION_KEYRING, urgent_lane=lane)  # type: ignore[arg-type]
    await herald.send(CODE)
    await herald.send(RECEIPT)
    assert temporal.started == [(code_queue, 1), ("herald", 2)]


def test_the_lane_is_on_unless_turned_off() -> None:
    assert load_settings({}).temporal.urgent_lane is True
    assert load_settings({"HERALD_URGENT_LANE": "off"}).temporal.urgent_lane is False


@example("a")
@example(" , ")
@given(
    st.text(max_size=40)
    | st.lists(st.sampled_from(["standard", "urgent", "submits", "workflows", "all", " ", ","])).map("".join)
)
def test_any_worker_queues_value_is_a_set_of_queues_or_refused_by_name(value: str) -> None:
    """HERALD_WORKER_QUEUES, whatever is typed: a non-empty set of the route's queues, or one line
    naming the variable and its rule, never the value."""
    try:
        chosen = load_settings({"HERALD_WORKER_QUEUES": value}).worker_queues
    except InvalidSetting as error:
        # The rule's one line, the same whatever was typed: the value is never echoed.
        assert str(error) == f"HERALD_WORKER_QUEUES: {WORKER_QUEUES_RULE}"
    else:
        assert chosen and chosen <= {"standard", "urgent", "submits"}


@given(st.text(max_size=40) | st.sampled_from(["q-urgent", "q-submit", "q-urgent-x", "-urgent", "q" * 991]))
def test_any_task_queue_value_names_three_distinct_queues_or_is_refused_by_name(value: str) -> None:
    """HERALD_TASK_QUEUE, whatever is typed: a base whose lane and submit queue are its own, or one
    line naming the variable and its rule."""
    try:
        base = load_settings({"HERALD_TASK_QUEUE": value}).temporal.task_queue
    except InvalidSetting as error:
        assert str(error) == f"HERALD_TASK_QUEUE: {TASK_QUEUE_RULE}"
    else:
        assert route_task_queue(urgent_task_queue(base)) == base
        assert len({base, urgent_task_queue(base), submit_task_queue(base)}) == 3
