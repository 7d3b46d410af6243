"""Which pooled connections are checked before they are lent.

A connection broken by a database restart should be replaced when it is lent, not fail the
activity or request that drew it; psycopg_pool's check does that with one round trip per loan.
Under load that round trip is paid on every loan (about six per SMS) although a connection
returned a moment ago has just proved it works. So only a connection that has sat idle for
longer than ``fresh_seconds`` is checked: a restart takes longer than that (stop, recovery from
the WAL, start), so every connection that lived through one has been idle long enough to be
checked. Should a connection still break between its return and its next use, the use fails
with a database error, which every caller already turns into a retry (the submit's "not sent",
the receipt route's 503, the ledger activity's retry policy).
"""

from __future__ import annotations

import time
import weakref

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

DEFAULT_FRESH_SECONDS = 1.0


class CheckIfIdle:
    """The pool's ``check`` and ``reset`` callbacks: remember each return, check only stale loans."""

    def __init__(self, fresh_seconds: float = DEFAULT_FRESH_SECONDS) -> None:
        self._fresh_seconds = fresh_seconds
        self._returned_at: weakref.WeakKeyDictionary[AsyncConnection, float] = weakref.WeakKeyDictionary()
        self.checks = 0  # round trips spent on checks: how the tests see a loan was not checked

    async def check(self, conn: AsyncConnection) -> None:
        returned_at = self._returned_at.get(conn)
        if returned_at is not None and time.monotonic() - returned_at < self._fresh_seconds:
            return
        self.checks += 1
        await AsyncConnectionPool.check_connection(conn)

    async def reset(self, conn: AsyncConnection) -> None:
        # Called by the pool when a connection comes back in a good state (a broken one is discarded).
        self._returned_at[conn] = time.monotonic()
