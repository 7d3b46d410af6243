"""The emulator's settings: one immutable object handed to ``create_app``.

Every knob that bounds time or memory lives here, so a test can shrink the
emulator's clock (``step_ms``, callback backoff) without touching its code.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from emulator.faults import FaultAssignment

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class EmulatorConfig(BaseModel):
    """Settings of one emulator instance (test and demo use only, never production)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    account_sid: str = Field(pattern=r"^AC[0-9a-fA-F]{32}$")
    auth_token: str = Field(min_length=1)
    # One lifecycle step (queued -> sending -> sent -> final) takes this long.
    step_ms: int = Field(default=100, ge=1, le=600_000)
    # Messages per second per sender (From or MessagingServiceSid); 0 turns the limit off.
    rate_limit_per_sender: float = Field(default=0, ge=0)
    # Callback redelivery: 8 tries with waits 0.5, 1, 2, ... capped at 30 s is about 60 s in all.
    callback_max_attempts: int = Field(default=8, ge=1, le=20)
    callback_first_retry_seconds: float = Field(default=0.5, gt=0, le=60)
    callback_backoff_factor: float = Field(default=2.0, ge=1, le=10)
    callback_max_retry_seconds: float = Field(default=30.0, gt=0, le=300)
    callback_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    # Callbacks go only to these hosts: the emulator must never post to the outside world.
    allowed_callback_hosts: frozenset[str] = LOOPBACK_HOSTS
    # Sender a Messaging Service "picks" when a message names only MessagingServiceSid; also the
    # number a handset's reply goes to unless it names another (POST /_emulator/inbound).
    service_sender: str = "+15005550006"
    # The number's "A message comes in" webhook, where replies are posted unless one names its own.
    inbound_url: str | None = None
    # Memory bound: once this many messages are stored, creates answer 503 until a reset.
    max_messages: int = Field(default=10_000, ge=1, le=1_000_000)
    # Faults armed at start (the demo's --faults-file).
    initial_faults: tuple[FaultAssignment, ...] = ()

    def callback_retry_delays(self) -> list[float]:
        """Waits between successive callback attempts (one fewer than attempts)."""
        delays: list[float] = []
        delay = self.callback_first_retry_seconds
        for _ in range(self.callback_max_attempts - 1):
            delays.append(min(delay, self.callback_max_retry_seconds))
            delay *= self.callback_backoff_factor
        return delays
