"""The route's backlog now, as the Temporal server counts it, for the exporter's scrape.

Read from the server on every scrape (herald.temporal.route_backlog), beside the ledger's numbers: the
ledger only learns of a submit when the activity takes it, so what is still queued is the server's
to count. ``herald_route_backlog_up 0`` says the server did not answer this scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from herald.temporal.route_backlog import RouteBacklog


class RouteBacklogCollector(Collector):
    def __init__(self, backlog: RouteBacklog | None) -> None:
        self._backlog = backlog

    def collect(self) -> Iterator[Metric]:
        backlog = self._backlog
        yield GaugeMetricFamily(
            "herald_route_backlog_up", "1 if this scrape read the route's backlog from Temporal, 0 if not",
            value=float(backlog is not None),
        )  # fmt: skip
        if backlog is None:
            return
        tasks = GaugeMetricFamily(
            "herald_route_backlog_tasks",
            "Submits queued on the route (its submit task queue), by priority key; the server's approximate count",
            labels=["route", "priority"],
        )
        oldest = GaugeMetricFamily(
            "herald_route_backlog_oldest_seconds",
            "How long the oldest submit queued at this priority key has waited (0 when none)",
            labels=["route", "priority"],
        )
        for level in backlog.by_priority:
            labels = [backlog.route, str(level.priority)]
            tasks.add_metric(labels, level.tasks)
            oldest.add_metric(labels, level.oldest_seconds)
        yield tasks
        yield oldest
        lane = backlog.lane
        if lane is None:
            return
        labels = [backlog.route]
        waiting = GaugeMetricFamily(
            "herald_urgent_lane_tasks",
            "Workflow tasks waiting on the route's urgent lane (priority-1 intents); the server's approximate count",
            labels=["route"],
        )
        waiting.add_metric(labels, lane.tasks)
        pollers = GaugeMetricFamily(
            "herald_urgent_lane_pollers",
            "Workers that polled the route's urgent lane lately; 0 with tasks waiting: urgent intents nobody takes",
            labels=["route"],
        )
        pollers.add_metric(labels, lane.pollers)
        yield waiting
        yield pollers
