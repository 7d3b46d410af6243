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


# The submit queue's pace as a fraction of the provider's per-sender limit L. Temporal's matcher
# limits a partition with a GCRA of burst one second: from idle it lets floor(rate) + 1 tasks out at
# once, then one every 1/rate s. A provider bucket like the emulator's (capacity L, refill L/s)
# takes L at once. At rate = L the first burst is L + 1, one too many: a 429. Just under L the
# burst is L and every later dispatch reaches the provider after its token was refilled, with
# (1 - fraction) * L tokens/s to spare for network jitter; 0.97 keeps 97% of the limit.
PROVIDER_LIMIT_FRACTION = 0.97


def submit_pace(provider_limit: float) -> float:
    """Return the submit rate (HERALD_SUBMIT_RATE_LIMIT) to set for a provider limit of ``provider_limit``/s."""
    return provider_limit * PROVIDER_LIMIT_FRACTION
