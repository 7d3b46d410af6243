"""Task queue names shared by the client, the workflow and the workers that poll them.

One route is three queues, named from its base (``HERALD_TASK_QUEUE``, e.g. ``herald-notifications``):

- the base itself: the workflow tasks of every intent but the most urgent, and their lookups and cancels;
- ``<base>-urgent``, the urgent lane: the workflow tasks (and lookups, cancels) of intents whose
  order has the first priority key (account codes by default). Temporal hands out a queue's
  workflow tasks by priority, but a worker takes its slot before it polls, so an urgent task that
  shares a queue with a 2,000-intent start waits for a slot behind the start's tasks. On a queue of
  its own, with pollers and slots of its own, it does not (measured: the prepare step's p99 0.42 to
  0.47 s against 0.62 to 0.72 s on a shared queue; bench/RESULTS-backlog.md);
- ``<base>-submit``: provider submits of both, so that one server-enforced rate limit
  (``max_task_queue_activities_per_second``) paces the route's every send, on every machine, by
  priority, while lookups, polls and cancels stay unthrottled.

Workflow code may import this module: it is pure and deterministic.
"""

from __future__ import annotations

SUBMIT_SUFFIX = "-submit"
URGENT_SUFFIX = "-urgent"
# The priority key (Temporal's Priority.priority_key, 1 first) whose workflows run on the urgent lane.
URGENT_PRIORITY_KEY = 1


def urgent_task_queue(task_queue: str) -> str:
    """The urgent lane of the route whose base queue is `task_queue` (``herald-notifications-urgent``)."""
    return f"{task_queue}{URGENT_SUFFIX}"


def workflow_task_queue(task_queue: str, priority_key: int) -> str:
    """Where an intent's workflow runs: the urgent lane for the first priority key, else the base queue."""
    return urgent_task_queue(task_queue) if priority_key == URGENT_PRIORITY_KEY else task_queue


def route_task_queue(task_queue: str) -> str:
    """The base queue of the route a workflow's own task queue belongs to (the lane's, or itself).
    Exact because a base queue never ends in a lane's or the submits' suffix (herald.settings refuses it)."""
    return task_queue.removesuffix(URGENT_SUFFIX)


def submit_task_queue(task_queue: str) -> str:
    """Return the task queue on which provider submits for ``task_queue`` are scheduled.

    Args:
        task_queue: The route's base queue or a workflow's own (the urgent lane's), e.g.
            ``herald-notifications`` or ``herald-notifications-urgent``.

    Returns:
        The route's one submit task queue, e.g. ``herald-notifications-submit``.
    """
    return f"{route_task_queue(task_queue)}{SUBMIT_SUFFIX}"
