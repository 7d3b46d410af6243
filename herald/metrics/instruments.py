"""Herald's metrics recorded through the Temporal SDK's meter, served by the worker's endpoint.

Why the SDK's meter and not prometheus_client: these numbers are measured inside the worker, in
workflow and activity code. The workflow's meter (``workflow.metric_meter()``) is the only one
that is replay-safe: the SDK records nothing while a workflow replays history, so an intent
counted at its close is not counted again when another worker replays it. The activity's meter
(``activity.metric_meter()``) then puts provider latency on the same endpoint, with the same
``namespace`` and ``task_queue`` labels as the SDK's own series, instead of opening a second
HTTP server in every worker. Without ``HERALD_WORKER_METRICS_ADDRESS`` both meters are no-ops.

Imported by the workflow: no I/O, nothing but the SDK's meter interface.
"""

from __future__ import annotations

import time
from datetime import timedelta
from types import TracebackType

from temporalio.common import MetricMeter

INTENTS_FINISHED = "herald_intents_finished"
PROVIDER_LATENCY = "herald_provider_latency"
# Buckets in milliseconds (the SDK's unit for durations): from a provider's fast answer up to the
# adapters' read timeouts (Twilio 10 s, SMTP 30 s by default), beyond which the call is unknown.
PROVIDER_LATENCY_BUCKETS_MS = (25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 30_000.0)
ROUTE_QUEUE_AGE = "herald_route_queue_age"
# From an urgent code's second up to a backlog of a quarter of an hour (a seat hold's length).
ROUTE_QUEUE_AGE_BUCKETS_MS = (
    100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 30_000.0, 60_000.0, 300_000.0, 900_000.0,
)  # fmt: skip


def count_finished(meter: MetricMeter, state: str, channel: str) -> None:
    """Count one intent whose workflow ended in `state` (call with ``workflow.metric_meter()``)."""
    meter.create_counter(
        INTENTS_FINISHED,
        "Intents whose workflow ended, by final state and channel (undelivered ends count as Temporal successes)",
    ).add(1, {"state": state, "channel": channel})


def record_queue_age(meter: MetricMeter, waited: timedelta, priority: int, provider: str) -> None:
    """One submit's queue age (attempt prepared -> the provider's answer), by the priority key it was
    dispatched with. Not by tenant: tenants are as many as the business has, too many for a series
    each; the ledger exporter shows the tenants that waited longest."""
    meter.create_histogram_timedelta(
        ROUTE_QUEUE_AGE,
        "Attempt prepared to the provider's answer to its submit (queue age), by priority key and provider",
    ).record(max(waited, timedelta(0)), {"priority": str(priority), "provider": provider})


class ProviderCall:
    """Times one provider call into ``herald_provider_latency``.

    Set ``outcome`` to what the adapter reported (its outcome's ``kind``); a call that raised
    instead keeps ``error``.

        with ProviderCall(activity.metric_meter(), provider.name, "submit") as call:
            outcome = await provider.submit(message)
            call.outcome = outcome.result.kind
    """

    def __init__(self, meter: MetricMeter, provider: str, operation: str) -> None:
        self._histogram = meter.create_histogram_timedelta(
            PROVIDER_LATENCY, "Time each provider call took, by provider, operation and reported outcome"
        )
        self._labels = {"provider": provider, "operation": operation}
        self._started = 0.0
        self.outcome = "error"

    def __enter__(self) -> ProviderCall:
        self._started = time.monotonic()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        elapsed = timedelta(seconds=time.monotonic() - self._started)
        self._histogram.record(elapsed, {**self._labels, "outcome": self.outcome})
