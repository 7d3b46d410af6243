"""Traces: OpenTelemetry spans around every Temporal call, sent to an OTLP collector when one is set.

Temporal's ``TracingInterceptor`` on a client makes a span for each start, signal, query and
update it sends, and carries the trace context in the request's headers; workers built from that
client continue it: ``RunWorkflow``, ``StartActivity`` and ``RunActivity`` spans in the same trace.
A trace therefore begins in the process that starts the intent (a service's client, the outbox
relay, ``starter.py``) and follows it into the worker. Workflow spans have no duration (the
interceptor ends them at once, so a replay never reopens one); activity spans time the real call.

Spans carry workflow ids, run ids and activity types, never payloads: recipients and bodies stay
out of traces as they stay out of ids and search attributes.

Off unless ``HERALD_OTLP_ENDPOINT`` (or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``) is set. The
exporter reads the other standard ``OTEL_EXPORTER_OTLP_*`` variables (headers, certificate,
timeout) itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.client import Interceptor

from herald.settings import TelemetrySettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

# The OpenTelemetry SDK, its gRPC exporter and Temporal's interceptor are imported only when a
# collector is configured: a process without tracing does not carry them (several MiB each).


def tracer_provider(settings: TelemetrySettings, default_service_name: str) -> TracerProvider | None:
    """The process's span pipeline (batched, OTLP/gRPC), or None when no collector is configured.

    Shutting it down flushes the spans still in the batch; at the latest it is shut down at exit.
    """
    if settings.otlp_endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: settings.service_name or default_service_name})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
    return provider


def tracing_interceptors(provider: TracerProvider | None) -> list[Interceptor]:
    """The client interceptors that trace through `provider`; none without one."""
    if provider is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(provider.get_tracer("herald"))]
