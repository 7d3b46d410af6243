"""Keys written before migration 020, and KEK rotation: re-wrapped by the ledger's owner, never written
in the clear by the services (herald/ledger/rewrap_keys.py, migration 020).

A database of the test's own, migrated to 018 with data keys in the clear as the old release wrote
them, then to 020: those rows keep opening their `sealed:1:` tokens, `python -m herald.jobs.rewrap_keys`
wraps them under the active KEK (and rows under an older KEK too), and afterwards the clear key is
gone from the row while every token still opens.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from devstack.stack import LocalStack
from herald.ledger.migrate import apply_migrations, migration_files
from herald.ledger.store import open_pool
from herald.privacy.key_encryption import LocalKeks
from herald.privacy.recipient_vault import LEGACY_PREFIX, RecipientVault
from herald.settings import REPO_ROOT
from tests.stack import create_database

OLD_KEK, NEW_KEK = os.urandom(32), os.urandom(32)


async def _migrated_to_018_with_clear_keys(server_url: str) -> tuple[str, dict[str, bytes]]:
    """A new ledger as the release before 020 left it: two people's data keys in the clear."""
    url = await create_database(server_url, "rewrap")
    keys = {"fp:legacy-1": os.urandom(32), "fp:legacy-2": os.urandom(32)}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as owner:
        await owner.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, sql in migration_files():
            if version <= 18:
                await owner.execute(sql)
                await owner.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name))
        for fingerprint, key in keys.items():
            await owner.execute(
                "INSERT INTO recipient_keys (recipient_fingerprint, data_key) VALUES (%s, %s)", (fingerprint, key)
            )
    return url, keys


def _v1_token(fingerprint: str, key: bytes, value: str) -> str:
    """A token as the release before key ids sealed it."""
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, value.encode(), f"{fingerprint}|recipient".encode())
    return f"{LEGACY_PREFIX}{fingerprint}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"


async def test_keys_from_before_020_open_then_are_rewrapped_and_a_kek_rotation_moves_every_row(
    stack: LocalStack, settings: Any, tmp_path: Path
) -> None:
    """After 020, clear keys get `v1.` ids and their sealed:1 tokens open; the re-wrap command (owner)
    wraps them and a row under the old KEK under the new one; every token still opens, no row holds a
    clear key, and the services' login may not write one."""
    url, keys = await _migrated_to_018_with_clear_keys(stack.database_url)
    await apply_migrations(url)
    tokens = {fingerprint: _v1_token(fingerprint, key, f"+1555290{index:04d}") for index, (fingerprint, key)
              in enumerate(keys.items())}  # fmt: skip
    old_keks = LocalKeks({"kek-old": OLD_KEK}, "kek-old")
    async with open_pool(url, max_size=2) as pool:
        vault = RecipientVault(pool, old_keks)
        for fingerprint, token in tokens.items():
            assert (await vault.open(token, "recipient")).startswith("+1555290")
        async with pool.connection() as conn:
            ids = [row[0] for row in await (await conn.execute("SELECT key_id FROM recipient_keys")).fetchall()]
        assert len(ids) == 2 and all(key_id.startswith("v1.") for key_id in ids)
        # A person sealed for under the old KEK, before the rotation.
        from_before = await vault._sealing_key("fp:wrapped-old")

        files = tmp_path / "keks"
        files.write_text(f"kek-old:{base64.b64encode(OLD_KEK).decode()}\nkek-new:{base64.b64encode(NEW_KEK).decode()}\n")
        env = {**os.environ, "HERALD_MIGRATION_DATABASE_URL": url, "DATABASE_URL": url,
               "HERALD_KEY_ENCRYPTION_KEY_FILES": str(files), "HERALD_KEY_ENCRYPTION_ACTIVE_KEY": "kek-new"}  # fmt: skip
        ran = subprocess.run([sys.executable, "-m", "herald.jobs.rewrap_keys"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith("re-wrapped 2 data key(s) held in the clear and 1 wrapped under an older")

        async with pool.connection() as conn:
            rows = await (await conn.execute("SELECT data_key, kek_id FROM recipient_keys")).fetchall()
        assert rows and all(clear is None and kek_id == "kek-new" for clear, kek_id in rows)
        after = RecipientVault(pool, LocalKeks({"kek-new": NEW_KEK}, "kek-new"))  # the old KEK retired
        for token in tokens.values():
            assert (await after.open(token, "recipient")).startswith("+1555290")
        assert await after._sealing_key("fp:wrapped-old") == from_before

    app_url = make_conninfo(settings.database_url.get_secret_value(), dbname=conninfo_to_dict(url)["dbname"])
    async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as app:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await app.execute(
                "INSERT INTO recipient_keys (recipient_fingerprint, key_id, data_key) VALUES ('fp:x', 'k', %s)",
                (os.urandom(32),),
            )
