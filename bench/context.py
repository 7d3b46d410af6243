"""The driver's connections to the bench stack, and the measured window every phase runs in."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from bench.common import Phase
from bench.measure import CpuMeter, rss_mib
from bench.stack import BenchStack
from herald.client import HeraldClient
from herald.core.delivery_policy import DeliveryPolicy
from herald.runtime.process import ProcessRuntime
from herald.settings import Settings, load_settings
from herald.temporal.client import connect

# Display columns, and which process plays each part in each variant (absent = not involved).
COLUMNS = ("temporal", "worker", "receipts", "postgres", "emulator", "driver")
ROLES = {
    "naive": {"receipts": "receiver", "postgres": "postgres", "emulator": "emulator", "driver": "driver"},
    "floor": {"temporal": "temporal", "worker": "floor_worker", "receipts": "receiver", "postgres": "postgres",
              "emulator": "emulator", "driver": "driver"},
    "herald": {"temporal": "temporal", "worker": "worker", "receipts": "receipts", "postgres": "postgres",
               "emulator": "emulator", "driver": "driver"},
}  # fmt: skip
# The e-mail bench's (`--channel email`): the ESP emulator in the emulator column. Herald's events go
# to its receipt server from the stack's ESP; the naive sender's and the floor's go to the bench's
# receiver from an ESP of their own (`esp_bench`), as an ESP posts every event to one webhook URL.
EMAIL_ROLES = {
    "naive": {**ROLES["naive"], "emulator": "esp_bench"},
    "floor": {**ROLES["floor"], "worker": "floor_email_worker", "emulator": "esp_bench"},
    "herald": {**ROLES["herald"], "emulator": "esp"},
}
# The notice pass's (bench/notice_run.py): an SMS and an e-mail, so both channels' processes.
NOTICE_ROLES = {
    "floor": {
        **ROLES["floor"],
        "worker": ("floor_worker", "floor_email_worker"),
        "emulator": ("emulator", "esp_bench"),
    },
    "herald": {**ROLES["herald"], "emulator": ("emulator", "esp")},
}
ROLES_BY_CHANNEL = {"sms": ROLES, "email": EMAIL_ROLES, "notice": NOTICE_ROLES}


@dataclass(frozen=True)
class EmulatorAdmin:
    """One emulator's admin API as the bench reads and arms it: the same routes under another prefix."""

    http: httpx.AsyncClient
    prefix: str  # "/_emulator" (Twilio), "/_esp" (SendGrid)
    silent_fault: str  # the fault that accepts a message and never reports it

    async def stats(self) -> dict:
        response = await self.http.get(f"{self.prefix}/stats")
        response.raise_for_status()
        return response.json()

    async def messages(self, to: str) -> list[dict]:
        response = await self.http.get(f"{self.prefix}/messages", params={"to": to})
        response.raise_for_status()
        return response.json()["messages"]

    async def silence(self, to: str) -> None:
        """Every message to `to` from now on is accepted and never reported: it parks its intent."""
        (await self.http.put(f"{self.prefix}/faults/{to}", json={"fault": self.silent_fault})).raise_for_status()

    async def make_room(self, n: int, capacity: int) -> None:
        """Forget earlier phases' messages (all finished) when n more would not fit in the emulator's store."""
        if (await self.stats())["stored_messages"] + n > capacity:
            (await self.http.post(f"{self.prefix}/reset")).raise_for_status()


class Bench:
    def __init__(self, stack: BenchStack) -> None:
        self.stack = stack
        self.runtime = ProcessRuntime(load_settings(stack.config.service_env(stack.database_url)))
        self.settings: Settings = self.runtime.settings()
        self.keyring = self.runtime.keyring()
        self.meter = CpuMeter(stack.pids)
        # A rate-limited route's worker as two processes, workflows and submits (HERALD_WORKER_QUEUES).
        self.split_worker = False
        # The route's urgent lane polled by a process of its own (HERALD_WORKER_QUEUES=urgent).
        self.urgent_worker = False
        # Priority-1 intents started on the urgent lane (HERALD_URGENT_LANE); False: on the route's queue.
        self.urgent_lane = True

    async def open(self) -> None:
        # Herald's client exactly as a service builds it (pydantic converter, production policy).
        self.herald_temporal = await connect(self.settings.temporal)
        self.pool = AsyncConnectionPool(self.stack.database_url, min_size=1, max_size=4, open=False)
        await self.pool.open()
        # Sealing with the recipient's key, as a service with the ledger configured does.
        self.vault = self.runtime.vault(self.pool)
        self.herald = self.client(self.settings.temporal.task_queue)
        # The floor uses Temporal's default converter: no Herald code on its path.
        self.floor_temporal = await Client.connect(
            self.settings.temporal.address, namespace=self.settings.temporal.namespace
        )
        self.admin = httpx.AsyncClient(base_url=self.stack.emulator_url, timeout=60)
        esp, esp_bench = (httpx.AsyncClient(base_url=url, timeout=60) for url in self.stack.esp_admin_urls)
        # Where each emulator process of the stack is read, by its name in the stack's pids.
        self.emulators = {
            "emulator": EmulatorAdmin(self.admin, "/_emulator", "silent"),
            "esp": EmulatorAdmin(esp, "/_esp", "no_events"),
            "esp_bench": EmulatorAdmin(esp_bench, "/_esp", "no_events"),
        }

    def client(self, task_queue: str, policy: DeliveryPolicy | None = None) -> HeraldClient:
        """Herald's client on `task_queue`, as a service builds it: the stack's keys, sealing."""
        return HeraldClient(self.herald_temporal, task_queue, keyring=self.keyring, policy=policy, vault=self.vault,
                            urgent_lane=self.urgent_lane)  # fmt: skip

    async def close(self) -> None:
        for emulator in self.emulators.values():
            await emulator.http.aclose()
        await self.pool.close()

    @property
    def twilio(self) -> tuple[str, str, str]:
        t = self.settings.twilio
        return t.account_sid, t.auth_token.get_secret_value(), t.from_number or ""

    async def emulator_stats(self, admin: httpx.AsyncClient | None = None) -> dict:
        response = await (admin or self.admin).get("/_emulator/stats")
        response.raise_for_status()
        return response.json()

    async def measured(
        self,
        phase: Phase,
        roles: dict[str, str | tuple[str, ...]],
        run: Callable[[], Awaitable[bool]],
        admin: httpx.AsyncClient | None = None,
    ) -> None:
        # A role's value names one process, or several (the scale-out check's two workers) whose CPU adds up.
        """Run `run` (offer the load and wait for the end) between two CPU snapshots."""
        self.meter.groups = dict(self.stack.pids)
        accepted_before = await self._accepted(roles, admin)
        before = self.meter.snapshot()
        began = time.monotonic()
        finished = await run()
        after = self.meter.snapshot()
        phase.window_seconds = time.monotonic() - began
        phase.timed_out = not finished
        phase.accepted_at_provider = await self._accepted(roles, admin) - accepted_before
        delta = CpuMeter.delta(before, after)
        phase.foreign_cpu = CpuMeter.foreign(delta)
        phase.process_cpu = {name: delta[name] for name in self.stack.pids if name in delta}
        phase.cpu = {column: sum(delta.get(name, 0.0) for name in _names(process)) for column, process in roles.items()}
        if "worker" in roles:
            phase.worker_rss = rss_mib(self.stack.pids[_names(roles["worker"])[0]])
        if "temporal" in roles:
            phase.server_rss = rss_mib(self.stack.pids["temporal"])

    async def _accepted(self, roles: dict[str, str | tuple[str, ...]], admin: httpx.AsyncClient | None) -> int:
        """Messages the variant's emulators (its `emulator` role) accepted so far; `admin`: that emulator's instead."""
        if admin is not None:
            return (await self.emulator_stats(admin))["accepted"]
        names = _names(roles.get("emulator", ()))
        return sum([(await self.emulators[name].stats())["accepted"] for name in names])


def _names(process: str | tuple[str, ...]) -> tuple[str, ...]:
    return (process,) if isinstance(process, str) else process
