"""Crash points for the fault-matrix tests: a worker or relay SIGKILLs itself at a named point, once.

Unarmed unless HERALD_FAULT_POINT names a point; production never sets it. A marker
file makes the crash happen once across restarts, so the restarted worker recovers.
"""

from __future__ import annotations

import os
import signal
from enum import Enum
from pathlib import Path


class FaultPoint(str, Enum):
    # The attempt row is committed, the provider has not been called.
    BEFORE_PROVIDER_CALL = "before_provider_call"
    # The provider accepted; the activity never reports it.
    AFTER_PROVIDER_ACCEPTED = "after_provider_accepted"
    # The outbox relay claimed a row and has not started its notice; or started it, not marked it.
    OUTBOX_BEFORE_START = "outbox_before_start"
    OUTBOX_AFTER_START = "outbox_after_start"


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
