"""Crash points for the fault-matrix tests: a worker or relay SIGKILLs itself at a named point, once.

Test tooling, outside the product: no module of herald/, activities/, workflows/, worker.py or
the relay imports this one. The crash points wrap the product's seams from outside instead:

    python -m devstack.fault_points worker          # worker.py, every provider wrapped (CrashingProvider)
    python -m devstack.fault_points outbox-relay    # python -m herald.outbox, its starts wrapped (CrashingStarts)

HERALD_FAULT_POINT names the point (unset: nothing is armed, the process runs as the product's
does); HERALD_FAULT_POINT_MARKER names a file that makes the crash happen once across restarts,
so the restarted process recovers.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from enum import Enum
from pathlib import Path

from herald.client import HeraldClient, NoticeReceipt
from herald.core.capabilities import Capabilities
from herald.core.message import MessageReference
from herald.core.outcomes import Accepted, LookupOutcome, SubmitOutcome
from herald.intake.notice import NoticeRequest
from herald.providers.port import CancelOutcome, OutboundMessage, Provider
from herald.providers.registry import Providers


class FaultPoint(str, Enum):
    # The attempt row is committed, the provider has not been called.
    BEFORE_PROVIDER_CALL = "before_provider_call"
    # The provider accepted; the activity never reports it.
    AFTER_PROVIDER_ACCEPTED = "after_provider_accepted"
    # The outbox relay claimed a row and has not started its notice; or started it, not marked it.
    OUTBOX_BEFORE_START = "outbox_before_start"
    OUTBOX_AFTER_START = "outbox_after_start"


class InvalidFaultPoint(ValueError):
    """A fault variable that cannot work, as one line naming it."""


class FaultPoints:
    def __init__(self, armed: FaultPoint | None = None, marker: Path | None = None) -> None:
        self._armed = armed
        self._marker = marker

    def hit(self, point: FaultPoint) -> None:
        if self._armed is not point:
            return
        if self._marker is not None:
            if self._marker.exists():
                return
            self._marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def from_environment(environ: Mapping[str, str] = os.environ) -> FaultPoints:
    """The armed point and its marker from HERALD_FAULT_POINT and HERALD_FAULT_POINT_MARKER (blank is unset)."""
    name = environ.get("HERALD_FAULT_POINT", "").strip()
    marker_text = environ.get("HERALD_FAULT_POINT_MARKER", "").strip()
    try:
        armed = FaultPoint(name) if name else None
    except ValueError:
        raise InvalidFaultPoint(
            "HERALD_FAULT_POINT: must be one of " + ", ".join(point.value for point in FaultPoint)
        ) from None
    marker = Path(marker_text) if marker_text else None
    if marker is not None and marker.is_dir():
        raise InvalidFaultPoint("HERALD_FAULT_POINT_MARKER: must be a file path, not a directory")
    return FaultPoints(armed, marker)


class CrashingProvider:
    """A provider that crashes its process around the submit: after the attempt row is committed
    (the submit activity commits it before calling the provider), or after the provider accepted."""

    def __init__(self, inner: Provider, faults: FaultPoints) -> None:
        self._inner = inner
        self._faults = faults

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @property
    def route(self) -> str:
        return self._inner.route

    async def submit(self, outbound: OutboundMessage) -> SubmitOutcome:
        self._faults.hit(FaultPoint.BEFORE_PROVIDER_CALL)
        outcome = await self._inner.submit(outbound)
        if isinstance(outcome.result, Accepted):
            self._faults.hit(FaultPoint.AFTER_PROVIDER_ACCEPTED)
        return outcome

    async def fetch(self, provider_id: str) -> LookupOutcome:
        return await self._inner.fetch(provider_id)

    async def find_by_reference(self, reference: MessageReference) -> LookupOutcome:
        return await self._inner.find_by_reference(reference)

    async def cancel(self, provider_id: str) -> CancelOutcome:
        return await self._inner.cancel(provider_id)

    async def aclose(self) -> None:
        await self._inner.aclose()


class CrashingStarts:
    """The relay's starts, crashing its process after it claimed a row and before the start, or
    after the start and before the row is marked."""

    def __init__(self, inner: HeraldClient, faults: FaultPoints) -> None:
        self._inner = inner
        self._faults = faults

    async def send_notice(self, notice: NoticeRequest) -> NoticeReceipt:
        self._faults.hit(FaultPoint.OUTBOX_BEFORE_START)
        started = await self._inner.send_notice(notice)
        self._faults.hit(FaultPoint.OUTBOX_AFTER_START)
        return started


def main(argv: list[str]) -> None:
    if argv[:1] not in (["worker"], ["outbox-relay"]):
        raise SystemExit("usage: python -m devstack.fault_points worker|outbox-relay [ARGUMENTS OF THE PROCESS]")
    sys.argv[1:] = argv[1:]  # the product's own command line parses the rest
    try:
        faults = from_environment()
    except InvalidFaultPoint as error:
        raise SystemExit(str(error)) from None
    if argv[0] == "worker":
        import worker

        def crashing_providers(settings: worker.Settings, keyring: worker.Keyring) -> Providers:
            return worker.build_providers(settings, keyring).wrapped(lambda p: CrashingProvider(p, faults))

        worker.main(providers=crashing_providers)
    else:
        from herald.outbox import __main__ as relay

        relay.main(starts=lambda herald: CrashingStarts(herald, faults))


if __name__ == "__main__":
    main(sys.argv[1:])
