"""The role the application connects as: a login that is a member of herald_app (migration 012).

herald_app may SELECT and INSERT on the audit tables and nothing else, so no bug, hand-typed
statement or stolen application credential can truncate the ledger or switch its triggers off.
Production creates the login once, as an administrator (README, "Running in production"); the
local stack and the tests create it here, from the owner's connection that ran the migrations.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

APP_ROLE = "herald_app"
LOCAL_LOGIN = "herald_service"


def app_database_url(owner_url: str, login: str = LOCAL_LOGIN) -> str:
    """The owner's connection with the application login as its user (the local stack's servers
    trust local connections, so the login needs no password)."""
    return make_conninfo(owner_url, user=login)


def ensure_app_login(owner_url: str, login: str = LOCAL_LOGIN) -> str:
    """Create ``login`` (a member of herald_app, no password: for servers that trust local sockets)
    unless it exists; returns its connection string."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(sql.Identifier(login), sql.Identifier(APP_ROLE)))
    return app_database_url(owner_url, login)
