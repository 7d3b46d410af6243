"""Routing committed reports to their workflows, each route within its own share of the pool.

A report reaches this module only after its inbox row has committed and (for the direct path)
after its provider has been answered; routing is an optimisation over the drainer, never the
only way a report reaches its workflow. So everything here may be bounded, deferred or dropped
without losing a report: whatever is not signalled now is offered by the drainer later
(``VERDICT_GRACE_SECONDS`` after it was received, or on its redelivery schedule).

Each receipt route (Twilio's callbacks, SendGrid's posts) has its own ``ReportRouter``, and what
one router does cannot hold up the other:

- **connections**: at most ``concurrency`` deliveries of a router run at once, each holding at
  most one pooled connection at a time (``deliver`` takes its connections one after another).
  Deliveries beyond that wait on the router's own semaphore, never in the pool's queue, so a
  5,000-report post waits behind itself and never in front of a Twilio callback's store.
- **memory**: a router holds at most ``max_backlog`` reports (queued or held); a post that would
  pass it is left whole to the drainer, with one log line.
- **the event loop**: every delivery awaits the database, so a post's routing is a sequence of
  short steps between which the loop serves other requests.
- **logs**: one pass (a post, a callback, a hold's release) logs one line for all its failures,
  with their count and kinds, and no traceback for an operational error (a database, pool,
  network or Temporal error). An unexpected error's traceback is logged once per pass, for the
  first report it hit; the rest are counted.

A non-final report waits ``hold_seconds`` for its attempt's final report and travels in the same
signal (one billed Temporal action instead of two); the reports of one attempt in one pass always
travel together. Holding is per process: a held report lost with its process is offered by the
drainer, as the README says.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from psycopg import Error as DatabaseError
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from temporalio.client import Client
from temporalio.service import RPCError

from herald.receipts.delivery import StoredReport, deliver

log = logging.getLogger("herald.receipts")

# Errors that say the ledger or Temporal could not be reached, not that our code is wrong: their
# kind and count are the whole story, and a traceback per report would be the same one thousands
# of times (issue 21: 3,718 identical pool timeouts in 69,513 log lines for one post).
OPERATIONAL_ERRORS = (DatabaseError, PoolTimeout, OSError, TimeoutError, RPCError)


def error_kind(error: BaseException) -> str:
    """What went wrong, without the error's text: a database message can quote the values it refused."""
    sqlstate = getattr(error, "sqlstate", None)
    return type(error).__name__ + (f" SQLSTATE {sqlstate}" if sqlstate else "")


@dataclass
class FailureTally:
    """The failures of one pass over many reports, logged as one line when the pass ends."""

    what: str  # what the pass was, for the log line: "routing 5000 sendgrid reports"
    reports: int = 0
    failed: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    inbox_ids: list[int] = field(default_factory=list)  # of the failed reports, for an operator
    _traced: bool = False

    def record(self, error: BaseException, reports: Iterable[StoredReport]) -> None:
        ids = [report.inbox_id for report in reports]
        self.failed += len(ids)
        self.kinds[error_kind(error)] += len(ids)
        self.inbox_ids.extend(ids)
        if not isinstance(error, OPERATIONAL_ERRORS) and not self._traced:
            # Our own bug, not an outage: its traceback once, so it can be found and fixed.
            self._traced = True
            log.error("%s: unexpected %s (traceback once per pass)", self.what, error_kind(error), exc_info=error)

    def log(self, *, then: str) -> None:
        """One line for every failure of the pass, or none when nothing failed."""
        if not self.failed:
            return
        kinds = ", ".join(f"{count} {kind}" for kind, count in self.kinds.most_common())
        log.warning(
            "%s: %d of %d reports failed (%s), inbox ids %d to %d; %s",
            self.what, self.failed, self.reports, kinds, min(self.inbox_ids), max(self.inbox_ids), then,
        )  # fmt: skip


@dataclass
class _Held:
    reports: list[StoredReport]
    due: float  # loop time at which the hold ends


class ReportRouter:
    """Signals one route's committed reports to their workflows, in that route's share of the pool."""

    def __init__(
        self,
        *,
        route: str,
        pool: AsyncConnectionPool,
        client: Client,
        hold_seconds: float,
        concurrency: int,
        max_backlog: int,
    ) -> None:
        self._route = route
        self._pool = pool
        self._client = client
        self._hold_seconds = hold_seconds
        self._concurrency = concurrency
        self._max_backlog = max_backlog
        self._slots = asyncio.Semaphore(concurrency)
        self._held: dict[str, _Held] = {}
        self._backlog = 0  # reports admitted and not yet delivered or abandoned
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def backlog(self) -> int:
        """Reports admitted and not yet routed (queued or held)."""
        return self._backlog

    async def route(self, reports: list[StoredReport]) -> None:
        """Start routing one pass's reports in the background and return at once.

        Returning at once matters: as a response's background task this would otherwise keep the
        provider's kept-alive connection from its next request until every report was signalled.
        """
        # Each inbox row once: a post may repeat an event, and both copies find the same row.
        reports = list({report.inbox_id: report for report in reports}.values())
        if not reports:
            return
        if self._backlog + len(reports) > self._max_backlog:
            log.warning(
                "routing %s: %d reports already waiting (limit %d); %d committed reports left to the drainer",
                self._route, self._backlog, self._max_backlog, len(reports),
            )  # fmt: skip
            return
        self._backlog += len(reports)
        self._spawn(self._route_pass(reports))

    async def close(self, grace_seconds: float = 0.0) -> None:
        """Stop routing, after letting what is under way finish for up to ``grace_seconds``: whatever
        was not signalled by then is committed, and the drainer offers it."""
        deadline = asyncio.get_running_loop().time() + grace_seconds
        # A pass may start another (its hold's release), so wait until none is left.
        while self._tasks and (left := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.wait(list(self._tasks), timeout=left)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._held.clear()
        self._backlog = 0

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("routing %s stopped by an unexpected error", self._route, exc_info=task.exception())

    async def _route_pass(self, reports: list[StoredReport]) -> None:
        tally = FailureTally(f"routing {len(reports)} {self._route} reports", reports=len(reports))
        now = asyncio.get_running_loop().time()
        ready: list[list[StoredReport]] = []
        newly_held: list[str] = []
        for ref, group in _by_attempt(reports):
            if ref is None or self._hold_seconds <= 0:
                ready.append(group)
            elif any(report.is_final for report in group):
                held = self._held.pop(ref, None)
                ready.append([*(held.reports if held else []), *group])
            elif ref in self._held:
                self._held[ref].reports.extend(group)  # travels with the earlier hold's release
            else:
                self._held[ref] = _Held(group, now + self._hold_seconds)
                newly_held.append(ref)
        if newly_held:
            self._spawn(self._release_after_hold(newly_held))
        await self._deliver_all(ready, tally)
        tally.log(then="left for the drainer")

    async def _release_after_hold(self, refs: list[str]) -> None:
        """One timer for every attempt a pass held: after the hold, signal those still held."""
        await asyncio.sleep(self._hold_seconds)
        now = asyncio.get_running_loop().time()
        due: list[list[StoredReport]] = []
        for ref in refs:
            held = self._held.get(ref)
            # Gone: its final report took it. Not due: released, then held again by a later pass,
            # whose own timer releases it.
            if held is not None and held.due <= now:
                del self._held[ref]
                due.append(held.reports)
        released = sum(map(len, due))
        tally = FailureTally(f"releasing {released} held {self._route} reports", reports=released)
        await self._deliver_all(due, tally)
        tally.log(then="left for the drainer")

    async def _deliver_all(self, groups: list[list[StoredReport]], tally: FailureTally) -> None:
        """Deliver each attempt's reports, at most ``concurrency`` at once across the whole router."""
        pending = iter(groups)
        await asyncio.gather(*(self._deliver_from(pending, tally) for _ in range(min(self._concurrency, len(groups)))))

    async def _deliver_from(self, pending: Iterator[list[StoredReport]], tally: FailureTally) -> None:
        for group in pending:
            try:
                async with self._slots:
                    await deliver(self._pool, self._client, group, first_delivery=True)
            except Exception as error:  # noqa: BLE001 - counted and logged once per pass; the drainer offers them again
                tally.record(error, group)
            finally:
                self._backlog -= len(group)


def _by_attempt(reports: list[StoredReport]) -> Iterator[tuple[str | None, list[StoredReport]]]:
    """The reports grouped by attempt in first-seen order, non-final reports first within an
    attempt; a report without an attempt stands alone."""
    groups: dict[str, list[StoredReport]] = {}
    for report in reports:
        if report.attempt_ref is None:
            yield None, [report]
        else:
            groups.setdefault(report.attempt_ref, []).append(report)
    for ref, group in groups.items():
        yield ref, sorted(group, key=lambda report: report.is_final)
