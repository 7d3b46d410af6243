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
# The console's role (migration 022): SELECT on what operators read, never a personal column.
READER_ROLE = "herald_reader"
CONSOLE_LOGIN = "herald_console"
# The console's second role (migration 024): EXECUTE on open_sent_text, which records every opening.
OPENER_ROLE = "herald_text_opener"
OPENER_LOGIN = "herald_console_opener"


def app_database_url(owner_url: str, password: str, login: str = LOCAL_LOGIN) -> str:
    """The owner's connection with the application login and its password in place of the owner's."""
    return make_conninfo(owner_url, user=login, password=password)


def ensure_app_login(owner_url: str, password: str, login: str = LOCAL_LOGIN, role: str = APP_ROLE) -> str:
    """Make ``login`` a member of ``role`` (herald_app; herald_reader for the console) that logs in with
    ``password``; returns its connection string.

    The password is set on every call, so a stack whose state folder (where the password lives) was
    recreated still logs in. A server that trusts local sockets (the embedded one) ignores it; a
    real one given as DATABASE_URL asks for it.
    """
    with psycopg.connect(owner_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
        who, secret = sql.Identifier(login), sql.Literal(password)
        if exists:
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(who, secret))
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), who))
        else:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(who, secret, sql.Identifier(role)))
    return app_database_url(owner_url, password, login)
