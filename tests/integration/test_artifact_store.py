"""Artifacts in the real PostgreSQL of the test stack: stored once by content, never rewritten, and a row
tampered behind the trigger's back is caught by verify before anything is sent."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.core.artifacts import ArtifactMismatch, ArtifactRef, verify
from herald.ledger.artifacts import PostgresArtifactStore
from tests import reads

REPO_ROOT = Path(__file__).resolve().parents[2]


def fresh_content() -> bytes:
    """Bytes no other test (or earlier run against the same database) has stored."""
    return b"%PDF-1.7 report " + secrets.token_bytes(4096)


async def test_put_then_load_returns_the_same_bytes_and_ref(pool: AsyncConnectionPool) -> None:
    """What load returns is byte for byte what put stored, under the ref put returned."""
    store = PostgresArtifactStore(pool)
    content = fresh_content()
    ref = await store.put(content, media_type="application/pdf", filename="report-2026-01.pdf")
    assert ref == ArtifactRef(
        sha256=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
        media_type="application/pdf",
        filename="report-2026-01.pdf",
    )
    loaded = await store.load(ref.sha256)
    assert loaded is not None and loaded.ref == ref and loaded.content == content
    assert verify(loaded, ref) == content


async def test_load_of_unknown_content_is_none(pool: AsyncConnectionPool) -> None:
    """An artifact never stored loads as None, and verify refuses it."""
    missing = hashlib.sha256(fresh_content()).hexdigest()
    loaded = await PostgresArtifactStore(pool).load(missing)
    assert loaded is None
    with pytest.raises(ArtifactMismatch, match="not in the store"):
        verify(loaded, ArtifactRef(sha256=missing, size_bytes=1, media_type="text/plain", filename="x.txt"))


async def test_the_same_bytes_stored_twice_are_one_row_under_the_first_name(pool: AsyncConnectionPool) -> None:
    """A second put of the same content inserts nothing and returns the first put's media type and filename."""
    store = PostgresArtifactStore(pool)
    content = fresh_content()
    first = await store.put(content, media_type="application/pdf", filename="january.pdf")
    second = await store.put(content, media_type="application/octet-stream", filename="february.bin")
    assert second == first
    assert await reads.tuples(pool, "SELECT count(*) FROM artifacts WHERE sha256 = %s", first.sha256) == [(1,)]


async def test_update_and_delete_are_refused_by_the_trigger(pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool) -> None:
    """The table is append-only at the database, like every ledger audit table: even its owner is refused."""
    ref = await PostgresArtifactStore(pool).put(fresh_content(), media_type="application/pdf", filename="r.pdf")
    for statement in (
        "UPDATE artifacts SET filename = 'other.pdf' WHERE sha256 = %s",
        "DELETE FROM artifacts WHERE sha256 = %s",
    ):
        async with owner_pool.connection() as conn:
            with pytest.raises(psycopg.errors.RaiseException, match="ledger table artifacts is append-only"):
                await conn.execute(statement, (ref.sha256,))
    assert await reads.tuples(pool, "SELECT filename FROM artifacts WHERE sha256 = %s", ref.sha256) == [("r.pdf",)]


async def test_a_row_tampered_behind_the_trigger_is_caught_by_verify(pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool) -> None:
    """The table's owner, who can disable the trigger, swaps the bytes: caught when the bytes are checked."""
    store = PostgresArtifactStore(pool)
    content = fresh_content()
    ref = await store.put(content, media_type="application/pdf", filename="invoice.pdf")
    forged = content[:-8] + b"FORGED!!"  # the same length: the size constraint cannot see it, only the hash
    # One transaction: the trigger is off for no other session, and back on at commit.
    async with owner_pool.connection() as conn, conn.transaction():
        await conn.execute("ALTER TABLE artifacts DISABLE TRIGGER ALL")
        await conn.execute("UPDATE artifacts SET content = %b WHERE sha256 = %s", (forged, ref.sha256))
        await conn.execute("ALTER TABLE artifacts ENABLE TRIGGER ALL")

    loaded = await store.load(ref.sha256)
    assert loaded is not None and loaded.content == forged and loaded.ref == ref
    with pytest.raises(ArtifactMismatch, match=r"\(tampered or replaced\)") as caught:
        verify(loaded, ref)
    assert f"the intent names {ref.sha256[:12]}…" in str(caught.value)
    assert "FORGED" not in str(caught.value)


async def test_a_tampered_row_cannot_change_the_size_it_claims(pool: AsyncConnectionPool, owner_pool: AsyncConnectionPool) -> None:
    """With the trigger disabled (by the owner), bytes of another length are still refused: the row's size is its content's size."""
    ref = await PostgresArtifactStore(pool).put(fresh_content(), media_type="application/pdf", filename="r.pdf")
    async with owner_pool.connection() as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="artifacts_size_is_content_size"):
            async with conn.transaction():
                await conn.execute("ALTER TABLE artifacts DISABLE TRIGGER ALL")
                await conn.execute("UPDATE artifacts SET content = %b WHERE sha256 = %s", (b"short", ref.sha256))


def run_starter(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "starter.py", *args],
        check=False,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_starter_artifact_put_prints_the_ref_of_the_file(stack: Any, tmp_path: Path) -> None:
    """`starter.py artifact put FILE` stores the file and prints its ref, whose sha256 is the file's."""
    report = tmp_path / "report-2026-01.pdf"
    report.write_bytes(fresh_content())
    done = run_starter("artifact", "put", str(report), database_url=stack.database_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "sha256": hashlib.sha256(report.read_bytes()).hexdigest(),
        "size_bytes": report.stat().st_size,
        "media_type": "application/pdf",  # guessed from the name
        "filename": "report-2026-01.pdf",
    }


async def test_starter_artifact_put_names_a_missing_file_before_connecting(tmp_path: Path) -> None:
    """A missing FILE is one line naming the argument, even with a database that cannot be reached."""
    unreachable = "postgresql://herald@127.0.0.1:1/herald?connect_timeout=1"
    done = run_starter("artifact", "put", str(tmp_path / "absent.pdf"), database_url=unreachable)
    assert done.returncode != 0
    assert done.stderr == "error: FILE: no such file\n"
    assert done.stdout == ""
