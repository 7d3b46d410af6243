"""What one Herald process opens from its settings: each thing once, and only when asked.

Every server's ``main()`` and every command of the command line build one ``ProcessRuntime`` from
their settings and ask it for what they need: the fingerprint keyring and the key-encryption keys
(built once and passed to whatever names or seals a recipient: nothing reads them from a global),
a database reached once before its pool opens, a recipient vault, a Temporal client, the payload
codec. A setting that cannot work is ``InvalidSetting`` and a dependency that does not answer is
``ServiceUnreachable``, each one line naming the variable (``herald.runtime.exits`` turns them into
the process's exit).
"""

from __future__ import annotations

import contextlib
import gc
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig

from herald.ledger.store import open_pool
from herald.privacy import key_encryption
from herald.privacy.fingerprints import Keyring, keyring_from
from herald.privacy.key_encryption import KeyWrapper
from herald.privacy.payload_codec import EncryptionCodec
from herald.privacy.recipient_vault import RecipientVault
from herald.runtime.reach import check_temporal, connect_temporal, database_url, reach_database
from herald.settings import InvalidSetting, Settings
from herald.temporal.client import payload_codec

# The variables that name a database, and which of the settings each sets.
LEDGER = "DATABASE_URL"
OUTBOX = "HERALD_OUTBOX_DATABASE_URL"
# The ledger owner's login, for migrations and re-wrapping keys (the services' login may not run DDL).
OWNER = "HERALD_MIGRATION_DATABASE_URL"
# How long close() waits for the Temporal runtime's threads to let go of the last call: it returns as
# soon as they do (milliseconds when idle); 2 s was once too short on a machine at a load of 8, and
# 5 s once in a full `make test` on 2 cores (the test that checks it failed once in four runs). A
# longer bound costs nothing when the threads let go at once, and is only ever waited at exit.
RUNTIME_RELEASE_SECONDS = 15.0


class ProcessRuntime:
    """The settings of one process and what it opens from them.

    `settings` is the settings, or how to read them on first use (the command line reads them only
    once a command's arguments are checked). With `own_temporal_runtime`, Temporal clients run on
    a Temporal runtime of this process's own rather than the SDK's process-wide default, so that
    ``close()`` can stop its threads while the interpreter is still whole: a command that exits
    right after a Temporal call otherwise aborted up to 1 run in 7 (`status` of an unknown key: 6
    of 40). The thread of the runtime's blocking pool that hands a call's result to asyncio
    (pyo3-async-runtimes, inside `loop.call_soon_threadsafe`) lets go of the GIL while it writes to
    the loop's wake-up socket; the main thread takes it, finishes and starts finalizing; when the
    pool thread asks for the GIL back, CPython 3.11 ends it with pthread_exit, the unwinding
    releases a GIL state that is no longer current, and the process aborts with "Fatal Python
    error: PyGILState_Release" (temporalio/sdk-python#300). Dropping the runtime first shuts its
    Tokio runtime down with the GIL released, which waits for that thread to finish its hand-over.
    """

    def __init__(self, settings: Settings | Callable[[], Settings], *, own_temporal_runtime: bool = False) -> None:
        self._load = settings if callable(settings) else None
        self._settings = None if callable(settings) else settings
        self._keyring: Keyring | None = None
        self._keks: KeyWrapper | None = None
        self._own_runtime = own_temporal_runtime
        self._runtime: Runtime | None = None

    def settings(self) -> Settings:
        if self._settings is None:
            assert self._load is not None
            self._settings = self._load()
        return self._settings

    def keyring(self) -> Keyring:
        """The fingerprint keyring the settings name; refused in one line naming
        HERALD_FINGERPRINT_KEYS when they name none (never a plain hash instead)."""
        if self._keyring is None:
            section = self.settings().fingerprints
            self._keyring = keyring_from(section.keys, section.active_key)
        return self._keyring

    def keks(self) -> KeyWrapper:
        """The key-encryption keys that wrap recipients' data keys; refused in one line naming
        HERALD_KEY_ENCRYPTION_KEY_FILES when the settings name none."""
        if self._keks is None:
            self._keks = key_encryption.from_settings(self.settings())
        return self._keks

    def payload_codec(self) -> EncryptionCodec:
        """The payload codec's keyring; refused in one line naming HERALD_CODEC_KEYS when none is set."""
        codec = payload_codec(self.settings().temporal.codec)
        if codec is None:
            raise InvalidSetting(
                "HERALD_CODEC_KEYS", "no key configured (nor HERALD_CODEC_KEY_FILES): there is nothing to decrypt with"
            )
        return codec

    def database_url(self, variable: str = LEDGER) -> str | None:
        """The database `variable` names (LEDGER, OUTBOX or OWNER), checked for form only (nothing is
        connected to); None when it is unset."""
        settings = self.settings()
        url = {
            LEDGER: settings.database_url, OUTBOX: settings.outbox.database_url, OWNER: settings.migration_database_url,
        }[variable]  # fmt: skip
        return None if url is None else database_url(variable, url.get_secret_value())

    def owner_database(self) -> tuple[str, str]:
        """The ledger owner's connection and the variable that set it: HERALD_MIGRATION_DATABASE_URL,
        else DATABASE_URL (a single-role development server); InvalidSetting when neither is set."""
        for variable in (OWNER, LEDGER):
            url = self.database_url(variable)
            if url is not None:
                return variable, url
        raise InvalidSetting(OWNER, "required: the ledger owner's connection (or DATABASE_URL)")

    def required_database_url(self, variable: str, rule: str) -> str:
        """As ``database_url``; unset is InvalidSetting(variable, rule)."""
        url = self.database_url(variable)
        if url is None:
            raise InvalidSetting(variable, rule)
        return url

    async def reach(self, variable: str, rule: str) -> str:
        """The database `variable` names, required (`rule` when unset) and reached once."""
        url = self.required_database_url(variable, rule)
        await reach_database(url, variable)
        return url

    @contextlib.asynccontextmanager
    async def pool(
        self, variable: str, rule: str, *, max_size: int = 1, timeout: float = 5.0
    ) -> AsyncIterator[AsyncConnectionPool]:
        """A pool on the database `variable` names, opened after one direct connection succeeded:
        a refused connection is then one line with libpq's reason, not a pool retrying until its
        timeout (``timeout`` bounds each later wait for a connection)."""
        url = await self.reach(variable, rule)
        async with open_pool(url, max_size=max_size, timeout=timeout) as pool:
            yield pool

    def vault(self, pool: AsyncConnectionPool) -> RecipientVault:
        """The recipient keys held in the ledger `pool` opens, wrapped under this process's KEKs."""
        return RecipientVault(pool, self.keks())

    @contextlib.asynccontextmanager
    async def optional_vault(self, *, max_size: int = 2) -> AsyncIterator[RecipientVault | None]:
        """The recipient keys when the ledger is configured (DATABASE_URL): a client given them seals
        personal fields so an erasure reaches Temporal's copy; None without a ledger."""
        if self.database_url(LEDGER) is None:
            yield None
            return
        async with self.pool(LEDGER, "required", max_size=max_size) as pool:
            yield self.vault(pool)

    async def temporal(self, **options: Any) -> Client:
        """A Temporal client (`options` as ``herald.temporal.client.connect`` takes them), after the
        settings were checked for form; a server that does not answer is ServiceUnreachable."""
        settings = self.settings().temporal
        check_temporal(settings)
        if self._own_runtime and "runtime" not in options:
            if self._runtime is None:
                self._runtime = Runtime(telemetry=TelemetryConfig())
            options["runtime"] = self._runtime
        return await connect_temporal(settings, **options)

    def close(self) -> bool:
        """Stop this process's own Temporal runtime's threads now, while the interpreter is whole.

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
