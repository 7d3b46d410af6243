"""The connections a command-line command opens: each only when asked, after its input was checked.

Used by `starter.py`. A service that does not answer is one line naming the setting that points at
it (ServiceUnreachable); a setting that cannot work is refused before anything is connected to.
The server entry points (receipt server, outbox relay, exporter, retention job, migrations) make
the same two checks at start (`reach_database`, `connect_temporal`; the worker the first), so a
dependency that is down reads the same from every command.
"""

from __future__ import annotations

import contextlib
import gc
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from herald import cli_input, fingerprints, key_encryption
from herald.client import HeraldClient
from herald.delivery_policy import DeliveryPolicy
from herald.recipient_vault import RecipientVault
from herald.settings import InvalidSetting, Settings, TemporalSettings
from herald.temporal_client import connect

# A database that has not answered in this long is reported as unreachable (libpq's connect_timeout).
DATABASE_CONNECT_TIMEOUT_SECONDS = 5
# How long close() waits for the Temporal runtime's threads to let go of the last call.
RUNTIME_RELEASE_SECONDS = 2.0


class ServiceUnreachable(Exception):
    """A service the command needs did not answer; the message names the setting that points at it."""


class Services:
    """The connections a command opens, each only when the command asks, after checking its input.

    Temporal clients run on this command line's own Temporal runtime, not the SDK's process-wide
    default, so that `close()` can stop the runtime's threads while the interpreter is still whole.
    Left running until interpreter exit, they aborted up to 1 run in 7 of a command that exits right
    after a Temporal call (`status` of an unknown key: 6 of 40): the thread of the runtime's blocking pool that hands a call's result to asyncio
    (pyo3-async-runtimes, inside `loop.call_soon_threadsafe`) lets go of the GIL while it writes to
    the loop's wake-up socket; the main thread takes it, finishes and starts finalizing; when the
    pool thread asks for the GIL back, CPython 3.11 ends it with pthread_exit, the unwinding releases
    a GIL state that is no longer current, and the process aborts with "Fatal Python error:
    PyGILState_Release" (temporalio/sdk-python#300). Dropping the runtime first shuts its Tokio
    runtime down with the GIL released, which waits for that thread to finish its hand-over.
    """

    def __init__(self, load_settings: Callable[[], Settings]) -> None:
        self._load_settings = load_settings
        self._settings: Settings | None = None
        self._keyring: fingerprints.Keyring | None = None
        self._runtime: Runtime | None = None

    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = self._load_settings()
            if self._settings.fingerprints.keys:  # a command that fingerprints without keys is refused when it does
                # Made the process's too: the client and the ledger's lookups a command calls still read
                # that one, and must read the keys these settings name (a stack's stack.env included),
                # never a keyring of their own from the bare environment.
                self._keyring = fingerprints.install_from(self._settings)
        return self._settings

    def keyring(self) -> fingerprints.Keyring:
        """The fingerprint keyring these settings name, for a command that names a recipient by
        fingerprint; refused in one line naming HERALD_FINGERPRINT_KEYS when they name none."""
        settings = self.settings()
        return self._keyring or fingerprints.install_from(settings)  # no key: InvalidSetting, never a plain hash

    def check_temporal(self) -> None:
        """Refuse Temporal settings that cannot work (address form, TLS files), without connecting."""
        temporal = self.settings().temporal
        host, _, port = temporal.address.rpartition(":")
        if not (host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65_535):
            raise InvalidSetting(
                "HERALD_TEMPORAL_ADDRESS", "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"
            )
        if not (temporal.tls or temporal.api_key):
            return  # tls_config() reads no file then
        for name, path in (
            ("HERALD_TEMPORAL_TLS_CA", temporal.tls_ca_path),
            ("HERALD_TEMPORAL_TLS_CERT", temporal.tls_cert_path),
            ("HERALD_TEMPORAL_TLS_KEY", temporal.tls_key_path),
        ):
            if path is not None:  # read at connect time, where a missing file would look like a network failure
                cli_input.read_bytes(str(path), name, max_bytes=1024 * 1024)

    def ledger_url(self, required_for: str) -> str:
        """DATABASE_URL, checked for form only (nothing is connected to)."""
        url = self.optional_ledger_url()
        if url is None:
            raise InvalidSetting("DATABASE_URL", f"required {required_for}")
        return url

    def optional_ledger_url(self) -> str | None:
        url = self.settings().database_url
        return None if url is None else database_url("DATABASE_URL", url.get_secret_value())

    @contextlib.asynccontextmanager
    async def vault(self) -> AsyncIterator[RecipientVault | None]:
        """The recipient keys, when the ledger is configured (DATABASE_URL): a client given them seals
        personal fields so an erasure reaches Temporal's copy; None without a ledger."""
        url = self.optional_ledger_url()
        if url is None:
            yield None
            return
        async with self.ledger(url, max_size=2) as pool:
            yield RecipientVault(pool, key_encryption.from_settings(self.settings()))

    async def herald(self, *, policy: DeliveryPolicy | None = None, vault: RecipientVault | None = None) -> HeraldClient:
        settings = self.settings().temporal
        self.check_temporal()
        if self._runtime is None:
            self._runtime = Runtime(telemetry=TelemetryConfig())
        client = await connect_temporal(settings, runtime=self._runtime)
        return HeraldClient(client, settings.task_queue, policy=policy, vault=vault)

    @contextlib.asynccontextmanager
    async def ledger(
        self, url: str, *, variable: str = "DATABASE_URL", max_size: int = 1
    ) -> AsyncIterator[AsyncConnectionPool]:
        """A pool on `url`, opened after one direct connection succeeded: a refused connection is then
        one line with libpq's reason, not a pool retrying until its timeout."""
        from herald.ledger.store import open_pool

        await reach_database(url, variable)
        async with open_pool(url, max_size=max_size) as pool:
            yield pool

    def close(self) -> bool:
        """Stop the Temporal runtime's threads now, while the interpreter is whole (see the class).

        Returns True when the runtime is gone (or was never made). Clients and the runtime sit in
        reference cycles, hence the collection; the runtime's last reference going away shuts its
        Tokio runtime down and waits for its threads.

        The collection is repeated for a moment: the runtime's hand-over thread can still hold the
        last call's future (whose exception's traceback reaches the client, and so the runtime)
        until it gets the GIL back, which the sleep between tries gives it. Seen on a loaded
        machine: one collection right after the call found the runtime still referenced.
        """
        if self._runtime is None:
            return True
        released = weakref.ref(self._runtime)
        self._runtime = None
        deadline = time.monotonic() + RUNTIME_RELEASE_SECONDS
        gc.collect()
        while released() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
            gc.collect()
        return released() is None


async def connect_temporal(settings: TemporalSettings, **options: Any) -> Client:
    """A client (`options` as `herald.temporal_client.connect` takes them); a server that does not
    answer is ServiceUnreachable naming HERALD_TEMPORAL_ADDRESS, with the operating system's reason."""
    try:
        return await connect(settings, **options)
    except RuntimeError as error:  # the bridge reports a failed connect as RuntimeError
        raise ServiceUnreachable(
            f"cannot reach Temporal at {settings.address} (HERALD_TEMPORAL_ADDRESS): {_connect_failure(error)}"
        ) from None


async def reach_database(url: str, variable: str = "DATABASE_URL") -> None:
    """One direct connection to `url`, closed at once, or ServiceUnreachable naming `variable`.

    A pool would retry in the background until its own timeout and log every try; this fails once,
    with libpq's reason (host and port, never the password), within the connect timeout even when
    the server accepts the connection and then says nothing.
    """
    database_url(variable, url)
    options = (
        {} if "connect_timeout" in conninfo_to_dict(url) else {"connect_timeout": DATABASE_CONNECT_TIMEOUT_SECONDS}
    )
    try:
        probe = await psycopg.AsyncConnection.connect(url, **options)
    except psycopg.OperationalError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ServiceUnreachable(f"cannot reach the database at {variable}: {reason}") from None
    await probe.close()


def database_url(variable: str, url: str) -> str:
    """`url` if PostgreSQL can parse it; the refusal never repeats it (it may carry a password)."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise InvalidSetting(
            variable, "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"
        ) from None
    return url


def _connect_failure(error: RuntimeError) -> str:
    """The operating system's reason from the bridge's connect error ("Connection refused"), else its text."""
    found = re.findall(r'message: "([^"]+)"', str(error))
    return found[-1] if found else str(error).removeprefix("Failed client connect: ")
