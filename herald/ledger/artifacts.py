"""Where artifacts live: ``ArtifactStore``, the one interface callers use (so an object store can
replace PostgreSQL), and the PostgreSQL store in the ledger's database (table ``artifacts``)."""

from __future__ import annotations

from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from herald.core.artifacts import ArtifactRef, ArtifactRefused, StoredArtifact, artifact_ref


class ArtifactStore(Protocol):
    """Where artifacts live. Content-addressed: putting the same bytes again returns the same ref."""

    async def put(self, content: bytes, *, media_type: str, filename: str) -> ArtifactRef: ...

    async def load(self, sha256: str) -> StoredArtifact | None: ...


class PostgresArtifactStore:
    """Artifacts in the ledger's database (table ``artifacts``, append-only)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def put(self, content: bytes, *, media_type: str, filename: str) -> ArtifactRef:
        """Store ``content`` once and return the ref of the stored row.

        The same bytes put again insert nothing, and the ref returned is the stored one: the
        media type and filename of the *first* put stay, whatever a later put passed. A put
        retried after a lost answer is therefore harmless.
        """
        ref = artifact_ref(content, media_type=media_type, filename=filename)
        async with self._pool.connection() as conn, conn.transaction():
            # %b sends the bytes in binary: no hex text twice their size.
            await conn.execute(
                """INSERT INTO artifacts (sha256, size_bytes, media_type, filename, content)
                   VALUES (%s, %s, %s, %s, %b) ON CONFLICT (sha256) DO NOTHING""",
                (ref.sha256, ref.size_bytes, ref.media_type, ref.filename, content),
            )
            # A second statement, so a row committed by a concurrent put of the same bytes (which
            # the insert waited for) is visible here.
            cursor = await conn.execute(
                "SELECT sha256, size_bytes, media_type, filename FROM artifacts WHERE sha256 = %s", (ref.sha256,)
            )
            sha256, size_bytes, stored_media_type, stored_filename = await cursor.fetchone()
        if size_bytes != ref.size_bytes:
            # Erased with a recipient (migration 016): the row keeps the key, not the bytes, and the
            # same bytes are never stored again under it (an intent would send an empty file).
            raise ArtifactRefused("content", "was erased with its recipient's data and cannot be stored again")
        return ArtifactRef(sha256=sha256, size_bytes=size_bytes, media_type=stored_media_type, filename=stored_filename)

    async def load(self, sha256: str) -> StoredArtifact | None:
        """The artifact stored under ``sha256``, unchecked (``verify`` checks it), or None."""
        async with self._pool.connection() as conn, conn.cursor(binary=True) as cursor:
            await cursor.execute(
                "SELECT sha256, size_bytes, media_type, filename, content FROM artifacts WHERE sha256 = %s", (sha256,)
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        stored_sha256, size_bytes, media_type, filename, content = row
        ref = ArtifactRef(sha256=stored_sha256, size_bytes=size_bytes, media_type=media_type, filename=filename)
        return StoredArtifact(ref=ref, content=bytes(content))
