"""Least privilege in the local stack: the state folder's secrets are 0600 from their first byte,
and the outbox relay connects as its own login, which may claim and mark outbox rows and nothing else.

The file tests write into a temporary state folder under a umask of 0, so a 0600 file proves the
mode came from the call that created it. The relay tests run on the session's real PostgreSQL:
the dev stack's service database, its relay login, and OutboxRelay's own statements.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import InsufficientPrivilege
from psycopg.types.json import Jsonb

from devstack.__main__ import _write_env_file
from devstack.config import OUTBOX_RELAY_LOGIN, StackConfig
from devstack.private_files import replace_private
from devstack.stack import LocalStack
from herald import outbox
from herald.intake.notice import NoticeRequest
from herald.ledger.store import open_pool
from herald.outbox.relay import OutboxRelay, backlog
from tests.intents import fresh_key, fresh_recipient

OWNER_URL = "postgresql://owner:owner-password@127.0.0.1:5432/herald"
SECRET_FILES = (
    "stack.env", "app-login-password", "outbox-relay-password", "codec-keys", "fingerprint-keys", "esp-signing-key.pem",
    "unsubscribe-keys", "key-encryption-keys", "infobip-webhook-keys", "console-login-password",
    "console-opener-login-password", "console-outbox-login-password",
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets every bit through: whatever mode a file gets is the one its creator asked for."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _make_every_secret(config: StackConfig) -> None:
    """What a run of the launcher writes into the state folder."""
    config.app_login_password()
    config.outbox_relay_password()
    config.console_login_password()
    config.console_opener_login_password()
    config.console_outbox_login_password()
    config.codec_key_file()
    config.fingerprint_key_file()
    config.key_encryption_key_file()
    config.infobip_webhook_settings()
    config.esp_public_key()
    stack = LocalStack(config, database_url=OWNER_URL)
    stack.database_url = OWNER_URL
    _write_env_file(stack)


def test_every_secret_in_the_state_folder_is_created_0600(tmp_path: Path, open_umask: None) -> None:
    """stack.env, every login password, every key file and the ESP signing key are 0600 under a umask of 0."""
    _make_every_secret(StackConfig(state_dir=tmp_path))
    assert {name: oct(_mode(tmp_path / name)) for name in SECRET_FILES} == {name: "0o600" for name in SECRET_FILES}
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no temporary left behind


def test_each_secret_file_is_0600_before_its_first_byte_is_written(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every secret file is created empty and already 0600, so no other user can open it in between."""
    seen: dict[str, tuple[int, int]] = {}
    real_fdopen = os.fdopen

    def watching_fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        status = os.fstat(fd)
        seen[os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))] = (stat.S_IMODE(status.st_mode), status.st_size)
        return real_fdopen(fd, *args, **kwargs)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name an open file")
    monkeypatch.setattr(os, "fdopen", watching_fdopen)
    _make_every_secret(StackConfig(state_dir=tmp_path))
    # stack.env is written to a mkstemp file (".stack.env.*") and renamed over the old one.
    named = {("stack.env" if name.startswith(".stack.env.") else name): state for name, state in seen.items()}
    assert named == {name: (0o600, 0) for name in SECRET_FILES}


def test_a_secret_file_left_world_readable_is_narrowed_and_kept(tmp_path: Path, open_umask: None) -> None:
    """Files an older launcher wrote 0644 come back 0600 on the next run, with the same passwords and keys."""
    config = StackConfig(state_dir=tmp_path)
    _make_every_secret(config)
    before = {name: (tmp_path / name).read_bytes() for name in SECRET_FILES}
    for name in SECRET_FILES:
        (tmp_path / name).chmod(0o644)
    _make_every_secret(config)
    assert {name: oct(_mode(tmp_path / name)) for name in SECRET_FILES} == {name: "0o600" for name in SECRET_FILES}
    assert {name: (tmp_path / name).read_bytes() for name in SECRET_FILES} == before


def test_rewriting_stack_env_replaces_a_readable_file_whole(tmp_path: Path, open_umask: None) -> None:
    """A world-readable stack.env is replaced by a 0600 file with the new text, not rewritten in place."""
    path = tmp_path / "stack.env"
    path.write_text("HERALD_TWILIO_AUTH_TOKEN=old\n")
    path.chmod(0o644)
    old_inode = path.stat().st_ino
    replace_private(path, b"HERALD_TWILIO_AUTH_TOKEN=new\n")
    assert _mode(path) == 0o600 and path.read_text() == "HERALD_TWILIO_AUTH_TOKEN=new\n"
    assert path.stat().st_ino != old_inode  # whoever held the old file open keeps the old text, not the new


# ---- the outbox relay's login ------------------------------------------------------------------


@pytest.fixture(scope="module")
def service_database(stack: LocalStack) -> tuple[str, str]:
    """The dev stack's demo service database on the session's server: (the service's URL, the relay's URL)."""
    service_url = stack.create_service_database()
    assert stack.database_url is not None
    relay_url = stack.config.service_env(stack.database_url)["HERALD_OUTBOX_DATABASE_URL"]
    return service_url, relay_url


def _notice(key: str) -> dict[str, Any]:
    return {"business_key": key, "channels": [{
        "channel": "sms", "recipient": fresh_recipient(), "template_id": "order_receipt", "template_version": 1,
        "render_data": {"order_ref": "ord_1", "amount": "1.00", "currency": "EUR", "merchant": "Herald Shop"},
    }]}  # fmt: skip


class _StartsAll:
    """Stands in for HeraldClient.send_notice: the relay's database work is what is under test here."""

    def __init__(self, unreachable_key: str) -> None:
        self.started: list[str] = []
        self._unreachable_key = unreachable_key

    async def send_notice(self, notice: NoticeRequest) -> None:
        if notice.business_key == self._unreachable_key:
            raise OSError("the cluster is away")
        self.started.append(notice.business_key)


def test_the_relay_connects_as_its_own_login(service_database: tuple[str, str]) -> None:
    """The stack hands the relay its own login, not the owner's, with its password from the state folder."""
    service_url, relay_url = service_database
    relay = conninfo_to_dict(relay_url)
    assert relay["user"] == OUTBOX_RELAY_LOGIN != conninfo_to_dict(service_url).get("user")
    assert relay["dbname"] == conninfo_to_dict(service_url)["dbname"]
    with psycopg.connect(relay_url) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row == (False, False, False)


async def test_the_relay_login_claims_marks_and_is_woken(service_database: tuple[str, str]) -> None:
    """As its login the relay hears the service's NOTIFY, claims due rows, marks them relayed, refused
    or due again, and counts the backlog."""
    service_url, relay_url = service_database
    relayed, retried, refused = fresh_key(), fresh_key(), fresh_key()
    async with await psycopg.AsyncConnection.connect(relay_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {outbox.CHANNEL}")
        async with await psycopg.AsyncConnection.connect(service_url) as service, service.transaction():
            await outbox.enqueue(service, _notice(relayed))
            await outbox.enqueue(service, _notice(retried))
            # A row that skipped enqueue's validation: the relay must be able to mark it refused.
            await service.execute(
                "INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s)",
                (refused, Jsonb({"business_key": refused})),
            )
        await asyncio.wait_for(anext(listener.notifies()), 10)
    herald = _StartsAll(unreachable_key=retried)
    async with open_pool(relay_url, max_size=2) as pool:
        done = await OutboxRelay(pool, herald).relay_once()  # type: ignore[arg-type]
        assert (done.relayed, done.retrying, done.refused) == (1, 1, 1)
        assert herald.started == [relayed]
        assert (await backlog(pool)).pending >= 1
    async with await psycopg.AsyncConnection.connect(service_url) as service:
        cursor = await service.execute(
            "SELECT business_key, state, tries, last_error IS NOT NULL FROM herald_outbox WHERE business_key = ANY(%s)",
            ([relayed, retried, refused],),
        )
        states = {key: (state, tries, has_error) for key, state, tries, has_error in await cursor.fetchall()}
    assert states == {relayed: ("relayed", 1, False), retried: ("pending", 1, True), refused: ("refused", 1, True)}


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM herald_outbox",
        "TRUNCATE herald_outbox",
        "ALTER TABLE herald_outbox DISABLE TRIGGER herald_outbox_notify",
        "ALTER TABLE herald_outbox ADD COLUMN note text",
        "DROP TABLE herald_outbox",
        "INSERT INTO herald_outbox (business_key, notice) VALUES ('order_receipt:forged', '{}')",
        "UPDATE herald_outbox SET notice = '{}'",
        "UPDATE herald_outbox SET business_key = 'order_receipt:forged'",
        "SELECT * FROM payments",
        "UPDATE payments SET amount = '0'",
        "CREATE TABLE relay_scratch (id int)",
        "SELECT nextval('herald_outbox_id_seq')",
    ],
)
def test_the_relay_login_may_not_delete_alter_or_read_beyond_the_outbox(
    service_database: tuple[str, str], statement: str
) -> None:
    """Each statement outside the relay's claim and mark is refused to its login for lack of privilege."""
    _, relay_url = service_database
    with psycopg.connect(relay_url, autocommit=True) as conn, pytest.raises(InsufficientPrivilege):
        conn.execute(statement)  # type: ignore[arg-type]
