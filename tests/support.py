"""Helpers the integration tests share: the test delivery policy, the emulator's admin API, fresh keys."""

from __future__ import annotations

import base64
import secrets
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import make_conninfo

from herald.core.delivery_policy import DeliveryPolicy
from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import KeyWrapper
from herald.runtime.process import ProcessRuntime
from herald.settings import load_settings

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


class Emulator:
    """The emulator's admin API: arm faults, read what it accepted (the oracle for duplicates)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, timeout=5.0)

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        response = await self._http.put(f"/_emulator/faults/{to}", json={"fault": fault, **params})
        response.raise_for_status()

    async def messages(self, to: str) -> list[dict[str, Any]]:
        response = await self._http.get("/_emulator/messages", params={"to": to})
        response.raise_for_status()
        body = response.json()
        return body["messages"] if isinstance(body, dict) else body

    async def release_callbacks(self, to: str) -> int:
        """Let the callbacks a `lost_then_reported` fault holds for `to` go out; how many were held."""
        response = await self._http.post("/_emulator/callbacks/release", params={"to": to})
        response.raise_for_status()
        return response.json()["released"]

    async def stats(self) -> dict[str, Any]:
        response = await self._http.get("/_emulator/stats")
        response.raise_for_status()
        return response.json()

    async def aclose(self) -> None:
        await self._http.aclose()



class Esp:
    """The ESP emulator's admin API: arm faults, read what the relay really accepted (the oracle)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._http = httpx.AsyncClient(base_url=base_url, timeout=5.0)

    async def arm(self, to: str, fault: str, **params: Any) -> None:
        response = await self._http.put(f"/_esp/faults/{to}", json={"fault": fault, **params})
        response.raise_for_status()

    async def activity_fault(self, status: int | None, count: int | None = None) -> None:
        """Make the Email Activity API answer `status` to the next `count` requests (None: all); None disarms."""
        if status is None:
            response = await self._http.delete("/_esp/activity-fault")
        else:
            response = await self._http.put("/_esp/activity-fault", json={"status": status, "count": count})
        response.raise_for_status()

    async def messages(self, to: str) -> list[dict[str, Any]]:
        """Every message the relay accepted for `to`, with headers, attachment hashes and events."""
        response = await self._http.get("/_esp/messages", params={"to": to})
        response.raise_for_status()
        body = response.json()
        return body["messages"] if isinstance(body, dict) else body

    async def aclose(self) -> None:
        await self._http.aclose()


ORDER_DATA: dict[str, str | int] = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}


# One fingerprint key for the whole session (a file, 0600): every stack a test starts (the main
# one, the fault stack) and every in-process client and worker name a recipient alike, as the
# processes of one deployment do. Written once per process; xdist workers each have their own.
SESSION_FINGERPRINT_KEYS = Path(tempfile.mkdtemp(prefix="herald-fp-")) / "fingerprint-keys"
SESSION_FINGERPRINT_KEYS.write_text(f"session:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
SESSION_FINGERPRINT_KEYS.chmod(0o600)
# Likewise one key-encryption key (herald/privacy/key_encryption.py): a key sealed by an in-process client is
# unwrapped by the stack's workers, and a stack of a test's own shares it.
SESSION_KEY_ENCRYPTION_KEYS = SESSION_FINGERPRINT_KEYS.parent / "key-encryption-keys"
SESSION_KEY_ENCRYPTION_KEYS.write_text(f"session-kek:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
SESSION_KEY_ENCRYPTION_KEYS.chmod(0o600)
# The session's keys as a process builds them from its settings (herald.runtime), for what a test
# hands them to: clients, vaults, activities, the receipt endpoint, intents it builds in-process.
SESSION_RUNTIME = ProcessRuntime(load_settings({
    "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
    "HERALD_KEY_ENCRYPTION_KEY_FILES": str(SESSION_KEY_ENCRYPTION_KEYS),
}))  # fmt: skip
SESSION_KEYRING: Keyring = SESSION_RUNTIME.keyring()
SESSION_KEKS: KeyWrapper = SESSION_RUNTIME.keks()


def email_request(key: str, to: str, **overrides: Any) -> dict[str, Any]:
    """An order-receipt e-mail intent request for `key` and `to`; overrides replace its fields."""
    return {
        "business_key": key,
        "channel": "email",
        "recipient": to,
        "template_id": "order_receipt_email",
        "template_version": 1,
        "render_data": ORDER_DATA,
        **overrides,
    }


def fresh_address() -> str:
    """A random address, so each test's faults and messages are its own."""
    return f"member.{secrets.token_hex(5)}@example.com"


def fresh_recipient() -> str:
    """A random +1 555 number, so each test's faults and messages are its own."""
    return "+1555" + "".join(secrets.choice("0123456789") for _ in range(7))


def fresh_key(event: str = "order_receipt") -> str:
    return f"{event}:t_{secrets.token_hex(6)}"


def receipt_request(key: str, to: str, **overrides: Any) -> dict[str, Any]:
    return {
        "business_key": key,
        "recipient": to,
        "template_id": "order_receipt",
        "template_version": 1,
        "render_data": {"order_ref": "ord_84721", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"},
        **overrides,
    }


@asynccontextmanager
async def plain_relay(temporal: Any, settings: Any, pool: Any) -> AsyncIterator[Any]:
    """Workers on their own task queue whose e-mail relay posts no delivery events; yields their client."""
    from activities.ledger import LedgerActivities
    from activities.provider import ProviderActivities
    from herald.client import HeraldClient
    from herald.core.intent import Channel
    from herald.privacy.recipient_vault import RecipientVault
    from herald.providers.smtp import SmtpAdapter
    from worker import build_submit_worker, build_worker

    task_queue = f"herald-plain-relay-{secrets.token_hex(4)}"
    plain = settings.model_copy(update={"temporal": settings.temporal.model_copy(update={"task_queue": task_queue})})
    config = settings.email.model_copy(update={"delivery_events": False})
    vault = RecipientVault(pool, SESSION_KEKS)
    provider = ProviderActivities({Channel.EMAIL: SmtpAdapter(config, keyring=SESSION_KEYRING)},
                                  settings.receipts.public_url, pool, vault=vault, keyring=SESSION_KEYRING)  # fmt: skip
    async with build_worker(temporal, plain, LedgerActivities(pool, vault), provider), build_submit_worker(
        temporal, plain, provider
    ):
        yield HeraldClient(temporal, task_queue, keyring=SESSION_KEYRING, policy=TEST_POLICY)


async def create_database(server_url: str, prefix: str) -> str:
    """A new, empty database on `server_url`'s server (same login); its connection string."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as admin:
        await admin.execute(f"CREATE DATABASE {name}")
    return make_conninfo(server_url, dbname=name)


class TestClock:
    """The intent machine's clock in unit tests: a time the test moves, and fixed jitter."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, at: datetime, jitter: float = 0.5) -> None:
        self.at, self.jitter = at, jitter

    def now(self) -> datetime:
        return self.at

    def random(self) -> float:
        return self.jitter

    def advance(self, by: timedelta) -> None:
        self.at += by
