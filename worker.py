"""Herald worker: runs NotificationWorkflow and its activities. Scale out by running more.

    python worker.py            # settings from HERALD_* variables and DATABASE_URL

This is the one place that builds the worker's dependencies: the Temporal
client, the ledger pool, the artifact store and one provider per configured
channel (Twilio for SMS; an SMTP relay for e-mail when HERALD_SMTP_HOST is set),
and its telemetry: a Prometheus endpoint for the SDK's and Herald's worker
metrics when HERALD_WORKER_METRICS_ADDRESS is set, traces when an OTLP
endpoint is (herald.temporal.tracing).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Collection, Sequence
from contextlib import AsyncExitStack

from temporalio.client import Client, Interceptor
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.runtime import Runtime
from temporalio.worker import Worker, WorkerDeploymentConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from herald.core.message import Channel
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.store import open_pool
from herald.metrics.runtime import worker_runtime
from herald.privacy.fingerprints import Keyring
from herald.providers.infobip import InfobipAdapter
from herald.providers.pacing import Pacer
from herald.providers.port import Provider
from herald.providers.registry import Providers
from herald.providers.sendgrid_activity import SendGridActivity
from herald.providers.smtp import SmtpAdapter
from herald.providers.twilio import TwilioAdapter
from herald.runtime import exits
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.runtime.reach import ServiceUnreachable
from herald.settings import Settings, load_settings
from herald.temporal.task_queues import submit_task_queue, urgent_task_queue
from herald.temporal.tracing import tracer_provider, tracing_interceptors
from workflows.notification import NotificationWorkflow

log = logging.getLogger("herald.worker")

# The sandbox still refuses non-deterministic calls (datetime.now, random, I/O) in workflow code,
# but imports every module once per process instead of once per workflow run: Herald's workflow
# modules hold no mutable module state, and the replay tests (same runner) guard determinism.
WORKFLOW_RUNNER = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_all_modules())


def build_providers(settings: Settings, keyring: Keyring) -> Providers:
    """The configured providers by name, per channel: the only place that knows which adapters exist.
    Each channel's first is its built-in route (a send policy without routes); a route names the
    others. `keyring` names a marketing e-mail's recipient in its unsubscribe link."""
    sms: list[Provider] = [TwilioAdapter(settings.twilio)]
    if settings.infobip.base_url is not None:  # a second SMS provider, chosen only by a route that names it
        sms.append(InfobipAdapter(settings.infobip))
    providers: dict[Channel, list[Provider]] = {Channel.SMS: sms}
    if settings.email.host is not None:  # no relay: the e-mail channel is not configured
        feed = settings.sendgrid_activity
        # SendGrid's Email Activity API where a key for it is configured; without one, events only.
        activity = SendGridActivity(feed) if feed.api_key else None
        providers[Channel.EMAIL] = [SmtpAdapter(settings.email, activity, keyring=keyring)]
    return Providers(providers)


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """Worker Versioning, when HERALD_WORKER_DEPLOYMENT_NAME and HERALD_WORKER_BUILD_ID are set; None: unversioned.

    Auto-upgrade, not pinned: a notification lives for hours (quiet hours, the resolution horizon),
    longer than an old build should be kept running to finish it, and NotificationWorkflow gates
    every change to its command sequence with workflow.patched() (proven by the replay tests), so
    a run may move to the new build at its next workflow task.
    """
    version = settings.worker_version
    if version is None:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=version.deployment_name, build_id=version.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


def build_worker(
    client: Client, settings: Settings, ledger: LedgerActivities, provider: ProviderActivities, *, urgent: bool = False
) -> Worker:
    """The workflow worker: NotificationWorkflow, the ledger's local activities, lookups and cancels,
    on the route's standard queue or (`urgent`) its urgent lane, each with slots and pollers of its own."""
    base = settings.temporal.task_queue
    return Worker(
        client,
        task_queue=urgent_task_queue(base) if urgent else base,
        workflows=[NotificationWorkflow],
        workflow_runner=WORKFLOW_RUNNER,
        activities=[
            ledger.append_ledger,
            ledger.dispatch_order,
            ledger.read_event_stream,
            provider.lookup,
            provider.cancel,
        ],
        # Bounded like the adapter's connection pool, so activities queue in Temporal, not in httpx.
        max_concurrent_activities=settings.twilio.max_in_flight * 2,
        max_concurrent_workflow_tasks=settings.workflow_task_slots,
        max_cached_workflows=settings.workflow_cache,
        deployment_config=deployment_config(settings),
    )


def build_submit_worker(client: Client, settings: Settings, provider: ProviderActivities) -> Worker:
    """The submit worker: provider submits only, on their own task queue (see herald.temporal.task_queues).

    With HERALD_SUBMIT_RATE_LIMIT set, the Temporal server paces the dispatch of submit tasks
    to that many per second for the whole queue, across every worker on every machine polling
    it: a task waits in the server's queue, not in a worker. The submit activity also spaces its
    own provider calls at that pace (herald.providers.pacing), which only smooths the server's bursts.
    """
    return Worker(
        client,
        task_queue=submit_task_queue(settings.temporal.task_queue),
        activities=[provider.submit],
        max_concurrent_activities=settings.twilio.max_in_flight,
        max_task_queue_activities_per_second=settings.twilio.submit_rate_limit,
        # The same version as the workflow worker: one deployment version is one build of the whole process.
        deployment_config=deployment_config(settings),
    )


def workflow_workers(
    client: Client,
    settings: Settings,
    ledger: LedgerActivities,
    provider: ProviderActivities,
    queues: Collection[str] = ("standard", "urgent"),
) -> list[Worker]:
    """The workflow workers of a route for `queues`: by default its standard queue's and its urgent
    lane's (every workflow task)."""
    return [
        build_worker(client, settings, ledger, provider, urgent=queue == "urgent")
        for queue in ("standard", "urgent")
        if queue in queues
    ]


def polled_workers(
    client: Client, settings: Settings, ledger: LedgerActivities, provider: ProviderActivities
) -> list[Worker]:
    """The workers this process runs, as HERALD_WORKER_QUEUES says: the standard workflow queue's,
    the urgent lane's, the submits' (by default all three). Split, each queue gets a process of its
    own: a burst of workflow tasks then shares the machine with the urgent lane and the route's
    submits, not their event loop."""
    chosen = settings.worker_queues
    workers = workflow_workers(client, settings, ledger, provider, chosen)
    if "submits" in chosen:
        workers.append(build_submit_worker(client, settings, provider))
    return workers


def submit_pacer(settings: Settings) -> Pacer | None:
    """The submit activity's own pacing: the server's queue limit, smoothed (None when unlimited)."""
    pace = settings.twilio.submit_rate_limit
    return Pacer.for_route(pace) if pace else None


# What builds the providers: build_providers, or (in the fault tests' processes) a wrapper around it.
ProviderFactory = Callable[[Settings, Keyring], Providers]


async def run_worker(opened: ProcessRuntime, stop: asyncio.Event, providers: ProviderFactory = build_providers) -> None:
    settings = opened.settings()
    # The keys first, before anything is connected to: the policy gate names recipients by keyed
    # fingerprint, and the activities unwrap recipients' data keys; none is one line, no start.
    keyring = opened.keyring()
    opened.keks()
    # Checked once before anything polls (after the settings, which need no network): a worker without
    # its ledger would take tasks it can only fail. Unreachable at start is one line naming
    # DATABASE_URL, as from every other Herald process.
    url = await opened.reach(LEDGER, "required: the worker needs the ledger (the local launcher sets it)")
    async with AsyncExitStack() as stack:
        adapters = providers(settings, keyring)  # first: a provider setting that cannot work stops the start here
        for adapter in adapters.values():
            stack.push_async_callback(adapter.aclose)
        pool = await stack.enter_async_context(open_pool(url))
        runtime = worker_runtime(settings.telemetry)
        if runtime is not None:
            log.info("worker metrics on http://%s/metrics", settings.telemetry.worker_metrics_address)
        tracing = tracer_provider(settings.telemetry, "herald-worker")
        if tracing is not None:
            stack.callback(tracing.shutdown)  # flushes the last batch of spans
            log.info("traces to %s", settings.telemetry.otlp_endpoint)
        client = await _connect_patiently(opened, stop, runtime=runtime, interceptors=tracing_interceptors(tracing))
        if client is None:
            return
        vault = opened.vault(pool)  # one key cache for the ledger's and the provider's activities
        provider = ProviderActivities(
            adapters,
            settings.receipts.public_url,
            pool,
            artifacts=PostgresArtifactStore(pool),
            pacer=submit_pacer(settings),
            vault=vault,
            keyring=keyring,
        )
        workers = polled_workers(client, settings, LedgerActivities(pool, vault), provider)
        for worker in workers:
            await stack.enter_async_context(worker)
        if settings.worker_version is not None:
            log.info(
                "worker versioning on: deployment %s, build %s (auto-upgrade)",
                settings.worker_version.deployment_name,
                settings.worker_version.build_id,
            )
        pace = settings.twilio.submit_rate_limit
        log.info(
            "worker polling task queue%s %s%s",
            "s" if len(workers) > 1 else "",
            ", ".join(worker.task_queue for worker in workers),
            f" (submits at most {pace:g}/s)" if pace and "submits" in settings.worker_queues else "",
        )
        await stop.wait()


async def _connect_patiently(
    opened: ProcessRuntime,
    stop: asyncio.Event,
    *,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> Client | None:
    """Connect, retrying while the cluster is unreachable: a worker that starts before Temporal
    (or during its restart) waits for it instead of exiting. None if stopped meanwhile."""
    delay = 0.5
    while not stop.is_set():
        try:
            return await opened.temporal(runtime=runtime, interceptors=interceptors)
        except ServiceUnreachable as error:
            log.warning("%s; retrying in %.1fs", error, delay)
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 10.0)
    return None


def main(providers: ProviderFactory = build_providers) -> None:
    stop = asyncio.Event()

    async def runner() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # An adapter setting that cannot work (no sender, say) fails when the adapters are built,
        # in one line; a metrics address it cannot listen on, too.
        await run_worker(ProcessRuntime(load_settings()), stop, providers)

    exits.serve(runner)


if __name__ == "__main__":
    main()
