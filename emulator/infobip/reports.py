"""Delivery reports on their way out: pushed as JSON ``{"results": [...]}`` to the message's
``webhooks.delivery.url`` (or the account's subscription URL), or queued for ``GET /sms/3/reports``
when the message has no URL to push to.

Pushes are batched as Infobip documents: reports due for one URL within ``batch_window_ms`` travel
in one POST of at most ``max_bucket_size`` (Infobip's default 100). A POST the receiver does not
answer 2xx (or cannot be connected to) is retried on Infobip's documented schedule, 1 min +
1 min x n^2 for retry n = 0, 1, 2, ..., scaled by ``time_factor`` (the emulator's one stated
deviation), for ``report_max_retries`` retries (Infobip documents no end: UNCONFIRMED).

With ``webhook_basic_*`` configured every POST carries ``Authorization: Basic``, as a subscription's
BASIC security profile does; the HMAC profile's header is undocumented, so it is not emulated.
A report the pull API would also hand out after a push is UNCONFIRMED: Infobip offers the pull API
"if you are unable to receive real-time delivery reports", so here a report takes one route only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from emulator.background import BackgroundPoster
from emulator.infobip.config import InfobipConfig
from emulator.infobip.messages import InfobipStats, MessageRecord, MessageStore, ReportAttempt, ReportDelivery, now_utc


@dataclass
class _Item:
    record: MessageRecord
    delivery: ReportDelivery
    body: dict[str, Any]


@dataclass
class _Batch:
    items: list[_Item] = field(default_factory=list)


class ReportPoster(BackgroundPoster):
    """Routes, batches and posts one emulator's reports; owns the tasks that run its lifecycles too."""

    def __init__(self, config: InfobipConfig, store: MessageStore, stats: InfobipStats) -> None:
        super().__init__(config.report_timeout_seconds)
        self._config = config
        self._store = store
        self._stats = stats
        self._open: dict[str, _Batch] = {}
        self._headers = {"Content-Type": "application/json", "User-Agent": "herald-infobip-emulator"}
        if config.webhook_basic_username is not None and config.webhook_basic_password is not None:
            pair = f"{config.webhook_basic_username}:{config.webhook_basic_password}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")

    async def reset(self) -> None:
        self._open.clear()
        await self.cancel_all()

    def deliver(
        self, record: MessageRecord, body: dict[str, Any], *, copy: int = 1, alone: bool = False
    ) -> asyncio.Task[None] | None:
        """Send ``body`` (a report of ``record``) on its way; the task posting it when ``alone``
        (a POST of its own, not batched), else None."""
        url = record.report_url
        delivery = ReportDelivery(body["status"]["name"], copy, "pull" if url is None else "push")
        record.reports.append(delivery)
        if url is None:
            self._store.queue_report(record, delivery, now_utc())
            return None
        item = _Item(record, delivery, body)
        if alone or self._config.batch_window_ms == 0:
            return self.spawn(self._post([item], url), name=f"report-{record.message_id}")
        batch = self._open.get(url)
        if batch is None:
            batch = self._open[url] = _Batch()
            self.spawn(self._close_later(url, batch), name="report-batch-window")
        batch.items.append(item)
        if len(batch.items) >= self._config.max_bucket_size:
            self._close(url, batch)
        return None

    async def _close_later(self, url: str, batch: _Batch) -> None:
        await asyncio.sleep(self._config.batch_window_ms / 1000)
        self._close(url, batch)

    def _close(self, url: str, batch: _Batch) -> None:
        # A full batch closes at once; its window timer then finds it gone and does nothing.
        if self._open.get(url) is batch:
            del self._open[url]
            self.spawn(self._post(batch.items, url), name="report-batch")

    def _allowed(self, url: str) -> bool:
        try:
            return urlsplit(url).hostname in self._config.allowed_webhook_hosts
        except ValueError:
            return False

    async def _post(self, items: list[_Item], url: str) -> None:
        """POST one batch, retrying on the schedule until a 2xx or the retries run out."""
        size = len(items)
        if not self._allowed(url):
            # The emulator never posts beyond the hosts it was told are local: recorded, not sent.
            attempt = ReportAttempt(1, now_utc(), url, size, error="host not allowed (emulator posts to loopback only)")
            self._give_up(items, attempt)
            return
        content = json.dumps({"results": [item.body for item in items]}).encode("utf-8")
        delays = self._config.report_retry_delays()
        for number in range(1, len(delays) + 2):
            attempt = ReportAttempt(number, now_utc(), url, size)
            for item in items:
                item.delivery.attempts.append(attempt)
            self._stats.report_posts += 1
            started = time.monotonic()
            try:
                response = await self.post(url, content=content, headers=self._headers)
                attempt.http_status = response.status_code
            except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
                attempt.error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            attempt.duration_ms = round((time.monotonic() - started) * 1000, 1)
            if attempt.succeeded:
                self._stats.report_posts_succeeded += 1
                return
            self._stats.report_posts_failed += 1
            if number <= len(delays):
                await asyncio.sleep(delays[number - 1])
        self._give_up(items, None)

    def _give_up(self, items: list[_Item], attempt: ReportAttempt | None) -> None:
        for item in items:
            if attempt is not None:
                item.delivery.attempts.append(attempt)
            item.delivery.abandoned = True
        self._stats.reports_abandoned += len(items)
