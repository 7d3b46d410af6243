"""Task queue names shared by the workflow and the workers that poll them.

Provider submits run on their own task queue so that a server-enforced rate limit
(``max_task_queue_activities_per_second``) paces them for every worker polling it,
on every machine, while lookups, polls and cancels on the workflow's own queue stay
unthrottled. Workflow code may import this module: it is pure and deterministic.
"""

from __future__ import annotations

SUBMIT_SUFFIX = "-submit"


def submit_task_queue(task_queue: str) -> str:
    """Return the task queue on which provider submits for ``task_queue`` are scheduled.

    Args:
        task_queue: The workflow's task queue, e.g. ``herald-notifications``.

    Returns:
        The submit task queue, e.g. ``herald-notifications-submit``.
    """
    return f"{task_queue}{SUBMIT_SUFFIX}"
