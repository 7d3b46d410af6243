"""The Infobip emulator's settings: one immutable object handed to ``create_app`` / ``InfobipServer``.

Every knob that bounds time or memory lives here. The one deliberate deviation from Infobip is
``time_factor``: it scales the documented report-retry schedule (1 min + 1 min x n^2) so a test
waits seconds, not minutes; everything else runs at the documented values unless a test asks.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from emulator.config import LOOPBACK_HOSTS
from emulator.infobip.faults import FaultAssignment

# Infobip keeps logs and pullable reports for 48 hours.
RETENTION_SECONDS = 48 * 3600
# Infobip's longest validity period, and the one assumed when a message names none (the schema says
# longer values are cut to 48 h; the default itself is UNCONFIRMED, "usually 48 hours").
MAX_VALIDITY_SECONDS = 48 * 3600


class InfobipConfig(BaseModel):
    """Settings of one Infobip emulator instance (test and demo use only, never production)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8239, ge=0, le=65_535)
    # `Authorization: App <api_key>`, Infobip's recommended scheme.
    api_key: str = Field(min_length=1, max_length=500)
    # Infobip also takes HTTP Basic (account username and password); None refuses Basic.
    basic_username: str | None = Field(default=None, min_length=1)
    basic_password: str | None = Field(default=None, min_length=1)
    # One lifecycle step (accepted -> sent/pending -> final) takes this long.
    step_ms: int = Field(default=100, ge=1, le=600_000)
    # Scales the report-retry schedule only (the documented minutes become minutes x factor).
    time_factor: float = Field(default=1.0, gt=0, le=1)
    # Retries after the first failed report post. Infobip documents the schedule, not its end
    # (UNCONFIRMED): 10 retries span 4 h 55 min unscaled.
    report_max_retries: int = Field(default=10, ge=0, le=30)
    report_timeout_seconds: float = Field(default=5.0, gt=0, le=90)
    # Reports per POST: Infobip's default bucket is 100 (maxBucketSize 1-2000 on a subscription).
    max_bucket_size: int = Field(default=100, ge=1, le=2000)
    # Reports to one URL that become due within this window travel in one POST.
    batch_window_ms: int = Field(default=50, ge=0, le=60_000)
    # Basic credentials on every report post (a subscription's BASIC security profile); None = none.
    webhook_basic_username: str | None = Field(default=None, min_length=1, max_length=255)
    webhook_basic_password: str | None = Field(default=None, min_length=1, max_length=255)
    # Where reports go for messages that name no webhooks.delivery.url (an account's subscription);
    # None: such reports wait for GET /sms/3/reports.
    subscription_url: str | None = None
    # Idempotent sending (an account setting Infobip Support enables): a messageId reused within this
    # many seconds of its first acceptance is rejected during processing. None = off, Infobip's default.
    idempotency_grace_seconds: float | None = Field(default=None, gt=0, le=30 * 86_400)
    # How long logs and unpulled reports are kept.
    retention_seconds: float = Field(default=RETENTION_SECONDS, gt=0, le=RETENTION_SECONDS)
    # GET /sms/3/logs: Infobip's documented 120 requests a minute; None = unlimited.
    logs_requests_per_minute: int | None = Field(default=120, ge=1, le=100_000)
    # Reports are posted only to these hosts: the emulator must never post to the outside world.
    allowed_webhook_hosts: frozenset[str] = LOOPBACK_HOSTS
    # Memory bound: once this many messages are stored, sends answer 500 until a reset.
    max_messages: int = Field(default=10_000, ge=1, le=1_000_000)
    # What each message part costs, shown in reports and logs.
    price_per_message: float = Field(default=0.0075, ge=0)
    currency: str = "EUR"
    initial_faults: tuple[FaultAssignment, ...] = ()

    @model_validator(mode="after")
    def _pairs(self) -> InfobipConfig:
        if (self.basic_username is None) != (self.basic_password is None):
            raise ValueError("basic_username and basic_password go together: give both or neither")
        if (self.webhook_basic_username is None) != (self.webhook_basic_password is None):
            raise ValueError("webhook_basic_username and webhook_basic_password go together: give both or neither")
        return self

    def report_retry_delays(self) -> list[float]:
        """Seconds before each retry of a report post: Infobip's ``1min + (1min * retryNumber *
        retryNumber)`` for retryNumber 0, 1, 2, ... (whether it starts at 0 is UNCONFIRMED), scaled."""
        return [(60.0 + 60.0 * n * n) * self.time_factor for n in range(self.report_max_retries)]
