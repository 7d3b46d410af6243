"""Reaching a dependency once, at start: one line naming the setting when it does not answer.

A process that starts without its database or Temporal would fail later, as a pool's retries in a
log or a traceback at its first call. So each asks once, bounded, before anything else
(``reach_database``, ``connect_temporal``), and a dependency that does not answer is
``ServiceUnreachable``, whose message names the variable that points at it and the operating
system's or libpq's reason (never a password). A setting that cannot work (a URL PostgreSQL cannot
parse, a Temporal address without a port) is refused before anything is connected to, as
``InvalidSetting``.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from temporalio.client import Client

from herald.settings import InvalidSetting, TemporalSettings
from herald.temporal_client import connect

# A database that has not answered in this long is reported as unreachable (libpq's connect_timeout).
DATABASE_CONNECT_TIMEOUT_SECONDS = 5


class ServiceUnreachable(Exception):
    """A service the process needs did not answer; the message names the setting that points at it."""


def database_url(variable: str, url: str) -> str:
    """`url` if PostgreSQL can parse it; the refusal never repeats it (it may carry a password)."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise InvalidSetting(
            variable, "must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"
        ) from None
    return url


async def reach_database(url: str, variable: str = "DATABASE_URL") -> None:
    """One direct connection to `url`, closed at once, or ServiceUnreachable naming `variable`.

    A pool would retry in the background until its own timeout and log every try; this fails once,
    with libpq's reason (host and port, never the password), within the connect timeout even when
    the server accepts the connection and then says nothing.
    """
    database_url(variable, url)
    options = (
        {} if "connect_timeout" in conninfo_to_dict(url) else {"connect_timeout": DATABASE_CONNECT_TIMEOUT_SECONDS}
    )
    try:
        probe = await psycopg.AsyncConnection.connect(url, **options)
    except psycopg.OperationalError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ServiceUnreachable(f"cannot reach the database at {variable}: {reason}") from None
    await probe.close()


def check_temporal(settings: TemporalSettings) -> None:
    """Refuse a Temporal address that cannot work, without connecting: one from a Temporal profile
    is not read by Herald's own rule (HERALD_TEMPORAL_ADDRESS's, and the TLS files', are, at load)."""
    host, _, port = settings.address.rpartition(":")
    if not (host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65_535):
        raise InvalidSetting(
            "HERALD_TEMPORAL_ADDRESS", "must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"
        )


async def connect_temporal(settings: TemporalSettings, **options: Any) -> Client:
    """A client (`options` as `herald.temporal_client.connect` takes them); a server that does not
    answer is ServiceUnreachable naming HERALD_TEMPORAL_ADDRESS, with the operating system's reason."""
    try:
        return await connect(settings, **options)
    except RuntimeError as error:  # the bridge reports a failed connect as RuntimeError
        raise ServiceUnreachable(
            f"cannot reach Temporal at {settings.address} (HERALD_TEMPORAL_ADDRESS): {_connect_failure(error)}"
        ) from None


def _connect_failure(error: RuntimeError) -> str:
    """The operating system's reason from the bridge's connect error ("Connection refused"), else its text."""
    found = re.findall(r'message: "([^"]+)"', str(error))
    return found[-1] if found else str(error).removeprefix("Failed client connect: ")
