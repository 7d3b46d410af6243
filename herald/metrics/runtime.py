"""The worker's Temporal runtime with a Prometheus endpoint, when one is configured."""

from __future__ import annotations

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from herald.metrics.instruments import (
    PROVIDER_LATENCY,
    PROVIDER_LATENCY_BUCKETS_MS,
    ROUTE_QUEUE_AGE,
    ROUTE_QUEUE_AGE_BUCKETS_MS,
)
from herald.settings import InvalidSetting, TelemetrySettings


def worker_runtime(settings: TelemetrySettings) -> Runtime | None:
    """A runtime serving ``/metrics`` on ``HERALD_WORKER_METRICS_ADDRESS``; None when unset.

    The SDK's own series keep their defaults (milliseconds, no ``_total`` suffix), the units
    Temporal's published SDK dashboards expect. The endpoint listens from here on, before the
    client connects: a taken port fails the worker's start in one line.
    """
    address = settings.worker_metrics_address
    if address is None:
        return None
    config = PrometheusConfig(
        bind_address=address,
        histogram_bucket_overrides={
            PROVIDER_LATENCY: list(PROVIDER_LATENCY_BUCKETS_MS),
            ROUTE_QUEUE_AGE: list(ROUTE_QUEUE_AGE_BUCKETS_MS),
        },
    )
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=config))
    except ValueError as error:  # the SDK's core reports a taken or unusable address this way
        raise InvalidSetting("HERALD_WORKER_METRICS_ADDRESS", f"cannot serve metrics on {address} ({error})") from None
