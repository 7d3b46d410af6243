"""The ESP emulator's settings: one immutable object handed to ``EspServer``.

Every knob that bounds time or memory lives here, so a test can shrink the
emulator's clock (``step_ms``, webhook backoff) without touching its code.
Port 0 lets the OS choose; the server reports the ports it got.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from emulator.config import LOOPBACK_HOSTS
from emulator.esp.faults import FaultAssignment

_MAX_WEBHOOK_URL_CHARS = 4000
# An hour of feed lag and 100,000 requests a minute are past anything a test or a demo needs.
MAX_ACTIVITY_LAG_MS = 3_600_000
MAX_ACTIVITY_REQUESTS_PER_MINUTE = 100_000


class EspConfig(BaseModel):
    """Settings of one ESP emulator instance (test and demo use only, never production)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    smtp_port: int = Field(default=2525, ge=0, le=65_535)
    admin_port: int = Field(default=8235, ge=0, le=65_535)
    # Where SendGrid would post its events; None records events without posting them.
    webhook_url: str | None = None
    # SMTP AUTH credentials (SendGrid's relay: username "apikey", password the API key); None = no AUTH.
    username: str | None = Field(default=None, min_length=1)
    password: str | None = Field(default=None, min_length=1)
    # PEM file of the P-256 key that signs events; None generates a fresh key at start.
    private_key_file: Path | None = None
    # Events of one recipient follow each other this far apart.
    step_ms: int = Field(default=100, ge=1, le=600_000)
    # Webhook redelivery: 8 tries with waits 0.5, 1, 2, ... capped at 30 s is about 60 s in all
    # (SendGrid retries for 24 hours; a test tool must give up sooner).
    webhook_max_attempts: int = Field(default=8, ge=1, le=20)
    webhook_first_retry_seconds: float = Field(default=0.5, gt=0, le=60)
    webhook_backoff_factor: float = Field(default=2.0, ge=1, le=10)
    webhook_max_retry_seconds: float = Field(default=30.0, gt=0, le=300)
    webhook_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    # Events go only to these hosts: the emulator must never post to the outside world.
    allowed_webhook_hosts: frozenset[str] = LOOPBACK_HOSTS
    # Memory bounds: SMTP SIZE (larger messages get 552), messages kept until a reset (then 452),
    # and the text body kept per message (attachments are kept as hashes only).
    max_message_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=100 * 1024 * 1024)
    max_messages: int = Field(default=10_000, ge=1, le=1_000_000)
    max_stored_body_chars: int = Field(default=64 * 1024, ge=0, le=10 * 1024 * 1024)
    # Offer SMTPUTF8 (RFC 6531: addresses with a non-ASCII local part). SendGrid's SMTP documentation
    # does not list it, so the emulator does not offer it unless asked.
    smtputf8: bool = False
    # An idle SMTP connection is closed after this long (aiosmtpd's default is 300 s).
    smtp_idle_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Faults armed at start (the demo's --faults-file).
    initial_faults: tuple[FaultAssignment, ...] = ()
    # SendGrid's Email Activity API (GET /v3/messages, /v3/messages/{msg_id}) on the admin port. It is a
    # paid add-on: None means "not purchased" and every request answers 403; else the Bearer key it takes.
    activity_api_key: str | None = Field(default=None, min_length=1, max_length=500)
    # How long after acceptance (and after each event) the feed shows it. SendGrid documents no bound;
    # users report about a minute. The default is short enough for a demo, long enough to be noticed.
    activity_lag_ms: int = Field(default=1000, ge=0, le=MAX_ACTIVITY_LAG_MS)
    # SendGrid: "The current limit is 6 requests per minute"; None = unlimited.
    activity_requests_per_minute: int | None = Field(default=6, ge=1, le=MAX_ACTIVITY_REQUESTS_PER_MINUTE)

    @model_validator(mode="after")
    def _check(self) -> EspConfig:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together: give both or neither")
        if self.webhook_url is not None:
            self._check_webhook_url(self.webhook_url)
        return self

    def _check_webhook_url(self, url: str) -> None:
        if len(url) > _MAX_WEBHOOK_URL_CHARS:
            raise ValueError(f"webhook_url must be at most {_MAX_WEBHOOK_URL_CHARS} characters")
        try:
            parts = urlsplit(url)
            hostname, _ = parts.hostname, parts.port  # .port raises ValueError when malformed
        except ValueError:
            raise ValueError("webhook_url must be an http(s) URL") from None
        if parts.scheme not in ("http", "https") or not hostname:
            raise ValueError("webhook_url must be an http(s) URL")
        if hostname not in self.allowed_webhook_hosts:
            # The emulator is a test tool: it posts only to hosts it was told are local.
            allowed = ", ".join(sorted(self.allowed_webhook_hosts))
            raise ValueError(f"webhook_url host must be one of {allowed}")

    @property
    def auth_enabled(self) -> bool:
        return self.username is not None

    def webhook_retry_delays(self) -> list[float]:
        """Waits between successive attempts of one event POST (one fewer than attempts)."""
        delays: list[float] = []
        delay = self.webhook_first_retry_seconds
        for _ in range(self.webhook_max_attempts - 1):
            delays.append(min(delay, self.webhook_max_retry_seconds))
            delay *= self.webhook_backoff_factor
        return delays
