"""A route's backlog now, by priority key, as the Temporal server counts it, and its urgent lane's.

The ledger learns of an attempt only when the submit activity takes it (herald.ledger.report's
queue age is measured from there, looking back), so the submits still waiting in the route's
queue are the server's to count: DescribeTaskQueue with its statistics gives, per priority key,
the approximate number of queued tasks and the age of the oldest. The server computes them from
its matcher's state, cheaply enough to read on every scrape. The urgent lane's workflow queue is
read the same way, with the workers polling it: urgent intents started while no worker polls the lane
wait there untouched (herald/temporal/task_queues.py), which only the server can tell.
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue, TaskQueueStats
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, DescribeTaskQueueResponse
from temporalio.client import Client

from herald.core.outcomes import Frozen
from herald.temporal.task_queues import submit_task_queue, urgent_task_queue

# The key a task without a priority is queued under: the middle of the server's default range
# (1..5). Herald's submits always carry one; a worker of an older build would not.
SERVER_DEFAULT_PRIORITY = 3


class PriorityBacklog(Frozen):
    priority: int
    tasks: int  # approximate, as the server reports it
    oldest_seconds: float  # how long the oldest queued task has waited (0 with none queued)
    added_per_second: float
    dispatched_per_second: float


class LaneBacklog(Frozen):
    """The route's urgent lane (its workflow task queue) now."""

    queue: str
    tasks: int  # workflow tasks waiting, approximate
    oldest_seconds: float
    # Workers that polled the lane lately, as the server lists them (it keeps a poller for some
    # minutes after its last poll): 0 with tasks waiting means urgent intents no worker will take.
    pollers: int

    def render(self) -> str:
        state = f"{self.tasks} workflow tasks waiting, oldest {self.oldest_seconds:,.1f} s, {self.pollers} pollers"
        return f"urgent lane {self.queue}: {state}" + (
            "   NO WORKER POLLS IT: its intents wait untouched" if not self.pollers and self.tasks else ""
        )


class RouteBacklog(Frozen):
    """The submit queue of one workflow task queue (one route), by priority key, first to last,
    and the route's urgent lane (None: not read, by a caller that built one by hand)."""

    route: str
    by_priority: list[PriorityBacklog]
    lane: LaneBacklog | None = None

    @property
    def tasks(self) -> int:
        return sum(level.tasks for level in self.by_priority)

    def render(self) -> str:
        levels = [level for level in self.by_priority if level.tasks or level.added_per_second]
        line = f"route backlog {self.route} (the Temporal server's count, now)   " + (
            "   ".join(
                f"priority {level.priority}: {level.tasks} queued, oldest {level.oldest_seconds:,.1f} s"
                for level in levels
            )
            or "empty"
        )
        return line + (f"\n{self.lane.render()}" if self.lane is not None else "")


async def route_backlog(client: Client, task_queue: str) -> RouteBacklog:
    """The backlog of `task_queue`'s submit queue (the route the server paces), and its urgent lane's."""
    route = submit_task_queue(task_queue)
    # Both asked at once: a page or a scrape waits for one round trip, not two.
    response, lane = await asyncio.gather(
        _described(client, route, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY), _lane(client, urgent_task_queue(task_queue))
    )
    levels = [_level(key or SERVER_DEFAULT_PRIORITY, stats) for key, stats in response.stats_by_priority_key.items()]
    if not levels and response.HasField("stats"):  # a server that does not break its statistics down
        levels = [_level(SERVER_DEFAULT_PRIORITY, response.stats)]
    return RouteBacklog(route=route, by_priority=sorted(levels, key=lambda level: level.priority), lane=lane)


async def _lane(client: Client, queue: str) -> LaneBacklog:
    response = await _described(client, queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
    level = _level(SERVER_DEFAULT_PRIORITY, response.stats if response.HasField("stats") else TaskQueueStats())
    return LaneBacklog(
        queue=queue, tasks=level.tasks, oldest_seconds=level.oldest_seconds, pollers=len(response.pollers)
    )


async def _described(client: Client, queue: str, kind: TaskQueueType.ValueType) -> DescribeTaskQueueResponse:
    """The server's description of one task queue of `kind`, with its statistics and pollers."""
    return await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=kind,
            report_stats=True,
        )
    )


def _level(priority: int, stats: TaskQueueStats) -> PriorityBacklog:
    age = stats.approximate_backlog_age
    return PriorityBacklog(
        priority=priority,
        tasks=stats.approximate_backlog_count,
        oldest_seconds=age.seconds + age.nanos / 1e9,
        added_per_second=stats.tasks_add_rate,
        dispatched_per_second=stats.tasks_dispatch_rate,
    )
