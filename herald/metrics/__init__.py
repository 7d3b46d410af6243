"""Herald's metrics for Prometheus: each worker's own series, and the ledger's numbers served by one exporter.

Two kinds of endpoint serve them:

Each worker (``HERALD_WORKER_METRICS_ADDRESS``): what happens inside that process, through the
Temporal SDK's runtime. The SDK's own series (``temporal_workflow_completed``,
``temporal_activity_execution_latency``, ``temporal_activity_schedule_to_start_latency``, ...)
and two of Herald's, recorded through the SDK's meter (``instruments``):

- ``herald_intents_finished{state, channel}``: intents whose workflow ended, by final state. A
  workflow that ends ``undelivered`` returns normally, so the SDK counts it as a completed
  workflow; this counter tells delivered from undelivered, expired, cancelled, unknown.
- ``herald_provider_latency{provider, operation, outcome}``: milliseconds each provider call
  took (submit, fetch, find_by_reference, cancel), by what the adapter reported.

The ledger exporter (``python -m herald.metrics``, one per deployment): the business record's
numbers, queried from the shared ledger at scrape time (``ledger``, served by ``exporter``).
This package's ``__init__`` imports nothing: the workflow imports ``instruments`` and must not
pull the exporter's web server in with it.
"""
