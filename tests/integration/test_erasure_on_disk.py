"""Erasure and the database's own files (issue 29): what `erase` leaves on disk, and why a copy of the
ledger alone opens nothing.

The review found an erased person's number and their deleted data key in PostgreSQL's heap, index
and WAL files, after VACUUM and CHECKPOINT too: a base backup or a WAL archive would open every
sealed payload of theirs. Now the data key is wrapped under a key-encryption key the database never
holds. This test measures, on the session's embedded PostgreSQL, where the person's number, an
order reference of theirs (in the body and render data), the raw data key and the wrapped key occur
in the data directory's files (tables, indexes, WAL) after the send, after the erasure, after VACUUM,
after the WAL moved on and after VACUUM FULL, each followed by a CHECKPOINT; it prints the table the
README states, and proves that the raw data key is in none of the files at any step, and that the
rows of recipient_keys (all a pg_dump holds of them) open no token without the KEK.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.lifecycle import IntentState
from herald.intake.requests import build_intent, parse_request
from herald.ledger.privacy import erase_recipient
from herald.privacy.key_encryption import KeyUnavailable, LocalKeks
from herald.privacy.recipient_vault import KeyRow, RecipientVault, wrap_context
from tests.intents import fresh_key, fresh_recipient, receipt_request
from tests.keys import SESSION_KEKS, SESSION_KEYRING

WAIT = 60
KINDS = ("table", "index", "wal")


async def _data_directory(owner: psycopg.AsyncConnection, stack: LocalStack) -> Path:
    """The server's data directory, when this process can read it (the embedded server's); else skip."""
    found = Path(str((await (await owner.execute("SHOW data_directory")).fetchone())[0]))  # type: ignore[index]
    if not (found / "PG_VERSION").exists():
        pytest.skip("the ledger's PostgreSQL runs elsewhere (DATABASE_URL): its files are not readable here")
    return found


async def _kinds(owner: psycopg.AsyncConnection) -> dict[str, str]:
    """Each relation file of this database (relative to the data directory) as table or index."""
    cursor = await owner.execute(
        "SELECT pg_relation_filepath(oid), relkind FROM pg_class WHERE relkind IN ('r', 't', 'i', 'm')"
        " AND pg_relation_filepath(oid) IS NOT NULL"
    )
    return {path: "index" if kind == "i" else "table" for path, kind in await cursor.fetchall()}


def _count(data_dir: Path, kinds: dict[str, str], needles: dict[str, bytes]) -> dict[str, Counter[str]]:
    """For each needle, how many times it occurs in table files, index files and WAL segments."""
    found = {name: Counter[str]() for name in needles}
    for root, _, files in os.walk(data_dir):
        for name in files:
            path = Path(root) / name
            relative = str(path.relative_to(data_dir))
            if relative.startswith("pg_wal/"):
                kind = "wal"
            else:
                # Segments (.1, .2) and the free-space and visibility maps belong to their relation.
                kind = kinds.get(relative.split(".")[0].removesuffix("_fsm").removesuffix("_vm"), "other")
            try:
                content = path.read_bytes()
            except OSError:
                continue  # a file removed while walking (a recycled segment, a temporary file)
            for needle, value in needles.items():
                hits = content.count(value)
                if hits:
                    found[needle][kind] += hits
    return found


async def test_erasure_on_disk_the_raw_data_key_is_never_in_the_ledgers_files_and_the_rows_alone_open_nothing(
    herald: HeraldClient, pool: AsyncConnectionPool, stack: LocalStack, settings: Any
) -> None:
    """Measured after each step (send, erase, VACUUM, WAL switched and recycled, VACUUM FULL; a CHECKPOINT
    after each): the raw data key occurs in no table, index or WAL file; the recipient_keys rows, read
    whole as a dump would, open no token without the KEK; the number stays in the WAL after the erasure."""
    to, key, ref = fresh_recipient(), fresh_key(), f"ord-{os.urandom(4).hex()}"
    data = {"order_ref": ref, "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    await herald.send(receipt_request(key, to, render_data=data))
    assert (await asyncio.wait_for(herald.wait(key), WAIT)).state is IntentState.DELIVERED
    fingerprint = SESSION_KEYRING.recipient(to)
    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as owner:
        data_dir = await _data_directory(owner, stack)
        cursor = await owner.execute(
            "SELECT key_id, data_key, wrapped_key, kek_id FROM recipient_keys WHERE recipient_fingerprint = %s",
            (fingerprint,),
        )
        [(key_id, clear, wrapped, kek_id)] = await cursor.fetchall()
        # Every row as a dump holds them, and a stranger's KEK under the same id: nothing opens.
        query = "SELECT recipient_fingerprint, key_id, data_key, wrapped_key, kek_id FROM recipient_keys"
        dumped = await (await owner.execute(query)).fetchall()
        assert all(row[2] is None for row in dumped), "a data key in the clear"
        another = build_intent(
            parse_request(receipt_request(fresh_key(), to, render_data=data)), datetime.now(UTC), SESSION_KEYRING
        )
        sealed = await RecipientVault(pool, SESSION_KEKS).seal_intent(another)
        stranger = LocalKeks({kek_id: os.urandom(32)}, kek_id)
        with pytest.raises(KeyUnavailable):
            await RecipientVault(pool, stranger, rows=_Dumped(dumped)).open(sealed.message.recipient, "recipient")
        assert (
            await RecipientVault(pool, SESSION_KEKS, rows=_Dumped(dumped)).open(sealed.message.recipient, "recipient") == to
        )  # with it
        assert clear is None
        raw_key = await SESSION_KEKS.unwrap(kek_id, bytes(wrapped), wrap_context(fingerprint, key_id))
        needles = {"number": to.encode(), "order ref": ref.encode(), "raw data key": raw_key, "wrapped key": bytes(wrapped)}

        table: list[tuple[str, dict[str, Counter[str]]]] = []

        async def measure(step: str) -> dict[str, Counter[str]]:
            await owner.execute("CHECKPOINT")
            counts = await asyncio.to_thread(_count, data_dir, await _kinds(owner), needles)
            table.append((step, counts))
            return counts

        sent = await measure("sent (delivered)")
        await erase_recipient(pool, recipient=to, operator="dpo", reason="on-disk measurement", keyring=SESSION_KEYRING)
        erased = await measure("erase")
        await owner.execute("VACUUM intents, recipient_keys")
        await measure("VACUUM")
        for _ in range(3):  # the WAL moves on: new segments, two checkpoints recycle the old ones
            await owner.execute("SELECT pg_switch_wal()")
            await owner.execute("CHECKPOINT")
        await measure("WAL switched, 2 checkpoints")
        await owner.execute("VACUUM FULL intents, recipient_keys")
        await measure("VACUUM FULL")

    print("\nstep | " + " | ".join(f"{needle}: table/index/wal" for needle in needles))
    for step, counts in table:
        print(f"{step} | " + " | ".join("/".join(str(counts[n][kind]) for kind in KINDS) for n in needles))
    assert all(sum(counts["raw data key"].values()) == 0 for _, counts in table), table
    assert sent["number"]["table"] > 0 and erased["number"]["wal"] > 0  # the plaintext's own copies: README


class _Dumped:
    """recipient_keys as a dump of it holds them: the rows, and nothing else."""

    def __init__(self, dumped: list[tuple[Any, ...]]) -> None:
        self._rows = {
            fingerprint: KeyRow(key_id, None if clear is None else bytes(clear), bytes(wrapped), kek_id)
            for fingerprint, key_id, clear, wrapped, kek_id in dumped
        }

    async def read(self, fingerprint: str, *, timeout: float | None = None) -> KeyRow | None:
        return self._rows.get(fingerprint)

    async def create(self, fingerprint: str, row: KeyRow) -> KeyRow | None:
        raise AssertionError("a dump is read, never written")
